import type { Logger } from "../http/log.js";
import type { KeyPolicy } from "../policy/key-policy.js";
import type { CallerPolicy } from "../policy/resolve.js";
import type { OpenSessionKey, SessionStore } from "../store/sessions.js";

/**
 * Sessions are held to their key as it is now, not as it was when they started. A call's policy
 * is read at each request, so a narrowed timeout or rate holds from a session's next cell; but a
 * session's sandbox was made with its runtime, network and memory, and a key narrowed below them
 * (or revoked) no longer admits it: such a session ends at once, its record closed with reason
 * `policy`, its sandbox destroyed where it lives (this server's engine, or its worker). The sweep
 * reads every open session's record with its key's stored policy, once a second and at once when
 * this server changed a key (the console), so a change made elsewhere (`scratchrun keys`, another
 * replica) holds within a second.
 */
export interface SessionPolicyDeps {
  records: SessionStore;
  /** The policy a key's stored policy gives on this server (ExecService.policyFor). */
  policyFor(key: KeyPolicy | null): CallerPolicy;
  /** Ends the session where it lives (its record is closed already). */
  end(s: OpenSessionKey): Promise<void>;
  log: Logger;
  everyMs?: number;
}

/** Pure: whether a key's policy still admits a session made with this runtime, network, memory. */
export function admits(
  policy: CallerPolicy,
  s: { runtime: string; network: string; memoryMb: number },
): boolean {
  return (
    (policy.call.runtimes as readonly string[]).includes(s.runtime) &&
    (s.network !== "public" || policy.call.networks.includes("public")) &&
    s.memoryMb <= policy.call.memoryMb.max
  );
}

export class SessionPolicyWatch {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | null = null;
  private again = false;

  constructor(private readonly d: SessionPolicyDeps) {}

  start(): void {
    this.timer = setInterval(() => this.poke(), this.d.everyMs ?? 1000);
    this.timer.unref();
  }

  /** Sweeps now (once more after the one running, if one is). */
  poke(): void {
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.sweep()
      .catch((e: unknown) =>
        this.d.log.warn(
          { err: e instanceof Error ? e.message : String(e) },
          "session policy sweep failed",
        ),
      )
      .finally(() => {
        this.running = null;
        if (this.again) {
          this.again = false;
          this.poke();
        }
      });
  }

  /** Resolves once the sweep running now (and any asked for meanwhile) has finished. */
  async settled(): Promise<void> {
    while (this.running) await this.running;
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.again = false;
    await this.running;
  }

  private async sweep(): Promise<void> {
    for (const s of await this.d.records.openWithKeys()) {
      if (!s.revoked && admits(this.d.policyFor(s.policy), s)) continue;
      // The record first: whichever end the engine reports next keeps this reason.
      if (!(await this.d.records.end(s.recordId, "policy", null))) continue;
      this.d.log.info(
        {
          key_id: s.keyId,
          runtime: s.runtime,
          reason: s.revoked ? "key revoked or expired" : "key narrowed",
        },
        "session ended: its key no longer admits it",
      );
      await this.d.end(s);
    }
  }
}
