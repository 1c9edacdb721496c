import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import type { EngineOptions, ExecuteOptions } from "../engine/engine.js";
import type { ExecOutcome } from "../engine/result.js";
import { ScratchRunError } from "../errors.js";
import type { ExecRequest } from "../schema/exec.js";
import { DEFAULT_POLICY, type CallPolicy } from "../schema/policy.js";
import { policyFromWire, wireToError, wireToOutcome } from "../api/wire.js";
import { setting } from "../schema/settings/read.js";
import type { SessionOps } from "../mcp/session-tools.js";
import { namedSessionFields } from "../schema/validate.js";
import { parseSessionStart, sessionInfoSchema, type SessionInfo } from "../schema/session.js";

export interface RemoteOptions {
  /** Base URL of a ScratchRun server, e.g. https://scratchrun.example.com */
  url: string;
  apiKey: string;
}

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

  private constructor(
    private readonly opts: RemoteOptions,
    private readonly info: Info,
  ) {
    this.policy = policyFromWire(info.limits) ?? DEFAULT_POLICY;
  }

  /** Connects (GET /v1/info, which also checks the key) and returns the remote engine. */
  static async connect(opts: RemoteOptions): Promise<RemoteEngine> {
    const res = await request(opts, "GET", "/v1/info");
    const body = res.body;
    if (res.status !== 200) throw wireToError(res.status, body);
    const info = body as Partial<Info>;
    if (typeof info.isolation !== "string" || typeof info.network_note !== "string")
      throw new ScratchRunError("NOT_READY", `${opts.url} is not a ScratchRun server`, {
        fix: "Check SCRATCHRUN_URL",
      });
    return new RemoteEngine(opts, info as Info);
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
    const body = req.session_id === undefined ? req : namedSessionFields(req);
    const res = await request(this.opts, "POST", "/v1/exec", body, options.signal, () =>
      options.onProgress?.({ stage: "running" }),
    );
    if (res.status !== 200) throw wireToError(res.status, res.body);
    return wireToOutcome(res.body);
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
        const res = await request(this.opts, "POST", "/v1/sessions", req, signal);
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

  async close(): Promise<void> {}
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
  opts: RemoteOptions,
  method: "GET" | "POST" | "DELETE",
  path: string,
  body?: unknown,
  signal?: AbortSignal,
  onSent?: () => void,
): Promise<{ status: number; body: unknown }> {
  const url = new URL(path, opts.url.endsWith("/") ? opts.url : `${opts.url}/`);
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  const send = url.protocol === "https:" ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const fail = (cause: unknown) =>
      reject(
        signal?.aborted
          ? new ScratchRunError("BUSY", "Cancelled", { cause })
          : new ScratchRunError(
              "NOT_READY",
              `cannot reach the ScratchRun server at ${url.origin}`,
              { fix: "Check SCRATCHRUN_URL and that the server runs", cause },
            ),
      );
    const req = send(
      url,
      {
        method,
        headers: {
          Authorization: `Bearer ${opts.apiKey}`,
          ...(payload
            ? { "Content-Type": "application/json", "Content-Length": String(payload.length) }
            : {}),
        },
      },
      (res: IncomingMessage) => {
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
      },
    );
    const onAbort = () => req.destroy(new Error("aborted"));
    if (signal?.aborted) onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    req.once("close", () => signal?.removeEventListener("abort", onAbort));
    req.once("error", fail);
    req.once("finish", () => onSent?.());
    req.end(payload);
  });
}

/**
 * SCRATCHRUN_URL and SCRATCHRUN_API_KEY, or null when remote mode is off (neither is set).
 * A key without a URL is refused: the product page's config sets only the key, implying a hosted
 * default, and there is none; guessing one would send the key somewhere the user never named,
 * and quietly running sandboxes here instead would not be what the user configured either.
 */
export function remoteOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): RemoteOptions | null {
  const url = setting("SCRATCHRUN_URL", env);
  const apiKey = setting("SCRATCHRUN_API_KEY", env);
  if (!url) {
    if (apiKey)
      throw new ScratchRunError(
        "NOT_READY",
        "SCRATCHRUN_API_KEY is set but SCRATCHRUN_URL is not, and there is no hosted default",
        {
          fix: "Set SCRATCHRUN_URL to your ScratchRun server (e.g. http://host:8787, started with `scratchrun serve`), or remove SCRATCHRUN_API_KEY to run sandboxes on this machine",
        },
      );
    return null;
  }
  if (!apiKey)
    throw new ScratchRunError("NOT_READY", "SCRATCHRUN_URL is set but SCRATCHRUN_API_KEY is not", {
      fix: "Set SCRATCHRUN_API_KEY to a key from `scratchrun keys create --name N`",
    });
  try {
    const u = new URL(url);
    if (u.protocol !== "https:" && u.protocol !== "http:") throw new Error("scheme");
  } catch {
    throw new ScratchRunError(
      "NOT_READY",
      `SCRATCHRUN_URL=${JSON.stringify(url)} is not an http(s) URL`,
    );
  }
  return { url, apiKey };
}
