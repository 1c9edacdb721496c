import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import {
  CallToolRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ErrorCode,
  SetLevelRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";
import type { Engine, EngineOptions } from "../engine/engine.js";
import { policyKey } from "../schema/policy.js";
import { VERSION } from "../version.js";
import { callExecTool, EXEC_TOOL_NAME, execToolDefinition } from "./exec-tool.js";
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

/**
 * tools/call as the SDK declares it, except that `arguments` is kept exactly as the transport
 * parsed it. The SDK's own schema copies the arguments into a new record, and that copy drops an
 * own `__proto__` key, so a call carrying one would run instead of being refused; parseExecRequest
 * must see the untouched object (the SDK still validates the request with its schema first).
 */
const RawArgumentsCallToolSchema = CallToolRequestSchema.extend({
  params: CallToolRequestSchema.shape.params.extend({ arguments: z.unknown().optional() }),
});

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
  // Built for the engine's policy as it is at each tools/list (a session's key may be updated
  // meanwhile), once per distinct policy and note.
  let cached: { key: string; definition: ReturnType<typeof execToolDefinition> } | undefined;
  const definition = () => {
    const key = `${policyKey(engine.policy)}\n${engine.backend.isolation}\n${engine.networkNote}`;
    if (cached?.key !== key)
      cached = {
        key,
        definition: execToolDefinition(
          engine.backend.isolation,
          engine.networkNote,
          engine.policy,
          engine.options.runtimes?.extras,
          engine.options.runtimes?.runtimes,
        ),
      };
    return cached.definition;
  };

  // Output is streamed as logging messages only to clients that asked for logging (setLevel) at
  // "info" or more verbose.
  const logLevels = new Map<string | undefined, string>();
  server.setRequestHandler(SetLevelRequestSchema, async (request, extra) => {
    logLevels.set(extra.sessionId, request.params.level);
    return {};
  });

  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: [definition(), runtimesToolDefinition],
  }));

  server.setRequestHandler(RawArgumentsCallToolSchema, async (request, extra) => {
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
