import {
  batchEntryOptions,
  type BatchOptions,
  type Engine,
  type EngineOptions,
  type ExecuteOptions,
} from "../engine/engine.js";
import { runBatch, type BatchOutcome } from "../engine/batch.js";
import type { ExecOutcome } from "../engine/result.js";
import { isScratchRunError, ScratchRunError } from "../errors.js";
import type { ExecEngine } from "../mcp/server.js";
import type { SessionOps } from "../mcp/session-tools.js";
import type { Ceiling } from "../policy/host.js";
import type { KeyPolicy } from "../policy/key-policy.js";
import { resolveCallerPolicy, type CallerPolicy } from "../policy/resolve.js";
import type { ExecRequest } from "../schema/exec.js";
import type { RunStart, RunStore } from "../store/runs.js";
import type { SessionRow, SessionStore } from "../store/sessions.js";
import { parseSessionStart, type SessionInfo } from "../schema/session.js";
import { SessionRecorder, sessionLost, type SessionPlacement } from "./session-records.js";
import type { Logger } from "../http/log.js";
import type { Metrics } from "../http/metrics.js";
import { RetryLater } from "../http/respond.js";
import type { KeyLimits, KeyQuota } from "../policy/quota.js";
import type { SandboxTracker } from "../store/sandbox-tracker.js";
import { LIMITS } from "../schema/limits.js";

/**
 * How long an input of a call with `inputs` waits for its key's slot or rate (the engine's queue
 * waits as long), and how often it looks again while its key's slots are taken.
 */
const BATCH_WAIT_MS = 60_000;
const BATCH_POLL_MS = 100;

/** Resolves after `ms`, or at once when `signal` aborts. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** Seconds a client is told to wait when the engine's own queue is full or its deadline passed. */
const ENGINE_BUSY_RETRY_S = 2;

/**
 * How long after a call leaves the queue its run is marked running. A shorter call gets its
 * start written with its end: on an API replica each statement is a round trip to Postgres on
 * the call's path (decision 0008, "third pass").
 */
export const STARTED_RECORD_DELAY_MS = 250;

export interface Caller {
  keyId: string;
  transport: "rest" | "mcp";
  /** What the key may do: its own policy over the server's (ExecService.policyFor). */
  policy: CallerPolicy;
}

/** The engine behind the service, and the most any call may get there. */
export type ServiceEngine = ExecEngine & {
  readonly ceiling: Ceiling;
  /** The server's egress allowlist (a key's own is shown within it); an API replica has none. */
  readonly options: Pick<EngineOptions, "runtimes" | "egressAllowlist">;
  /**
   * Sessions (src/engine/sessions.ts; an API replica's: on its workers). A started session may
   * say where it lives (`placement`: an API replica's worker), which its record keeps.
   */
  startSession?: (
    ...args: Parameters<Engine["startSession"]>
  ) => Promise<SessionInfo & { placement?: SessionPlacement }>;
  endSession?: Engine["endSession"];
  /** Whether it keeps sessions at all (off: the session tools are not listed). */
  readonly sessionsOn?: boolean;
  /** Tells the listener of each session's end (its record is closed then). */
  onSessionEnd?: Engine["onSessionEnd"];
  /** Ends the sessions this process holds (a single server's shutdown). */
  endAllSessions?: Engine["endAllSessions"];
};

export type { SessionPlacement };

export type Admitted =
  | { ok: true; runId: string; release: () => void }
  | { ok: false; reason: "concurrency" | "rate"; retryAfterS: number };

/**
 * Per-key quota and the run's first record, in one step: in memory plus the local store for one
 * server (`localAdmission`), one Postgres transaction for API replicas (src/cluster/api-role.ts).
 */
export interface CallAdmission {
  /** `sessionRecord`: the record of the session the call runs in, which its run names. */
  admit(
    caller: Caller,
    req: ExecRequest,
    now: number,
    sessionRecord?: string | null,
  ): Promise<Admitted>;
}

/** One server: the in-memory quota, then the run's row. */
export function localAdmission(quota: KeyQuota, runs: RunStore): CallAdmission {
  return {
    async admit(caller, req, now, sessionRecord = null) {
      const decision = quota.tryAcquire(caller.keyId, now, caller.policy.quota);
      if (!decision.ok) return decision;
      try {
        const runId = await runs.begin(caller.keyId, caller.transport, req, now, {
          sessionRecord,
        });
        return { ok: true, runId, release: decision.release };
      } catch (e) {
        decision.release();
        throw e;
      }
    },
  };
}

/**
 * Every HTTP call (REST or MCP) goes through here on its way to the engine (the local one, or
 * an API replica's dispatcher to workers): per-key quota, a run record, metrics, and the
 * in-flight count that shutdown drains.
 */
export class ExecService {
  private inFlight = 0;
  private draining = false;
  private idle: (() => void)[] = [];

  private readonly policies = new Map<string, CallerPolicy>();

  readonly engine: ServiceEngine;
  private readonly runs: RunStore;
  private readonly admission: CallAdmission;
  private readonly metrics: Metrics;
  private readonly log: Logger;
  /** The server-wide per-key quota (a key's policy may set its own). */
  private readonly keyLimits: KeyLimits;
  private readonly tracker: SandboxTracker | undefined;
  /** The sessions' records (absent: none kept). */
  private readonly recorder: SessionRecorder | undefined;
  /** Sessions one key keeps at once, starting ones included, across every replica. */
  private readonly sessionsPerKey: number;

  constructor(o: {
    engine: ServiceEngine;
    runs: RunStore;
    admission: CallAdmission;
    metrics: Metrics;
    log: Logger;
    keyLimits: KeyLimits;
    tracker?: SandboxTracker | undefined;
    sessions?: SessionStore | undefined;
    /** The API replica this service is (its session records name it). */
    replicaId?: string | undefined;
    /** Sessions one key keeps at once (SCRATCHRUN_SESSIONS_PER_KEY), held by their records. */
    sessionsPerKey?: number | undefined;
  }) {
    this.engine = o.engine;
    this.runs = o.runs;
    this.admission = o.admission;
    this.metrics = o.metrics;
    this.log = o.log;
    this.keyLimits = o.keyLimits;
    this.tracker = o.tracker;
    this.recorder = o.sessions
      ? new SessionRecorder(o.engine, o.sessions, o.log, o.replicaId)
      : undefined;
    this.sessionsPerKey = o.sessionsPerKey ?? LIMITS.session.perCaller;
  }

  /**
   * At shutdown, after the drain: ends the sessions this process holds (a single server's; an API
   * replica's live on their workers) and waits until their records are closed.
   */
  async closeSessions(): Promise<void> {
    await this.engine.endAllSessions?.();
    await this.recorder?.close();
  }

  /**
   * What a key may do: its policy (null: none) over the server's, capped by the ceiling of
   * where its calls run. Computed once per distinct policy.
   */
  policyFor(key: KeyPolicy | null): CallerPolicy {
    const k = JSON.stringify(key);
    let p = this.policies.get(k);
    if (!p) {
      if (this.policies.size >= 1024) this.policies.clear();
      p = resolveCallerPolicy({
        server: this.engine.policy,
        ceiling: this.engine.ceiling,
        quota: this.keyLimits,
        key,
        serverAllowlist: this.engine.options.egressAllowlist ?? null,
      });
      this.policies.set(k, p);
    }
    return p;
  }

  get active(): number {
    return this.inFlight;
  }

  get isDraining(): boolean {
    return this.draining;
  }

  /** Deadlines (ms since the epoch) of the calls in flight: arrival + their timeout. */
  private readonly deadlines = new Map<object, number>();

  /**
   * The latest deadline of a call in flight (0: none), so a drain waits as long as a raised
   * limit lets a call run, not a fixed time.
   */
  latestDeadline(): number {
    let latest = 0;
    for (const d of this.deadlines.values()) latest = Math.max(latest, d);
    return latest;
  }

  /**
   * An engine-shaped object for one caller, for the MCP server of that caller's session: its
   * policy (the tool schema it lists, what its calls are parsed with) is read at each use, so a
   * key updated meanwhile is held to its new policy from the session's next request.
   */
  forCaller(caller: () => Caller): ExecEngine {
    const engine = this.engine;
    return {
      backend: { isolation: engine.backend.isolation },
      get networkNote() {
        return caller().policy.networkNote ?? engine.networkNote;
      },
      get policy() {
        return caller().policy.call;
      },
      options: { runtimes: engine.options.runtimes },
      execute: (req: ExecRequest, options: ExecuteOptions = {}) => this.run(caller(), req, options),
      executeBatch: (req: ExecRequest, options: BatchOptions = {}) =>
        this.runBatch(caller(), req, options),
      sessionOps: this.sessionsFor(caller),
    };
  }

  /**
   * The caller's sessions, where this service's engine keeps them (a local engine; an API
   * replica's workers): bound to the caller's key, held to its policy.
   */
  sessionsFor(caller: () => Caller): SessionOps | undefined {
    const engine = this.engine;
    if (!engine.startSession || !engine.endSession || !engine.sessionsOn) return undefined;
    const start = engine.startSession.bind(engine);
    const end = engine.endSession.bind(engine);
    return {
      start: async (input, signal) => {
        if (this.draining)
          throw new ScratchRunError("NOT_READY", "The server is shutting down", {
            fix: "Retry against another instance or after it restarts",
          });
        const c = caller();
        const recorder = this.recorder;
        // The key's slot is taken before anything starts, counted with its starting sessions;
        // the request is parsed first so that a bad one takes none.
        const slot = recorder
          ? await recorder.reserve(c, parseSessionStart(input, c.policy.call), this.sessionsPerKey)
          : null;
        try {
          const { placement, ...info } = await start(input, {
            owner: c.keyId,
            policy: c.policy.call,
            ...(c.policy.egressAllow ? { egressAllow: c.policy.egressAllow } : {}),
            ...(signal ? { signal } : {}),
          });
          // Its caller went away while it started: nobody holds the id, so nobody may keep it.
          if (signal?.aborted) {
            await end(info.session_id, c.keyId).catch(() => {});
            throw new ScratchRunError(
              "SANDBOX_FAILED",
              "the session's start was cancelled (its caller went away); its sandbox is destroyed",
            );
          }
          if (recorder && slot !== null) await recorder.started(slot, c, info, placement);
          return info;
        } catch (e) {
          if (recorder && slot !== null) await recorder.release(slot);
          throw e;
        }
      },
      end: (id) => end(id, caller().keyId),
    };
  }

  async run(caller: Caller, req: ExecRequest, options: ExecuteOptions = {}): Promise<ExecOutcome> {
    if (this.draining)
      throw new ScratchRunError("NOT_READY", "The server is shutting down", {
        fix: "Retry against another instance or after it restarts",
      });
    // The caller's policy was checked once, by the parse every front end runs with it (REST's
    // parseExecRequest(body, caller.policy.call), the MCP tool's with forCaller's policy): a call
    // outside it never got here. The engine checks the host's ceiling; a worker its own.
    // Counted from before the (asynchronous) admission, so a drain never misses a call.
    this.inFlight++;
    const token = {};
    // The engine's queue deadline and the sandbox's start come on top of the call's own timeout.
    this.deadlines.set(token, Date.now() + req.timeout_ms + 60_000);
    try {
      return await this.admitted(caller, req, options);
    } finally {
      this.deadlines.delete(token);
      this.inFlight--;
      if (this.inFlight === 0) for (const wake of this.idle.splice(0)) wake();
    }
  }

  /**
   * A call with `inputs` (src/engine/batch.ts): each input is a run of the key, admitted and
   * recorded as a call is, so never more of the key's sandboxes run at once than its concurrency
   * allows, and on an API replica each is placed on a worker as a call is. At most the key's
   * concurrency of inputs run at once. The first input is admitted or refused before any other
   * asks: refused by the key's quota, the call is refused as a single call is, before anything
   * ran; admitted, an input the quota refuses waits for a slot (the call's own inputs free them)
   * up to BATCH_WAIT_MS. (Inputs asking at once could each be refused before any was admitted,
   * and be answered as not run while the others ran.)
   */
  async runBatch(
    caller: Caller,
    req: ExecRequest,
    options: BatchOptions = {},
  ): Promise<BatchOutcome> {
    if (this.draining)
      throw new ScratchRunError("NOT_READY", "The server is shutting down", {
        fix: "Retry against another instance or after it restarts",
      });
    const count = req.inputs?.length ?? 1;
    const width = Math.max(1, Math.min(caller.policy.quota.maxConcurrent, count));
    this.inFlight++;
    const token = {};
    // Rounds of `width` inputs, each with the engine's queue and the sandbox's start on top.
    this.deadlines.set(
      token,
      Date.now() + Math.ceil(count / width) * (req.timeout_ms + 60_000) + BATCH_WAIT_MS,
    );
    // The first input's admission, decided before any other input asks; its quota refusal.
    let decide = () => {};
    const firstDecided = new Promise<void>((resolve) => (decide = resolve));
    let refusal: RetryLater | null = null;
    try {
      return await runBatch(req, {
        width,
        isolation: this.engine.backend.isolation,
        signal: options.signal,
        ...(options.onEntryDone ? { onDone: options.onEntryDone } : {}),
        refuses: (e) => refusal !== null && e === refusal,
        run: async (entry, i) => {
          if (i > 0) {
            await firstDecided;
            if (refusal) throw refusal;
          }
          const until = Date.now() + BATCH_WAIT_MS;
          let admitted = false;
          for (;;) {
            try {
              return await this.admitted(caller, entry, batchEntryOptions(options, i), () => {
                admitted = true;
                if (i === 0) decide();
              });
            } catch (e) {
              if (i === 0 && !admitted) {
                if (e instanceof RetryLater) refusal = e;
                decide();
                throw e;
              }
              if (!(e instanceof RetryLater) || Date.now() >= until) throw e;
              if (options.signal?.aborted) throw e;
              // A slot of this key frees when one of its calls ends (this call's own, mostly).
              await sleep(Math.min(e.retryAfterS * 1000, BATCH_POLL_MS), options.signal);
            }
          }
        },
      });
    } finally {
      this.deadlines.delete(token);
      this.inFlight--;
      if (this.inFlight === 0) for (const wake of this.idle.splice(0)) wake();
    }
  }

  private async admitted(
    caller: Caller,
    req: ExecRequest,
    options: ExecuteOptions,
    onAdmitted?: () => void,
  ): Promise<ExecOutcome> {
    const arrived = Date.now();
    let sessionRecord: SessionRow | undefined;
    if (req.session_id !== undefined) {
      const own = await this.recorder?.own(caller, req.session_id);
      if (own?.end_reason === "lost") {
        this.metrics.refused.inc({ reason: "SESSION_LOST" });
        throw sessionLost();
      }
      // An ended session's id is answered as an unknown one, wherever the call goes next.
      if (own?.ended_at === null) sessionRecord = own;
    }
    const decision = await this.admission.admit(caller, req, arrived, sessionRecord?.id ?? null);
    if (!decision.ok) {
      this.metrics.refused.inc({ reason: `key_${decision.reason}` });
      throw new RetryLater(
        decision.reason === "concurrency"
          ? "Too many calls in flight for this API key"
          : "Call rate limit reached for this API key",
        decision.retryAfterS,
      );
    }
    const { runId } = decision;
    onAdmitted?.();
    // Record writes of one run go in order (a late "started" must not follow "finished").
    let recorded: Promise<void> = Promise.resolve();
    const record = (write: () => Promise<void>) =>
      (recorded = recorded.then(write).catch((e: unknown) => {
        this.log.error(
          { run: runId, err: e instanceof Error ? e.message : String(e) },
          "run record write failed",
        );
      }));
    // "running" is written STARTED_RECORD_DELAY_MS after the call left the queue; a call that
    // ends sooner has its start written with its end (one statement on its path, not two).
    let start: RunStart | null = null;
    let startLater: NodeJS.Timeout | undefined;
    /** The start when it is not written yet; it will not be written on its own any more. */
    const unwrittenStart = (): RunStart | null => {
      if (startLater === undefined) return null;
      clearTimeout(startLater);
      startLater = undefined;
      return start;
    };
    try {
      const outcome = await this.engine.execute(req, {
        ...options,
        owner: caller.keyId,
        runId,
        ...(sessionRecord?.worker
          ? {
              sessionPlacement: {
                worker: sessionRecord.worker,
                workerId: sessionRecord.worker_id,
                record: sessionRecord.id,
              },
            }
          : {}),
        ...(caller.policy.egressAllow ? { egressAllow: caller.policy.egressAllow } : {}),
        onProgress: (p) => {
          if (p.stage === "starting" && !start) {
            const s: RunStart = { at: Date.now(), worker: p.worker };
            start = s;
            startLater = setTimeout(() => {
              startLater = undefined;
              void record(() => this.runs.started(runId, s.at, s.worker ?? null));
            }, STARTED_RECORD_DELAY_MS);
          }
          if (p.stage === "running") void this.tracker?.sandboxRunning();
          options.onProgress?.(p);
        },
      });
      const unwritten = unwrittenStart();
      await record(() => this.runs.finished(runId, outcome, Date.now(), unwritten));
      const seconds = (Date.now() - arrived) / 1000;
      this.metrics.calls.inc({ runtime: req.runtime, exit_reason: outcome.result.exit_reason });
      this.metrics.latency.observe({ runtime: req.runtime }, seconds);
      this.log.info(
        {
          run: runId,
          key_id: caller.keyId,
          transport: caller.transport,
          runtime: req.runtime,
          exit_reason: outcome.result.exit_reason,
          ms: Date.now() - arrived,
        },
        "run finished",
      );
      return outcome;
    } catch (e) {
      const code = isScratchRunError(e) ? e.code : "INTERNAL";
      const unwritten = unwrittenStart();
      await record(() => this.runs.failed(runId, code, Date.now(), unwritten));
      this.metrics.refused.inc({ reason: code });
      this.log.warn({ run: runId, key_id: caller.keyId, code }, "run failed");
      if (isScratchRunError(e) && e.code === "BUSY" && !(e instanceof RetryLater))
        throw new RetryLater(e.message, ENGINE_BUSY_RETRY_S);
      throw e;
    } finally {
      decision.release();
      void this.tracker?.callEnded();
    }
  }

  /** Refuses new calls and resolves once every call in flight has finished. */
  async drain(): Promise<void> {
    this.draining = true;
    if (this.inFlight === 0) return;
    await new Promise<void>((resolve) => this.idle.push(resolve));
  }
}
