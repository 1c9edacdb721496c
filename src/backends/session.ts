/**
 * A session's sandbox, the same on every backend (docs/decisions/0013-sessions.md): one sandbox
 * whose agent reads one request after another (the `Q` says so), each call driven by the same
 * agent session as a one-off call, the stream kept between calls. Backends differ in how they
 * get the sandbox and what the host counts of it, not in this.
 */
import type { Readable, Writable } from "node:stream";
import { runAgentSession } from "../protocol/session.js";
import { HOST_GRACE_MS, type Teardowns } from "./call.js";
import type { Refusal } from "../net/proxy/reasons.js";
import type { Isolation, NetworkReport, SessionSandbox } from "./types.js";
import type { Flavour } from "./prestart.js";

export type { SessionSandbox } from "./types.js";

/** What a backend hands over for a session: a sandbox past READY and how to count and stop it. */
export interface SessionParts {
  input: Readable;
  output: Writable;
  /** The kernel script's path inside the sandbox (the runtime's), or null (bash). */
  kernel: string | null;
  /**
   * The interpreter the sandbox pre-started (a clone of a microVM template has one; guest/
   * prestart.py), or null. The session's first kernel may be it (the agent adopts it when a fresh
   * kernel would have started as it did): a plain one for any first cell, a pre-imported one only
   * for a first cell a one-off call would have given a pre-imported interpreter.
   */
  prestarted: Flavour | null;
  /**
   * The sandbox has a kernel and clock of its own (microVM) that stand still while it is paused:
   * each call tells its agent the host's time to set first.
   */
  ownClock: boolean;
  /** What the host counted of the sandbox so far (its cgroup's OOM kills, what its network refused). */
  counters(): Promise<{ oomKills: number; network?: NetworkReport | undefined }>;
  /** Settles when the sandbox stopped by itself (its agent or VM exited). */
  exited: Promise<void>;
  /**
   * Stops the sandbox between calls (a frozen cgroup; a stopped VM): nothing in it runs until
   * resume(). The backend pauses it once before handing it over; a failure leaves it running.
   */
  pause(): Promise<void>;
  /** Lets it run again, before a call. A failure ends the session (the call cannot run). */
  resume(): Promise<void>;
  kill(): Promise<void>;
  destroy(): Promise<void>;
}

export function sessionSandbox(
  parts: SessionParts,
  ctx: { isolation: Isolation; teardowns: Teardowns },
): SessionSandbox {
  let broken = false;
  let running = false;
  let closed: Promise<void> | undefined;
  let seen: { oomKills: number; network?: NetworkReport | undefined } = { oomKills: 0 };
  void parts.exited.then(() => (broken = true));
  const close = () =>
    (closed ??= (async () => {
      broken = true;
      await parts.kill().catch(() => {});
      ctx.teardowns.add(parts.destroy());
    })());
  return {
    get broken() {
      return broken;
    },
    async run(request, options, flavour = "plain") {
      if (broken) throw new Error("the session's sandbox is gone");
      if (running) throw new Error("a session runs one call at a time");
      running = true;
      try {
        try {
          await parts.resume();
        } catch (cause) {
          await close();
          throw new Error(`the session's sandbox could not be resumed: ${String(cause)}`, {
            cause,
          });
        }
        const agent = await runAgentSession(
          { input: parts.input, output: parts.output },
          {
            ...request,
            ...(parts.ownClock ? { clockMs: Date.now() } : {}),
            session: {
              kernel: parts.kernel,
              ...(parts.prestarted !== null &&
              (parts.prestarted === "plain" || flavour === "preimport")
                ? { adopt: true }
                : {}),
            },
          },
          {
            signal: options.signal,
            hardDeadlineMs: request.timeoutMs + HOST_GRACE_MS,
            alreadyReady: true,
            keepOpen: true,
            ...(options.onEvent ? { onEvent: options.onEvent } : {}),
          },
        );
        // A call the agent did not finish leaves the stream somewhere in its protocol: the
        // session cannot go on from there.
        if (agent.failure !== null) await close();
        const now = await parts.counters().catch(() => seen);
        const network = now.network && sinceLast(now.network, seen.network);
        const oomKills = now.oomKills - seen.oomKills;
        seen = now;
        return {
          agent,
          isolation: ctx.isolation,
          oomKilled: oomKills > 0 || (agent.exit?.oomKills ?? 0) > 0,
          sandboxReadyMs: 0,
          ...(network ? { network } : {}),
        };
      } finally {
        // Paused before the result leaves: nothing the call started runs until the next call.
        if (!broken) await parts.pause().catch(() => {});
        running = false;
      }
    },
    close,
  };
}

/** A network's report for one call: what was refused since the session's previous call. */
function sinceLast(now: NetworkReport, before: NetworkReport | undefined): NetworkReport {
  const key = (r: Refusal) => `${r.host ?? ""}\0${r.port}\0${r.reason}`;
  const old = new Map((before?.refused ?? []).map((r) => [key(r), r.count]));
  const refused = (now.refused ?? [])
    .map((r) => ({ ...r, count: r.count - (old.get(key(r)) ?? 0) }))
    .filter((r) => r.count > 0);
  return {
    blockedPackets: now.blockedPackets - (before?.blockedPackets ?? 0),
    ...(now.refused ? { refused } : {}),
  };
}
