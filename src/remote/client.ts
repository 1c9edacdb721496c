import type { EngineOptions, ExecuteOptions } from "../engine/engine.js";
import type { ExecOutcome } from "../engine/result.js";
import { ScratchRunError } from "../errors.js";
import type { ExecRequest } from "../schema/exec.js";
import { wireToError, wireToOutcome } from "../api/wire.js";

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
}

/**
 * Remote mode: an engine-shaped object whose execute() sends the validated request to a
 * ScratchRun server's POST /v1/exec and rebuilds the engine's outcome from the answer, so the
 * local MCP server renders exactly what an embedded engine would. Cancelling the call aborts
 * the HTTP request; the server then ends the sandbox.
 */
export class RemoteEngine {
  private constructor(
    private readonly opts: RemoteOptions,
    private readonly info: Info,
  ) {}

  /** Connects (GET /v1/info, which also checks the key) and returns the remote engine. */
  static async connect(opts: RemoteOptions): Promise<RemoteEngine> {
    const res = await request(opts, "GET", "/v1/info");
    const body = await readJson(res);
    if (!res.ok) throw wireToError(res.status, body);
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

  async execute(req: ExecRequest, options: ExecuteOptions = {}): Promise<ExecOutcome> {
    options.onProgress?.({ stage: "queued" });
    const res = await request(this.opts, "POST", "/v1/exec", req, options.signal);
    const body = await readJson(res);
    if (!res.ok) throw wireToError(res.status, body);
    return wireToOutcome(body);
  }

  async close(): Promise<void> {}
}

async function request(
  opts: RemoteOptions,
  method: "GET" | "POST",
  path: string,
  body?: unknown,
  signal?: AbortSignal,
): Promise<Response> {
  const url = new URL(path, opts.url.endsWith("/") ? opts.url : `${opts.url}/`);
  try {
    return await fetch(url, {
      method,
      headers: {
        Authorization: `Bearer ${opts.apiKey}`,
        ...(body !== undefined ? { "Content-Type": "application/json" } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      ...(signal ? { signal } : {}),
    });
  } catch (cause) {
    if (signal?.aborted) throw new ScratchRunError("BUSY", "Cancelled", { cause });
    throw new ScratchRunError("NOT_READY", `cannot reach the ScratchRun server at ${url.origin}`, {
      fix: "Check SCRATCHRUN_URL and that the server runs",
      cause,
    });
  }
}

async function readJson(res: Response): Promise<unknown> {
  try {
    return await res.json();
  } catch {
    return undefined;
  }
}

/** SCRATCHRUN_URL and SCRATCHRUN_API_KEY, or null when remote mode is off. */
export function remoteOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): RemoteOptions | null {
  const url = env.SCRATCHRUN_URL;
  if (!url) return null;
  const apiKey = env.SCRATCHRUN_API_KEY;
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
