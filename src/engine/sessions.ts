/**
 * Sessions (docs/decisions/0013-sessions.md): a sandbox asked for, kept between one caller's
 * calls, bounded by an idle and a total lifetime, and destroyed at its end exactly as a call's
 * sandbox is. A call without a session_id never comes here.
 *
 * A session belongs to the caller that started it (an API key's id; "stdio" for the local
 * client): another caller's id is answered exactly as an unknown one (SESSION_NOT_FOUND), from one
 * map lookup, so nothing tells the two apart.
 */
import { createHash, randomBytes } from "node:crypto";
import type { Egress } from "../backends/egress.js";
import type { SessionSandbox } from "../backends/session.js";
import type { Backend } from "../backends/types.js";
import { ScratchRunError } from "../errors.js";
import type { AgentFile } from "../protocol/types.js";
import { runtimeEntry } from "../runtimes/table.js";
import type { ExecRequest } from "../schema/exec.js";
import type { SessionInfo, SessionStartRequest } from "../schema/session.js";
import type { Admission } from "./admission.js";
import { runAdmitted } from "./admitted-call.js";
import { flavourFor } from "./preimport-route.js";
import type { Preimport } from "../images/preimport.js";
import type { ExecOutcome } from "./result.js";
import type { AgentEvent } from "../protocol/types.js";

export interface SessionLimits {
  /** Sessions kept at once on this server (0: sessions are off). */
  perServer: number;
  /** Sessions one caller keeps at once. */
  perCaller: number;
  /** Memory (the sum of `memory_mb`) the server's sessions hold at once, starting ones included. */
  memoryMbPerServer: number;
  /** Memory one caller's sessions hold at once. */
  memoryMbPerCaller: number;
}

/**
 * Why a session ended (its records and the log say so): ended by its caller, idle or total
 * lifetime over, the server shutting down, its sandbox broken under a call (crashed), or its key
 * no longer admitting it (policy: revoked, or narrowed below its runtime, network or memory).
 */
export type SessionEnd = "ended" | "idle" | "lifetime" | "shutdown" | "crashed" | "policy";

/** Told of every session's end, after its sandbox is gone. */
export type SessionEndListener = (info: SessionInfo, why: SessionEnd) => void;

interface Session {
  readonly id: string;
  readonly owner: string;
  readonly runtime: ExecRequest["runtime"];
  readonly memoryMb: number;
  readonly network: "public" | "none";
  readonly idleTimeoutMs: number;
  readonly expiresAt: number;
  readonly sandbox: SessionSandbox;
  calls: number;
  /** The kernel's pid at the last call (a new pid: a fresh interpreter). */
  lastPid: number | null;
  /** The call running now, cancelled when the session ends under it. */
  running: AbortController | null;
  idleTimer: NodeJS.Timeout;
  lifeTimer: NodeJS.Timeout;
}

export interface SessionCallOptions {
  owner: string;
  signal?: AbortSignal;
  onEvent?: (e: AgentEvent) => void;
}

/** What a Sessions serves from: the engine's backend and admission, and the sessions' rules. */
export interface SessionsOptions {
  backend: Backend;
  /** The engine's admission: a session's cell waits for a slot as a call does. */
  admission: Admission;
  limits: SessionLimits;
  /** Files each runtime's session starts with. */
  seeds: Partial<Record<ExecRequest["runtime"], AgentFile[]>>;
  /** Each runtime's pre-import (a session's first cell is routed as a call's would be). */
  preimport?: Partial<Record<ExecRequest["runtime"], Preimport>>;
}

export class Sessions {
  private readonly byId = new Map<string, Session>();
  /** Sessions being started (counted against the limits while their sandbox boots). */
  private starting = 0;
  /** Sessions being started, per caller (counted against the caller's limit as open ones are). */
  private readonly startingBy = new Map<string, number>();
  /** Memory of the sessions being started, per caller (counted as `starting` is). */
  private readonly startingMb = new Map<string, number>();
  private closed = false;
  private readonly endListeners = new Set<SessionEndListener>();

  private readonly backend: Backend;
  private readonly admission: Admission;
  private readonly limits: SessionLimits;
  private readonly seeds: Partial<Record<ExecRequest["runtime"], AgentFile[]>>;
  private readonly preimport: Partial<Record<ExecRequest["runtime"], Preimport>>;

  constructor(o: SessionsOptions) {
    this.backend = o.backend;
    this.admission = o.admission;
    this.limits = o.limits;
    this.seeds = o.seeds;
    this.preimport = o.preimport ?? {};
  }

  /** Calls `listener` at every session's end (the service's records); returns the unsubscribe. */
  addEndListener(listener: SessionEndListener): () => void {
    this.endListeners.add(listener);
    return () => this.endListeners.delete(listener);
  }

  get count(): number {
    return this.byId.size;
  }

  /**
   * Starts a session for `owner`: checks the limits (before any sandbox starts), then opens a cold
   * sandbox. `network` and `egress` are the engine's decision for the session's network.
   */
  async start(
    owner: string,
    req: SessionStartRequest,
    network: "public" | "none",
    egress: Egress,
    signal?: AbortSignal,
  ): Promise<SessionInfo> {
    if (this.closed) throw new ScratchRunError("NOT_READY", "the server is shutting down");
    if (this.limits.perServer === 0)
      throw new ScratchRunError("INVALID_INPUT", "sessions are turned off on this server", {
        fix: "Run each call on its own (leave out session_id), or ask the operator to set SCRATCHRUN_SESSIONS_MAX",
      });
    const mine =
      [...this.byId.values()].filter((s) => s.owner === owner).length +
      (this.startingBy.get(owner) ?? 0);
    if (mine >= this.limits.perCaller)
      throw new ScratchRunError(
        "BUSY",
        `you have ${mine} sessions open, the most one caller may keep at once`,
        { fix: "End one with scratchrun_session_end first" },
      );
    if (this.byId.size + this.starting >= this.limits.perServer)
      throw new ScratchRunError(
        "BUSY",
        `the server keeps ${this.limits.perServer} sessions at once and has no room for another`,
        { fix: "Retry later, or run the call without a session" },
      );
    this.checkMemory(owner, req.memory_mb);
    this.starting++;
    this.startingBy.set(owner, (this.startingBy.get(owner) ?? 0) + 1);
    this.startingMb.set(owner, (this.startingMb.get(owner) ?? 0) + req.memory_mb);
    let sandbox: SessionSandbox;
    try {
      sandbox = await this.backend.openSession(
        { runtime: req.runtime, memoryMb: req.memory_mb, egress },
        signal ?? new AbortController().signal,
      );
    } catch (cause) {
      if (cause instanceof ScratchRunError) throw cause;
      throw new ScratchRunError(
        "SANDBOX_FAILED",
        `the session's sandbox did not start: ${String(cause)}`,
        {
          cause,
        },
      );
    } finally {
      this.starting--;
      const count = (this.startingBy.get(owner) ?? 0) - 1;
      if (count > 0) this.startingBy.set(owner, count);
      else this.startingBy.delete(owner);
      const left = (this.startingMb.get(owner) ?? 0) - req.memory_mb;
      if (left > 0) this.startingMb.set(owner, left);
      else this.startingMb.delete(owner);
    }
    if (this.closed) {
      await sandbox.close();
      throw new ScratchRunError("NOT_READY", "the server is shutting down");
    }
    // Its caller went away while the sandbox started: nobody would hold the id, so no session.
    if (signal?.aborted) {
      await sandbox.close();
      throw new ScratchRunError(
        "SANDBOX_FAILED",
        "the session's start was cancelled (its caller went away); its sandbox is destroyed",
      );
    }
    const id = randomBytes(16).toString("base64url");
    const now = Date.now();
    const session: Session = {
      id,
      owner,
      runtime: req.runtime,
      memoryMb: req.memory_mb,
      network,
      idleTimeoutMs: req.idle_timeout_ms,
      expiresAt: now + req.lifetime_ms,
      sandbox,
      calls: 0,
      lastPid: null,
      running: null,
      idleTimer: this.timer(id, "idle", req.idle_timeout_ms),
      lifeTimer: this.timer(id, "lifetime", req.lifetime_ms),
    };
    this.byId.set(id, session);
    return this.info(session);
  }

  /**
   * Refuses a session whose memory would take the caller's or the server's sessions past what they
   * may hold together (before any sandbox starts): INVALID_INPUT when it alone is more than that,
   * BUSY when the sessions already open (or starting) leave no room for it.
   */
  private checkMemory(owner: string, memoryMb: number): void {
    const held = (mine: boolean) => {
      let mb = 0;
      for (const s of this.byId.values()) if (!mine || s.owner === owner) mb += s.memoryMb;
      for (const [who, starting] of this.startingMb) if (!mine || who === owner) mb += starting;
      return mb;
    };
    const limits = [
      { max: this.limits.memoryMbPerCaller, held: held(true), whose: "your sessions" },
      { max: this.limits.memoryMbPerServer, held: held(false), whose: "the server's sessions" },
    ];
    for (const { max, held, whose } of limits) {
      if (memoryMb > max)
        throw new ScratchRunError(
          "INVALID_INPUT",
          `memory_mb: ${memoryMb} MB is more than the ${max} MB ${whose} may hold together`,
          { fix: `Start the session with memory_mb of at most ${max}` },
        );
      if (held + memoryMb > max)
        throw new ScratchRunError(
          "BUSY",
          `${whose} hold ${held} MB of the ${max} MB they may hold together; this session's ${memoryMb} MB does not fit`,
          {
            fix:
              whose === "your sessions"
                ? "End one with scratchrun_session_end, or start this one with a smaller memory_mb"
                : "Retry later, start this one with a smaller memory_mb, or run the call without a session",
          },
        );
    }
  }

  /** The caller's session, or SESSION_NOT_FOUND for every other id (unknown, ended, foreign). */
  private find(owner: string, id: string | undefined): Session {
    const s = id === undefined ? undefined : this.byId.get(id);
    if (!s || s.owner !== owner)
      throw new ScratchRunError(
        "SESSION_NOT_FOUND",
        "session_id: no such session (it ended, expired, or was never started by you)",
        {
          fix: "Start one with scratchrun_session_start, or leave out session_id for a fresh sandbox",
        },
      );
    return s;
  }

  info(s: Session): SessionInfo {
    return {
      session_id: s.id,
      runtime: s.runtime,
      memory_mb: s.memoryMb,
      network: s.network,
      isolation: this.backend.isolation,
      expires_at: new Date(s.expiresAt).toISOString(),
      idle_timeout_ms: s.idleTimeoutMs,
      calls: s.calls,
    };
  }

  /** Runs one call in the caller's session; refused with a clear error before anything runs. */
  async execute(req: ExecRequest, options: SessionCallOptions): Promise<ExecOutcome> {
    const s = this.find(options.owner, req.session_id);
    const named = (field: "memory_mb" | "network") => req.named.includes(field);
    const problems: string[] = [];
    if (req.runtime !== s.runtime)
      problems.push(`runtime: the session runs ${s.runtime}, not ${req.runtime}`);
    if (named("memory_mb") && req.memory_mb > s.memoryMb)
      problems.push(`memory_mb: the session's sandbox has ${s.memoryMb} MB (its calls share it)`);
    if (named("network") && req.network !== s.network)
      problems.push(`network: the session's network is "${s.network}"`);
    if (problems.length)
      throw new ScratchRunError("INVALID_INPUT", `Invalid request: ${problems.join("; ")}`);
    if (s.running)
      throw new ScratchRunError(
        "BUSY",
        "a call is running in this session; a session runs one call at a time",
        {
          fix: "Wait for it to finish, or run this call without session_id",
        },
      );
    const call = new AbortController();
    s.running = call;
    clearTimeout(s.idleTimer);
    const effective: ExecRequest = { ...req, memory_mb: s.memoryMb, network: s.network };
    try {
      const { result, outcome } = await runAdmitted({
        admission: this.admission,
        isolation: this.backend.isolation,
        codeIds: this.backend.codeIds,
        request: effective,
        seeds: s.calls === 0 ? this.seeds[s.runtime] : undefined,
        signal: options.signal,
        call,
        run: (request, signal) =>
          s.sandbox.run(
            request,
            { signal, ...(options.onEvent ? { onEvent: options.onEvent } : {}) },
            flavourFor(effective, this.preimport[s.runtime]),
          ),
      });
      // Cancelled while queued: answered as a cancelled call is (no cell ran).
      if (!outcome) return result;
      s.calls++;
      const pid = outcome.agent.pid;
      const interpreter =
        runtimeEntry(s.runtime).sessionScript === null
          ? ("none" as const)
          : pid !== null && pid === s.lastPid
            ? ("kept" as const)
            : ("fresh" as const);
      if (pid !== null) s.lastPid = pid;
      const ended = s.sandbox.broken;
      result.result.session = {
        session_id: s.id,
        calls: s.calls,
        expires_at: new Date(s.expiresAt).toISOString(),
        interpreter,
        ...(ended ? { ended: true } : {}),
      };
      if (ended) {
        const note = "The session's sandbox ended with this call; the session is over.";
        result.result.message = result.result.message ? `${result.result.message} ${note}` : note;
      }
      return result;
    } finally {
      s.running = null;
      if (s.sandbox.broken) await this.finish(s, "crashed");
      else if (this.byId.has(s.id)) s.idleTimer = this.timer(s.id, "idle", s.idleTimeoutMs);
    }
  }

  /** Ends the caller's session: a running call is cancelled, the sandbox destroyed. */
  async end(owner: string, id: string): Promise<SessionInfo> {
    const s = this.find(owner, id);
    const info = this.info(s);
    await this.finish(s, "ended");
    return info;
  }

  /**
   * Ends the caller's session whose id has this SHA-256 (hex), for `why` (a key that no longer
   * admits it: the records know sessions by digest only). False when there is none.
   */
  async endByDigest(owner: string, digest: string, why: SessionEnd): Promise<boolean> {
    for (const s of this.byId.values())
      if (s.owner === owner && createHash("sha256").update(s.id, "utf8").digest("hex") === digest) {
        await this.finish(s, why);
        return true;
      }
    return false;
  }

  /** Ends every session (server shutdown). */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.byId.values()].map((s) => this.finish(s, "shutdown")));
  }

  private timer(id: string, why: "idle" | "lifetime", ms: number): NodeJS.Timeout {
    const t = setTimeout(() => {
      const s = this.byId.get(id);
      if (s) void this.finish(s, why);
    }, ms);
    t.unref();
    return t;
  }

  private async finish(s: Session, why: SessionEnd): Promise<void> {
    if (this.byId.get(s.id) !== s) return;
    this.byId.delete(s.id);
    clearTimeout(s.idleTimer);
    clearTimeout(s.lifeTimer);
    s.running?.abort();
    await s.sandbox.close();
    const info = this.info(s);
    for (const listener of this.endListeners) listener(info, why);
  }
}
