import {
  LOG_LEVEL_META_KEY,
  ProtocolError,
  ProtocolErrorCode,
  Server,
} from "@modelcontextprotocol/server";
import type { JSONRPCRequest, Result, ServerContext } from "@modelcontextprotocol/server";
import { AsyncLocalStorage } from "node:async_hooks";
import type { Engine, EngineOptions } from "../engine/engine.js";
import { policyKey } from "../schema/policy.js";
import { VERSION } from "../version.js";
import { callExecTool, EXEC_TOOL_NAME, execToolDefinition, OUTPUT_META_KEY } from "./exec-tool.js";
import type { PoolsReport } from "../backends/types.js";
import { callRuntimesTool, RUNTIMES_TOOL_NAME, runtimesToolDefinition } from "./runtimes-tool.js";

/**
 * What the MCP server needs of an engine: the local Engine, the HTTP service's per-key view of
 * it, or the remote client that forwards to a ScratchRun server.
 */
export type ExecEngine = Pick<Engine, "execute" | "networkNote" | "policy"> & {
  readonly backend: { readonly isolation: string; pools?(): PoolsReport };
  readonly options: Pick<EngineOptions, "runtimes">;
};

/** The server's identity as every client shows it (initialize result, or 2026 result `_meta`). */
export const SERVER_INFO = {
  name: "scratchrun",
  title: "ScratchRun",
  version: VERSION,
  websiteUrl: "https://scratchrun.dev",
} as const;

/**
 * tools/call `arguments` exactly as the transport parsed them. The SDK validates a request with
 * its schema and hands the handler a copy, and that copy drops an own `__proto__` key, so a call
 * carrying one would run instead of being refused: parseExecRequest must see the untouched
 * object. The SDK's handler-wrapping hook sees the request before its copy; this carries the
 * request's own arguments from there to the handler.
 */
class RawArgumentsServer extends Server {
  static readonly rawArguments = new AsyncLocalStorage<{ arguments: unknown }>();

  protected override _wrapHandler(
    method: string,
    handler: (request: JSONRPCRequest, ctx: ServerContext) => Promise<Result>,
  ): (request: JSONRPCRequest, ctx: ServerContext) => Promise<Result> {
    const wrapped = super._wrapHandler(method, handler);
    if (method !== "tools/call") return wrapped;
    return (request, ctx) =>
      RawArgumentsServer.rawArguments.run(
        { arguments: (request.params as { arguments?: unknown } | undefined)?.arguments },
        () => wrapped(request, ctx),
      );
  }
}

type ExecToolDefinition = ReturnType<typeof execToolDefinition>;
/** Per runtime image (its manifest object), per policy key. */
const definitions = new WeakMap<object, Map<string, ExecToolDefinition>>();
const NO_IMAGE = {};

/**
 * scratchrun_exec as this engine's caller sees it now (a session's key may be updated meanwhile),
 * built once per distinct policy, isolation and network note: a 2026 request builds a server per
 * request, and the schema should not be rebuilt with it.
 */
function toolDefinition(engine: ExecEngine): ExecToolDefinition {
  const key = `${policyKey(engine.policy)}\n${engine.backend.isolation}\n${engine.networkNote}`;
  const image = engine.options.runtimes ?? NO_IMAGE;
  let forImage = definitions.get(image);
  if (!forImage) definitions.set(image, (forImage = new Map()));
  let definition = forImage.get(key);
  if (!definition) {
    definition = execToolDefinition(
      engine.backend.isolation,
      engine.networkNote,
      engine.policy,
      engine.options.runtimes?.extras,
      engine.options.runtimes?.runtimes,
    );
    // A few policies in use at once; a long-running service with many past ones starts afresh.
    if (forImage.size >= 64) forImage.clear();
    forImage.set(key, definition);
  }
  return definition;
}

/** Levels at which a call's output is streamed as logging messages. */
const OUTPUT_LEVELS = new Set(["debug", "info"]);

/**
 * An MCP server exposing `scratchrun_exec` on top of one engine; transport- and era-agnostic.
 * stdio pins one per connection; Streamable HTTP builds one per legacy session or per 2026
 * request, so it holds no state a request of the other era could need.
 */
export function createMcpServer(engine: ExecEngine): Server {
  const server = new RawArgumentsServer(SERVER_INFO, {
    capabilities: { tools: {}, logging: {} },
    instructions:
      "scratchrun_exec runs code in a fresh sandbox per call; nothing persists between calls.",
  });
  const definition = () => toolDefinition(engine);

  // A 2025 connection asks for output once (logging/setLevel, kept per session); a 2026 request
  // carries its level in its own _meta. Either way only "info" or more verbose streams output.
  const sessionLevels = new Map<string | undefined, string>();
  server.setRequestHandler("logging/setLevel", async (request, ctx) => {
    sessionLevels.set(ctx.sessionId, request.params.level);
    return {};
  });
  const wantsOutput = (ctx: ServerContext): boolean => {
    const level = ctx.mcpReq.envelope
      ? ctx.mcpReq.envelope[LOG_LEVEL_META_KEY as keyof typeof ctx.mcpReq.envelope]
      : sessionLevels.get(ctx.sessionId);
    return typeof level === "string" && OUTPUT_LEVELS.has(level);
  };

  server.setRequestHandler("tools/list", async () => ({
    tools: [definition(), runtimesToolDefinition],
  }));

  server.setRequestHandler("tools/call", async (request, ctx) => {
    const { name } = request.params;
    if (name === RUNTIMES_TOOL_NAME) return callRuntimesTool(engine);
    if (name !== EXEC_TOOL_NAME)
      throw new ProtocolError(ProtocolErrorCode.InvalidParams, `Unknown tool ${name}`);
    const progressToken = request.params._meta?.progressToken;
    const outputAsProgress = request.params._meta?.[OUTPUT_META_KEY] === "progress";
    const result = await callExecTool(
      engine,
      RawArgumentsServer.rawArguments.getStore()?.arguments ?? {},
      {
        signal: ctx.mcpReq.signal,
        outputAsProgress,
        ...(progressToken !== undefined
          ? {
              sendProgress: (progress: number, message: string) =>
                ctx.mcpReq.notify({
                  method: "notifications/progress",
                  params: { progressToken, progress, message },
                }),
            }
          : {}),
        ...(wantsOutput(ctx)
          ? {
              sendLog: (stream: "stdout" | "stderr", text: string) =>
                ctx.mcpReq.notify({
                  method: "notifications/message",
                  params: { level: "info", logger: stream, data: text },
                }),
            }
          : {}),
      },
    );
    return server.projectCallToolResult(result, definition().outputSchema);
  });
  return server;
}
