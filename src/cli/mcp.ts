import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { Engine } from "../engine/engine.js";
import { LIMITS } from "../schema/limits.js";
import { parseArgs } from "node:util";
import { createEngineFromEnv, withIsolation } from "../setup/engine-factory.js";
import { createMcpServer } from "../mcp/server.js";
import { RemoteEngine, remoteOptionsFromEnv } from "../remote/client.js";

/**
 * The stdio MCP server: what `npx -y @scratchrun/mcp-server` runs. Logs go to stderr only;
 * stdout carries JSON-RPC. With SCRATCHRUN_URL set it forwards every call to that ScratchRun
 * server (remote mode) instead of running sandboxes here.
 */
export async function runMcpStdio(argv: string[] = []): Promise<void> {
  const { values } = parseArgs({ args: argv, options: { isolation: { type: "string" } } });
  const remote = remoteOptionsFromEnv();
  const engine = remote
    ? await RemoteEngine.connect(remote)
    : await createEngineFromEnv(withIsolation(process.env, values.isolation));
  const server = createMcpServer(engine);
  const transport = new StdioServerTransport(process.stdin, process.stdout, {
    maxBufferSize: LIMITS.requestLineBytes.max,
  });
  let closing = false;
  const shutdown = async () => {
    if (closing) return;
    closing = true;
    await engine.close();
    process.exit(0);
  };
  transport.onclose = () => void shutdown();
  process.on("SIGINT", () => void shutdown());
  process.on("SIGTERM", () => void shutdown());
  process.stdin.on("end", () => void shutdown());
  await server.connect(transport);
  process.stderr.write(
    `scratchrun-mcp: ready (isolation ${engine.backend.isolation}; network: ${engine instanceof Engine ? (engine.options.networkReason ?? engine.networkNote) : engine.networkNote})\n`,
  );
}
