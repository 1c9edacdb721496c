import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import type { BatchOptions, EngineOptions, ExecuteOptions } from "../engine/engine.js";
import type { BatchOutcome } from "../engine/batch.js";
import type { ExecOutcome } from "../engine/result.js";
import { ScratchRunError } from "../errors.js";
import type { ExecRequest } from "../schema/exec.js";
import { DEFAULT_POLICY, type CallPolicy } from "../schema/policy.js";
import { policyFromWire, wireToBatch, wireToError, wireToOutcome } from "../api/wire.js";
import type { SessionOps } from "../mcp/session-tools.js";
import { requestToWire } from "../schema/validate.js";
import { parseSessionStart, sessionInfoSchema, type SessionInfo } from "../schema/session.js";

export interface RemoteOptions {
  /** Base URL of a ScratchRun server, e.g. https://scratchrun.example.com */
  url: string;
  apiKey: string;
}

/**
 * Where the calls go: a server's URL with a key, or this machine's local service on its unix
 * socket, where the caller is the uid the kernel proves and no key is sent (decision 0018).
 */
export type RemoteTarget = ({ kind: "url" } & RemoteOptions) | { kind: "socket"; socket: string };

interface Info {
  version: string;
  isolation: string;
  network_note: string;
  runtimes?: EngineOptions["runtimes"];
  /** The key's limits (policy and quota); absent from servers older than per-key policies. */
  limits?: unknown;
  /** Whether the server keeps sessions; absent from servers older than remote sessions. */
  sessions?: boolean;
}

/** How long connecting waits for the server's /v1/info. */
const INFO_TIMEOUT_MS = 10_000;

/**
 * Remote mode: an engine-shaped object whose execute() sends the validated request to a
 * ScratchRun server's POST /v1/exec and rebuilds the engine's outcome from the answer, so the
 * local MCP server renders exactly what an embedded engine would. Cancelling the call aborts
 * the HTTP request; the server then ends the sandbox. The tool schema is the key's own: the
 * policy the server reports for it (its runtimes and maxima), so a call the server would refuse
 * is refused here first, and one it allows (a raised timeout) is not refused here.
 */
export class RemoteEngine {
  /** The key's policy as the server reported it (the product's if it reported none). */
  readonly policy: CallPolicy;

  /** Requests in flight: close() ends them (the service then ends their sandboxes). */
  private readonly inFlight = new Set<AbortController>();

  private constructor(
    private readonly opts: RemoteTarget,
    private readonly info: Info,
  ) {
    this.policy = policyFromWire(info.limits) ?? DEFAULT_POLICY;
  }

  /** Connects (GET /v1/info, which also checks the key) and returns the remote engine. */
  static async connect(opts: RemoteOptions | RemoteTarget): Promise<RemoteEngine> {
    const target: RemoteTarget = "kind" in opts ? opts : { kind: "url", ...opts };
    const timeout = AbortSignal.timeout(INFO_TIMEOUT_MS);
    const res = await request(target, "GET", "/v1/info", undefined, timeout).catch((e) => {
      throw timeout.aborted
        ? new ScratchRunError(
            "NOT_READY",
            `${where(target)} did not answer within ${INFO_TIMEOUT_MS / 1000} s`,
            { fix: "Check that it runs and is not overloaded (scratchrun doctor)" },
          )
        : e;
    });
    const body = res.body;
    if (res.status !== 200) throw wireToError(res.status, body);
    const info = body as Partial<Info>;
    if (typeof info.isolation !== "string" || typeof info.network_note !== "string")
      throw new ScratchRunError("NOT_READY", `${where(target)} is not a ScratchRun server`, {
        fix: target.kind === "url" ? "Check SCRATCHRUN_URL" : "Check SCRATCHRUN_SOCKET",
      });
    return new RemoteEngine(target, info as Info);
  }

  /** The version the server reported (the local service's handshake compares it with ours). */
  get serverVersion(): string {
    return this.info.version;
  }

  get backend() {
    return { isolation: this.info.isolation };
  }

  get networkNote(): string {
    return this.info.network_note;
  }

  get options(): EngineOptions {
    return { runtimes: this.info.runtimes };
  }

  /**
   * Sends the call and waits for its answer, however long the key's timeout lets it run (no
   * client-side timeout: node's fetch would give up waiting for a response's headers after 300
   * s). The REST API reports no stages, so once the request is sent the call counts as running
   * (the MCP server then reports its elapsed time every second).
   */
  async execute(req: ExecRequest, options: ExecuteOptions = {}): Promise<ExecOutcome> {
    options.onProgress?.({ stage: "queued" });
    const body = requestToWire(req);
    const res = await this.tracked(options.signal, (signal) =>
      request(this.opts, "POST", "/v1/exec", body, signal, () =>
        options.onProgress?.({ stage: "running" }),
      ),
    );
    if (res.status !== 200) throw wireToError(res.status, res.body);
    return wireToOutcome(res.body);
  }

  /**
   * A call with `inputs`: sent whole, as the server's POST /v1/exec takes it, which runs the
   * inputs within the key's concurrency (on a cluster, spread over its workers); its answer
   * rebuilt into the engine's outcomes. Only the end of the whole call is reported.
   */
  async executeBatch(req: ExecRequest, options: BatchOptions = {}): Promise<BatchOutcome> {
    const res = await request(this.opts, "POST", "/v1/exec", requestToWire(req), options.signal);
    if (res.status !== 200) throw wireToError(res.status, res.body);
    const batch = wireToBatch(res.body);
    batch.entries.forEach((outcome, i) => options.onEntryDone?.(i, outcome));
    return batch;
  }

  /** Runs one request under a signal that close() also aborts. */
  private async tracked<T>(
    signal: AbortSignal | undefined,
    send: (signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    const own = new AbortController();
    this.inFlight.add(own);
    try {
      return await send(signal ? AbortSignal.any([signal, own.signal]) : own.signal);
    } finally {
      this.inFlight.delete(own);
    }
  }

  /**
   * The session tools, forwarded to the server's REST API (POST /v1/sessions, DELETE
   * /v1/sessions/{id}); listed when the server keeps sessions. A start is validated here first,
   * with the key's policy, as a call is. scratchrun_exec's session_id travels with the call.
   */
  get sessionOps(): SessionOps | undefined {
    if (this.info.sessions !== true) return undefined;
    return {
      start: async (input, signal) => {
        const req = parseSessionStart(input, this.policy);
        const res = await this.tracked(signal, (s) =>
          request(this.opts, "POST", "/v1/sessions", req, s),
        );
        if (res.status !== 201) throw wireToError(res.status, res.body);
        return answered(res.body);
      },
      end: async (id) => {
        const res = await request(this.opts, "DELETE", `/v1/sessions/${encodeURIComponent(id)}`);
        if (res.status !== 200) throw wireToError(res.status, res.body);
        return answered(res.body);
      },
    };
  }

  /** Ends the requests in flight: the server sees each connection close and ends its call. */
  async close(): Promise<void> {
    for (const c of this.inFlight) c.abort();
  }
}

/** The server a target names, for messages. */
function where(target: RemoteTarget): string {
  return target.kind === "url" ? target.url : `the local service at ${target.socket}`;
}

/** A session as the server answered it, or INTERNAL if it is not one. */
function answered(body: unknown): SessionInfo {
  const parsed = sessionInfoSchema.safeParse(body);
  if (!parsed.success)
    throw new ScratchRunError("INTERNAL", "the ScratchRun server answered with no session");
  return parsed.data;
}

/**
 * One HTTP(S) request with a JSON body, answered with the status and the parsed JSON (undefined if
 * it is not JSON). No timeout of its own: a call lasts as long as its timeout_ms allows.
 */
function request(
  target: RemoteTarget,
  method: "GET" | "POST" | "DELETE",
  path: string,
  body?: unknown,
  signal?: AbortSignal,
  onSent?: () => void,
): Promise<{ status: number; body: unknown }> {
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  const headers = {
    ...(target.kind === "url" ? { Authorization: `Bearer ${target.apiKey}` } : {}),
    ...(payload
      ? { "Content-Type": "application/json", "Content-Length": String(payload.length) }
      : {}),
  };
  let send: (cb: (res: IncomingMessage) => void) => ReturnType<typeof httpRequest>;
  let unreachable: { message: string; fix: string };
  if (target.kind === "url") {
    const url = new URL(path, target.url.endsWith("/") ? target.url : `${target.url}/`);
    const client = url.protocol === "https:" ? httpsRequest : httpRequest;
    send = (cb) => client(url, { method, headers }, cb);
    unreachable = {
      message: `cannot reach the ScratchRun server at ${url.origin}`,
      fix: "Check SCRATCHRUN_URL and that the server runs",
    };
  } else {
    // The local service: the kernel names the caller; Host is only HTTP's requirement.
    send = (cb) =>
      httpRequest(
        { socketPath: target.socket, path, method, headers: { Host: "localhost", ...headers } },
        cb,
      );
    unreachable = {
      message: `cannot reach the local service at ${target.socket}`,
      fix: "Check that it runs (scratchrun doctor)",
    };
  }
  return new Promise((resolve, reject) => {
    const fail = (cause: unknown) =>
      reject(
        signal?.aborted
          ? new ScratchRunError("BUSY", "Cancelled", { cause })
          : new ScratchRunError("NOT_READY", unreachable.message, { fix: unreachable.fix, cause }),
      );
    const req = send((res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.once("error", fail);
      res.once("close", () => {
        if (!res.complete) fail(new Error("the connection closed before the answer ended"));
      });
      res.once("end", () => {
        let parsed: unknown;
        try {
          parsed = JSON.parse(Buffer.concat(chunks).toString("utf8"));
        } catch {
          parsed = undefined;
        }
        resolve({ status: res.statusCode ?? 0, body: parsed });
      });
    });
    const onAbort = () => req.destroy(new Error("aborted"));
    if (signal?.aborted) onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    req.once("close", () => signal?.removeEventListener("abort", onAbort));
    req.once("error", fail);
    req.once("finish", () => onSent?.());
    req.end(payload);
  });
}
