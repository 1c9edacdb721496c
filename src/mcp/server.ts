import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import {
  CallToolRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ErrorCode,
  SetLevelRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";
import type { Engine, EngineOptions } from "../engine/engine.js";
import { VERSION } from "../version.js";
import { callExecTool, EXEC_TOOL_NAME, execToolDefinition } from "./exec-tool.js";
import { callRuntimesTool, RUNTIMES_TOOL_NAME, runtimesToolDefinition } from "./runtimes-tool.js";

/**
 * What the MCP server needs of an engine: the local Engine, the HTTP service's per-key view of
 * it, or the remote client that forwards to a ScratchRun server.
 */
export type ExecEngine = Pick<Engine, "execute" | "networkNote"> & {
  readonly backend: { readonly isolation: string };
  readonly options: Pick<EngineOptions, "runtimes">;
};

/** An MCP server exposing `scratchrun_exec` on top of one engine; transport-agnostic. */
export function createMcpServer(engine: ExecEngine): Server {
  const server = new Server(
    { name: "scratchrun", version: VERSION },
    {
      capabilities: { tools: {}, logging: {} },
      instructions:
        "scratchrun_exec runs code in a fresh sandbox per call; nothing persists between calls.",
    },
  );
  const definition = execToolDefinition(engine.backend.isolation, engine.networkNote);

  // Output is streamed as logging messages only to clients that asked for logging (setLevel) at
  // "info" or more verbose.
  const logLevels = new Map<string | undefined, string>();
  server.setRequestHandler(SetLevelRequestSchema, async (request, extra) => {
    logLevels.set(extra.sessionId, request.params.level);
    return {};
  });

  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: [definition, runtimesToolDefinition],
  }));

  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    if (request.params.name === RUNTIMES_TOOL_NAME) return callRuntimesTool(engine);
    if (request.params.name !== EXEC_TOOL_NAME)
      throw new McpError(ErrorCode.InvalidParams, `Unknown tool ${request.params.name}`);
    const progressToken = request.params._meta?.progressToken;
    const level = logLevels.get(extra.sessionId);
    const wantsOutput = level === "debug" || level === "info";
    return callExecTool(engine, request.params.arguments ?? {}, {
      signal: extra.signal,
      ...(progressToken !== undefined
        ? {
            sendProgress: (progress: number, message: string) =>
              extra.sendNotification({
                method: "notifications/progress",
                params: { progressToken, progress, message },
              }),
          }
        : {}),
      ...(wantsOutput
        ? {
            sendLog: (stream: "stdout" | "stderr", text: string) =>
              extra.sendNotification({
                method: "notifications/message",
                params: { level: "info", logger: stream, data: text },
              }),
          }
        : {}),
    });
  });
  return server;
}
