/**
 * The shape of one call, the same on every backend: a sandbox for it (the backend's job: pooled,
 * cloned or cold), its allowlist set, the agent session under a hard deadline, what the host saw
 * (OOM kills, refused connections), then the sandbox killed before the call settles and removed
 * in the background. Backends differ in how they get and stop a sandbox, not in this.
 */
import type { Readable, Writable } from "node:stream";
import type { DomainAllowlist } from "../net/allowlist.js";
import { runAgentSession } from "../protocol/session.js";
import type { BackendOutcome, Isolation, NetworkReport, RunOptions, SandboxJob } from "./types.js";
import type { BrokerSpec } from "../net/proxy/control.js";
import { egressAllowlist, egressBroker } from "./egress.js";

/**
 * How long past the call's own timeout the host waits for the agent to report before it gives up
 * on the session: the agent enforces the timeout itself; this bounds a sandbox that stopped
 * answering.
 */
export const HOST_GRACE_MS = 3000;

/** A sandbox ready for one call, as the call skeleton drives it. */
export interface CallSandbox {
  /** The agent's byte streams. */
  input: Readable;
  output: Writable;
  /** The agent's READY was read already (a pooled or activated sandbox), else it is awaited. */
  alreadyReady: boolean;
  /**
   * A proxied network: the allowlist of this call (and its brokered secrets), set before its code
   * starts.
   */
  useAllowlist(allow: DomainAllowlist, broker?: BrokerSpec | null): Promise<void>;
  /**
   * After the agent session: what the host saw of the call (OOM kills its cgroup counted, what its
   * network refused). May stop the sandbox first if the counts are only final then.
   */
  observe(): Promise<{ oomKills: number; network?: NetworkReport | undefined }>;
  /** Every process of the sandbox exited once this settles. Idempotent. */
  kill(): Promise<void>;
  /** Removes what the sandbox had on the host (after kill). Idempotent. */
  destroy(): Promise<void>;
}

/** Host-side removals still running after their calls settled; close() waits for them. */
export class Teardowns {
  private readonly running = new Set<Promise<void>>();

  add(p: Promise<void>): void {
    const gone = p.catch(() => {});
    this.running.add(gone);
    void gone.then(() => this.running.delete(gone));
  }

  async drain(): Promise<void> {
    await Promise.all(this.running);
  }
}

/**
 * Runs the job's request in a sandbox the backend acquired at `startedAt` (which is when the call
 * asked for one: sandboxReadyMs counts the wait). The sandbox is killed before this settles,
 * whatever happens; its removal is added to `teardowns`.
 */
export async function runCall(
  sandbox: CallSandbox,
  job: SandboxJob,
  options: RunOptions,
  ctx: { isolation: Isolation; startedAt: number; teardowns: Teardowns },
): Promise<BackendOutcome> {
  try {
    const allow = egressAllowlist(job.egress);
    if (allow) await sandbox.useAllowlist(allow, egressBroker(job.egress));
    const sandboxReadyMs = Date.now() - ctx.startedAt;
    const agent = await runAgentSession(
      { input: sandbox.input, output: sandbox.output },
      job.request,
      {
        signal: options.signal,
        hardDeadlineMs: job.request.timeoutMs + HOST_GRACE_MS,
        alreadyReady: sandbox.alreadyReady,
        ...(options.onEvent ? { onEvent: options.onEvent } : {}),
      },
    );
    const seen = await sandbox.observe();
    return {
      agent,
      isolation: ctx.isolation,
      oomKilled: seen.oomKills > 0 || (agent.exit?.oomKills ?? 0) > 0,
      sandboxReadyMs,
      ...(seen.network ? { network: seen.network } : {}),
    };
  } finally {
    await sandbox.kill().catch(() => {});
    ctx.teardowns.add(sandbox.destroy());
  }
}
