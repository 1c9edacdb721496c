import type { Engine, ExecuteOptions } from "../engine/engine.js";
import type { ExecOutcome } from "../engine/result.js";
import { isScratchRunError, ScratchRunError } from "../errors.js";
import type { ExecRequest } from "../schema/exec.js";
import type { RunStore } from "../store/runs.js";
import type { Logger } from "./log.js";
import type { Metrics } from "./metrics.js";
import type { KeyQuota } from "./quota.js";
import type { SandboxTracker } from "./tracker.js";

/** A refusal the client should retry later: HTTP 429 with Retry-After, MCP "BUSY: ...". */
export class RetryLater extends ScratchRunError {
  constructor(
    message: string,
    readonly retryAfterS: number,
  ) {
    super("BUSY", message);
  }
}

/** Seconds a client is told to wait when the engine's own queue is full or its deadline passed. */
const ENGINE_BUSY_RETRY_S = 2;

export interface Caller {
  keyId: string;
  transport: "rest" | "mcp";
}

/**
 * Every HTTP call (REST or MCP) goes through here on its way to the one engine: per-key quota,
 * a run record, metrics, and the in-flight count that shutdown drains.
 */
export class ExecService {
  private inFlight = 0;
  private draining = false;
  private idle: (() => void)[] = [];

  constructor(
    readonly engine: Engine,
    private readonly runs: RunStore,
    private readonly quota: KeyQuota,
    private readonly metrics: Metrics,
    private readonly log: Logger,
    private readonly tracker?: SandboxTracker,
  ) {}

  get active(): number {
    return this.inFlight;
  }

  get isDraining(): boolean {
    return this.draining;
  }

  /** An engine-shaped object for one caller, for the MCP server of that caller's session. */
  forCaller(caller: Caller) {
    return {
      backend: { isolation: this.engine.backend.isolation },
      networkNote: this.engine.networkNote,
      options: { runtimes: this.engine.options.runtimes },
      execute: (req: ExecRequest, options: ExecuteOptions = {}) => this.run(caller, req, options),
    };
  }

  async run(caller: Caller, req: ExecRequest, options: ExecuteOptions = {}): Promise<ExecOutcome> {
    if (this.draining)
      throw new ScratchRunError("NOT_READY", "The server is shutting down", {
        fix: "Retry against another instance or after it restarts",
      });
    const decision = this.quota.tryAcquire(caller.keyId);
    if (!decision.ok) {
      this.metrics.refused.inc({ reason: `key_${decision.reason}` });
      throw new RetryLater(
        decision.reason === "concurrency"
          ? "Too many calls in flight for this API key"
          : "Call rate limit reached for this API key",
        decision.retryAfterS,
      );
    }
    this.inFlight++;
    const arrived = Date.now();
    const runId = this.runs.begin(caller.keyId, caller.transport, req, arrived);
    try {
      const outcome = await this.engine.execute(req, {
        ...options,
        onProgress: (p) => {
          if (p.stage === "starting") this.runs.started(runId);
          if (p.stage === "running") void this.tracker?.sandboxRunning();
          options.onProgress?.(p);
        },
      });
      this.runs.finished(runId, outcome);
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
      this.runs.failed(runId, code);
      this.metrics.refused.inc({ reason: code });
      this.log.warn({ run: runId, key_id: caller.keyId, code }, "run failed");
      if (isScratchRunError(e) && e.code === "BUSY" && !(e instanceof RetryLater))
        throw new RetryLater(e.message, ENGINE_BUSY_RETRY_S);
      throw e;
    } finally {
      decision.release();
      void this.tracker?.callEnded();
      this.inFlight--;
      if (this.inFlight === 0) for (const wake of this.idle.splice(0)) wake();
    }
  }

  /** Refuses new calls and resolves once every call in flight has finished. */
  async drain(): Promise<void> {
    this.draining = true;
    if (this.inFlight === 0) return;
    await new Promise<void>((resolve) => this.idle.push(resolve));
  }
}
