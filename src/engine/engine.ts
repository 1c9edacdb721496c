import type { Backend } from "../backends/types.js";
import type { Manifest } from "../images/manifest.js";
import type { AgentEvent, AgentFile } from "../protocol/types.js";
import type { ExecRequest, RuntimeName } from "../schema/exec.js";
import { parseExecRequest } from "../schema/validate.js";
import { Admission } from "./admission.js";
import { toAgentRequest } from "./request.js";
import { toExecOutcome, type ExecOutcome } from "./result.js";

export interface EngineOptions {
  /** Sandboxes running at once; further calls queue. */
  maxConcurrent?: number;
  maxQueued?: number;
  queueDeadlineMs?: number;
  /** Force every call to network "none" whatever it asks. */
  forceNetworkNone?: boolean;
  /** Whether the backend can give sandboxes public egress at all. */
  publicNetworkAvailable?: boolean;
  /** One line on what network calls get here, for the tool description. */
  networkNote?: string;
  /** Why, with the operator's fix, for the startup log. */
  networkReason?: string;
  /** Runs after the backend closes (releases server-wide resources). */
  onClose?: () => Promise<void>;
  /** Files every call of a runtime starts with (caches the image prepared), before the caller's. */
  seedFiles?: Partial<Record<RuntimeName, AgentFile[]>>;
  /** What each runtime really is (from the image manifest), for scratchrun_runtimes. */
  runtimes?: { runtimes: Manifest["runtimes"]; notes: string[] };
}

export type Progress =
  | { stage: "queued" }
  | { stage: "starting" }
  | { stage: "running" }
  | { stage: "collecting" }
  | { stage: "output"; stream: "stdout" | "stderr"; chunk: Uint8Array };

export interface ExecuteOptions {
  signal?: AbortSignal;
  onProgress?: (p: Progress) => void;
}

/**
 * The one entry point every front end (MCP, HTTP, CLI) calls. It validates, admits, hands the
 * call to the backend, and maps whatever happened onto the result shape.
 */
export class Engine {
  readonly admission: Admission;

  constructor(
    readonly backend: Backend,
    readonly options: EngineOptions = {},
  ) {
    this.admission = new Admission(
      options.maxConcurrent ?? 4,
      options.maxQueued ?? 64,
      options.queueDeadlineMs ?? 60_000,
    );
  }

  /** Validates untrusted input (throws INVALID_INPUT before any sandbox starts) and executes. */
  async executeInput(input: unknown, options: ExecuteOptions = {}): Promise<ExecOutcome> {
    return this.execute(parseExecRequest(input), options);
  }

  async execute(request: ExecRequest, options: ExecuteOptions = {}): Promise<ExecOutcome> {
    const req: ExecRequest = { ...request, network: this.effectiveNetwork(request) };
    options.onProgress?.({ stage: "queued" });
    const release = await this.admission.acquire(options.signal);
    const controller = new AbortController();
    const onAbort = () => controller.abort();
    options.signal?.addEventListener("abort", onAbort, { once: true });
    if (options.signal?.aborted) controller.abort();
    const started = Date.now();
    try {
      options.onProgress?.({ stage: "starting" });
      const outcome = await this.backend.run(
        {
          runtime: req.runtime,
          memoryMb: req.memory_mb,
          network: req.network,
          request: toAgentRequest(req, null, this.options.seedFiles?.[req.runtime]),
        },
        { signal: controller.signal, onEvent: (e) => relay(e, options.onProgress) },
      );
      return toExecOutcome(req, outcome, Date.now() - started, controller.signal.aborted);
    } finally {
      options.signal?.removeEventListener("abort", onAbort);
      release();
    }
  }

  private effectiveNetwork(req: ExecRequest): ExecRequest["network"] {
    if (this.options.forceNetworkNone || !this.options.publicNetworkAvailable) return "none";
    return req.network;
  }

  /** What network a call asking for "public" really gets on this server. */
  get networkNote(): string {
    if (this.options.forceNetworkNone) return "network disabled on this server";
    return this.options.networkNote ?? (this.options.publicNetworkAvailable ? "public" : "none");
  }

  async close(): Promise<void> {
    await this.backend.close();
    await this.options.onClose?.();
  }
}

function relay(e: AgentEvent, onProgress?: (p: Progress) => void): void {
  if (!onProgress) return;
  switch (e.type) {
    case "started":
      return onProgress({ stage: "running" });
    case "collecting":
      return onProgress({ stage: "collecting" });
    case "stdout":
    case "stderr":
      return onProgress({ stage: "output", stream: e.type, chunk: e.chunk });
    default:
      return;
  }
}
