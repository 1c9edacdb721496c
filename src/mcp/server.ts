import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import {
  CallToolRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ErrorCode,
} from "@modelcontextprotocol/sdk/types.js";
import type { Engine } from "../engine/engine.js";
import { VERSION } from "../version.js";
import { callExecTool, EXEC_TOOL_NAME, execToolDefinition } from "./exec-tool.js";

/** An MCP server exposing `scratchrun_exec` on top of one engine; transport-agnostic. */
export function createMcpServer(engine: Engine): Server {
  const server = new Server(
    { name: "scratchrun", version: VERSION },
    {
      capabilities: { tools: {} },
      instructions:
        "scratchrun_exec runs code in a fresh sandbox per call; nothing persists between calls.",
    },
  );
  const definition = execToolDefinition(engine.backend.isolation, engine.networkNote);

  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: [definition] }));

  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    if (request.params.name !== EXEC_TOOL_NAME)
      throw new McpError(ErrorCode.InvalidParams, `Unknown tool ${request.params.name}`);
    const progressToken = request.params._meta?.progressToken;
    const result = await callExecTool(engine, request.params.arguments ?? {}, {
      signal: extra.signal,
      ...(progressToken !== undefined
        ? {
            progressToken,
            sendProgress: (progress: number, message: string) =>
              extra.sendNotification({
                method: "notifications/progress",
                params: { progressToken, progress, total: 4, message },
              }),
          }
        : {}),
    });
    return result;
  });
  return server;
}
