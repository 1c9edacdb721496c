import type { Backend } from "../backends/types.js";
import type { ImageExtras, Manifest } from "../images/manifest.js";
import { allowlistOf, intersectAllowlists, type DomainAllowlist } from "../net/allowlist.js";
import type { Preimport } from "../images/preimport.js";
import type { AgentEvent, AgentFile } from "../protocol/types.js";
import { isScratchRunError, ScratchRunError } from "../errors.js";
import { hostCeiling, type Ceiling } from "../policy/host.js";
import { ceilingPolicyOf } from "../policy/resolve.js";
import type { ExecRequest, RuntimeName } from "../schema/exec.js";
import { DEFAULT_POLICY, policyViolations, type CallPolicy } from "../schema/policy.js";
import { parseExecRequest } from "../schema/validate.js";
import { Admission } from "./admission.js";
import { entryRequests as entryRequestsOf, runBatch, type BatchOutcome } from "./batch.js";
import { flavourFor } from "./preimport-route.js";
import { runAdmitted } from "./admitted-call.js";
import type { ExecOutcome } from "./result.js";
import { egressFor } from "../backends/egress.js";
import { LIMITS } from "../schema/limits.js";
import { parseSessionStart, type SessionInfo } from "../schema/session.js";
import { Sessions, type SessionEndListener, type SessionLimits } from "./sessions.js";
import { brokerSecrets, secretsAllowlist, withSecrets, type CallSecrets } from "./secrets.js";

export interface EngineOptions {
  /** Sandboxes running at once; further calls queue. */
  maxConcurrent?: number;
  maxQueued?: number;
  queueDeadlineMs?: number;
  /** Force every call to network "none" whatever it asks. */
  forceNetworkNone?: boolean;
  /** Whether the backend can give sandboxes public egress at all. */
  publicNetworkAvailable?: boolean;
  /**
   * The server's egress allowlist: "public" calls reach only these names (through the egress
   * proxy). Absent or null: every public destination.
   */
  egressAllowlist?: DomainAllowlist | null;
  /** One line on what network calls get here, for the tool description. */
  networkNote?: string;
  /** Why, with the operator's fix, for the startup log. */
  networkReason?: string;
  /**
   * Why this host gives calls no network though the operator did not turn it off, with the
   * operator's fix: every call that asked for "public" (the default) says so in its result.
   */
  networkUnavailable?: string;
  /**
   * The server-wide policy: the schema callers without one of their own (stdio, `scratchrun run`,
   * API keys that set no maximum) get. Default: the product's (DEFAULT_POLICY).
   */
  policy?: CallPolicy;
  /** The most any call may get here (default: the host's, src/policy/host.ts). */
  ceiling?: Ceiling;
  /** Runs after the backend closes (releases server-wide resources). */
  onClose?: () => Promise<void>;
  /** Files every call of a runtime starts with (caches the image prepared), before the caller's. */
  seedFiles?: Partial<Record<RuntimeName, AgentFile[]>>;
  /** What each runtime really is (from the image manifest), for scratchrun_runtimes. */
  runtimes?: { runtimes: Manifest["runtimes"]; notes: string[]; extras?: ImageExtras };
  /**
   * What each runtime's pre-imported interpreter imports (the backend's too): calls whose code
   * starts by importing one of those packages may run in one (preimport-route.ts).
   */
  preimport?: Partial<Record<RuntimeName, Preimport>>;
  /** Sessions kept at once, per server and per caller (default LIMITS.session). */
  sessions?: SessionLimits;
}

export type Progress =
  | { stage: "queued" }
  /**
   * `worker`: where an API replica placed the call (absent when the engine runs it here);
   * `waiting`: what the backend waits for before the sandbox is ready (a kept template's load).
   */
  | { stage: "starting"; worker?: string; waiting?: string }
  | { stage: "running" }
  | { stage: "collecting" }
  | { stage: "output"; stream: "stdout" | "stderr"; chunk: Uint8Array };

export interface ExecuteOptions {
  signal?: AbortSignal;
  /** The run record's id when a service keeps one (an API replica hands it to the worker's log). */
  runId?: string;
  onProgress?: (p: Progress) => void;
  /**
   * With network "public": the only domains this call may reach (its API key's egress
   * allowlist, normalised patterns), within whatever the server's own allowlist allows; absent
   * or null: the server's egress.
   */
  egressAllow?: readonly string[] | null;
  /**
   * This call's egress allowlist, when its policy differs from the server's (e.g. an API key's);
   * null: unrestricted. Absent: the server's (EngineOptions.egressAllowlist).
   */
  egressAllowlist?: DomainAllowlist | null;
  /**
   * Who calls (an API key's id; "stdio" for the local client): a session belongs to the caller
   * that started it. Default "local".
   */
  owner?: string;
  /**
   * Where a session's record says it lives (an API replica routes its calls there): the worker's
   * address, the worker_id of the process that started it, and the record's id.
   */
  sessionPlacement?: { worker: string; workerId: string | null; record: string };
  /**
   * The request was parsed with this engine's `ceilingPolicy` (a worker's call, refused with a
   * 400 before its answer streams): the host's ceiling is not checked a second time.
   */
  parsedUnderCeiling?: true;
}

/** A call with `inputs`: each input's progress and its end, by the input's index. */
export interface BatchOptions extends Omit<ExecuteOptions, "onProgress"> {
  onEntryProgress?: (index: number, p: Progress) => void;
  onEntryDone?: (index: number, outcome: ExecOutcome) => void;
}

/** One input's ExecuteOptions within a call with inputs. */
export function batchEntryOptions(options: BatchOptions, index: number): ExecuteOptions {
  const { onEntryProgress, onEntryDone: _, ...rest } = options;
  return onEntryProgress ? { ...rest, onProgress: (p) => onEntryProgress(index, p) } : rest;
}

/**
 * The one entry point every front end (MCP, HTTP, CLI) calls. It validates, admits, hands the
 * call to the backend, and maps whatever happened onto the result shape.
 */
export class Engine {
  readonly admission: Admission;
  /** The server-wide policy (what executeInput parses with). */
  readonly policy: CallPolicy;
  /** The most any call may get on this host, whoever allowed it. */
  readonly ceiling: Ceiling;
  /** The ceiling as a policy: what a worker parses its calls with (the product's defaults). */
  readonly ceilingPolicy: CallPolicy;
  /** Sessions: sandboxes kept between one caller's calls (src/engine/sessions.ts). */
  readonly sessions: Sessions;

  constructor(
    readonly backend: Backend,
    readonly options: EngineOptions = {},
  ) {
    this.admission = new Admission(
      options.maxConcurrent ?? 4,
      options.maxQueued ?? 64,
      options.queueDeadlineMs ?? 60_000,
    );
    this.policy = options.policy ?? DEFAULT_POLICY;
    this.ceiling = options.ceiling ?? hostCeiling();
    this.ceilingPolicy = ceilingPolicyOf(this.ceiling);
    this.sessions = new Sessions({
      backend,
      admission: this.admission,
      limits: options.sessions ?? {
        perServer: LIMITS.session.perServer,
        perCaller: LIMITS.session.perCaller,
        memoryMbPerServer: LIMITS.session.memoryMbPerServer,
        memoryMbPerCaller: LIMITS.session.memoryMbPerCaller,
      },
      seeds: options.seedFiles ?? {},
      preimport: options.preimport ?? {},
    });
  }

  /**
   * Starts a session for the caller: validated with the server's policy unless the caller's
   * parsed it already, nothing past the host's ceiling, its network decided as a call's is.
   */
  async startSession(
    input: unknown,
    options: {
      owner?: string;
      policy?: CallPolicy;
      egressAllowlist?: DomainAllowlist | null;
      egressAllow?: readonly string[] | null;
      signal?: AbortSignal;
    } = {},
  ): Promise<SessionInfo> {
    const req = parseSessionStart(input, options.policy ?? this.policy);
    if (req.memory_mb > this.ceiling.memoryMb)
      throw new ScratchRunError(
        "INVALID_INPUT",
        `Invalid request: memory_mb: at most ${this.ceiling.memoryMb} on this host`,
      );
    const network = this.effectiveNetwork(req);
    const egress = egressFor(network, network === "public" ? this.allowlistFor(options) : null);
    return this.sessions.start(options.owner ?? "local", req, network, egress, options.signal);
  }

  /** The local caller's sessions (stdio, `scratchrun mcp`), for the MCP server's session tools. */
  get sessionOps():
    | {
        start(input: unknown, signal?: AbortSignal): Promise<SessionInfo>;
        end(id: string): Promise<SessionInfo>;
      }
    | undefined {
    if ((this.options.sessions?.perServer ?? 1) === 0) return undefined;
    return {
      start: (input, signal) => this.startSession(input, signal ? { signal } : {}),
      end: (id) => this.endSession(id),
    };
  }

  /** Whether this engine keeps sessions (SCRATCHRUN_SESSIONS_MAX is not 0). */
  get sessionsOn(): boolean {
    return (this.options.sessions?.perServer ?? 1) !== 0;
  }

  /** Tells `listener` of every session's end, after its sandbox is gone (the records). */
  onSessionEnd(listener: SessionEndListener): () => void {
    return this.sessions.addEndListener(listener);
  }

  /** Ends every session (a server's shutdown, before its records close). */
  endAllSessions(): Promise<void> {
    return this.sessions.close();
  }

  /** Ends the caller's session (SESSION_NOT_FOUND for anything but one of its own). */
  endSession(id: string, owner = "local"): Promise<SessionInfo> {
    return this.sessions.end(owner, id);
  }

  /** Validates untrusted input (throws INVALID_INPUT before any sandbox starts) and executes. */
  async executeInput(input: unknown, options: ExecuteOptions = {}): Promise<ExecOutcome> {
    return this.execute(parseExecRequest(input, this.policy), options);
  }

  /**
   * Runs a parsed request. Whoever allowed it (a key's policy, an API replica), nothing past this
   * host's ceiling runs (refused before any sandbox starts).
   */
  async execute(request: ExecRequest, options: ExecuteOptions = {}): Promise<ExecOutcome> {
    const outcome = await this.run(request, options);
    // Asked for "public" (the default) where this host gives none: the result says why, since a
    // client shows the result, not the server's stderr. (An operator's SCRATCHRUN_NETWORK=none
    // is stated in the tool description instead.)
    const why = this.options.networkUnavailable;
    if (why && request.network === "public" && outcome.result.network === "none")
      outcome.result.network_reason = `ran with network "none", not "public": ${why}`;
    return outcome;
  }

  /**
   * Runs a request with `inputs` (src/engine/batch.ts): each input in a fresh sandbox through
   * this engine's queue, as many at once as it runs sandboxes. Every input is checked against
   * this host's ceiling and the secrets' rules first, so a refusal comes before anything starts.
   */
  async executeBatch(request: ExecRequest, options: BatchOptions = {}): Promise<BatchOutcome> {
    for (const [i, entry] of entryRequestsOf(request).entries()) {
      try {
        this.checked(entry, options);
      } catch (e) {
        if (isScratchRunError(e) && request.inputs)
          throw new ScratchRunError(
            e.code,
            e.message.replace(/^Invalid request: /, `Invalid request: inputs[${i}]: `),
          );
        throw e;
      }
    }
    return runBatch(request, {
      width: this.admission.maxConcurrent,
      isolation: this.backend.isolation,
      signal: options.signal,
      ...(options.onEntryDone ? { onDone: options.onEntryDone } : {}),
      run: (entry, i) => this.execute(entry, batchEntryOptions(options, i)),
    });
  }

  /** The checks a call passes before it is queued: the host's ceiling, then secrets' rules. */
  private checked(
    request: ExecRequest,
    options: ExecuteOptions,
  ): { allow: DomainAllowlist | null; secrets: boolean } {
    if (request.inputs !== undefined)
      throw new ScratchRunError(
        "INVALID_INPUT",
        "Invalid request: inputs: a call with inputs runs through executeBatch",
      );
    const beyond = options.parsedUnderCeiling ? [] : policyViolations(request, this.ceilingPolicy);
    if (beyond.length)
      throw new ScratchRunError("INVALID_INPUT", `Invalid request: ${beyond.join("; ")}`);
    let allow = request.network === "public" ? this.allowlistFor(options) : null;
    const secrets = Object.keys(request.secrets ?? {}).length > 0;
    if (secrets) allow = secretsAllowlist(request, this.effectiveNetwork(request), allow);
    return { allow, secrets };
  }

  private async run(request: ExecRequest, options: ExecuteOptions): Promise<ExecOutcome> {
    const checked = this.checked(request, options);
    // Brokered secrets: their rule checked before anything starts, then placeholders and a CA.
    const allow = checked.allow;
    const secrets: CallSecrets | null = checked.secrets ? brokerSecrets(request.secrets) : null;
    if (request.session_id !== undefined) {
      options.onProgress?.({ stage: "queued" });
      return this.sessions.execute(request, {
        owner: options.owner ?? "local",
        ...(options.signal ? { signal: options.signal } : {}),
        onEvent: (e) => relay(e, options.onProgress),
      });
    }
    const req: ExecRequest = { ...request, network: this.effectiveNetwork(request) };
    options.onProgress?.({ stage: "queued" });
    // Cancelled while queued: answered as a cancelled call is, not refused (no sandbox started).
    const { result } = await runAdmitted({
      admission: this.admission,
      isolation: this.backend.isolation,
      codeIds: this.backend.codeIds,
      request: req,
      seeds: this.options.seedFiles?.[req.runtime],
      signal: options.signal,
      run: (agentRequest, signal) => {
        options.onProgress?.({ stage: "starting" });
        return this.backend.run(
          {
            runtime: req.runtime,
            memoryMb: req.memory_mb,
            egress: egressFor(req.network, allow, secrets?.broker),
            request: secrets ? withSecrets(agentRequest, secrets) : agentRequest,
            flavour: flavourFor(req, this.options.preimport?.[req.runtime]),
          },
          {
            signal,
            onEvent: (e) => relay(e, options.onProgress),
            onWait: (waiting) => options.onProgress?.({ stage: "starting", waiting }),
          },
        );
      },
    });
    return result;
  }

  /** A public call's allowlist: the call's (or the server's), narrowed by its key's. */
  private allowlistFor(options: ExecuteOptions): DomainAllowlist | null {
    const base =
      options.egressAllowlist !== undefined
        ? options.egressAllowlist
        : (this.options.egressAllowlist ?? null);
    if (!options.egressAllow) return base;
    const key = allowlistOf(options.egressAllow);
    return base ? intersectAllowlists(base, key) : key;
  }

  private effectiveNetwork(req: { network: ExecRequest["network"] }): ExecRequest["network"] {
    if (this.options.forceNetworkNone || !this.options.publicNetworkAvailable) return "none";
    return req.network;
  }

  /** What network a call asking for "public" really gets on this server. */
  get networkNote(): string {
    if (this.options.forceNetworkNone) return "network disabled on this server";
    return this.options.networkNote ?? (this.options.publicNetworkAvailable ? "public" : "none");
  }

  async close(): Promise<void> {
    await this.sessions.close();
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
