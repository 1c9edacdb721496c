#!/usr/bin/env node
// The product's stdio MCP server (same engine, same MCP layer) over the microVM backend with the
// pool sizes the benchmark chooses: BENCH_POOL='{"python3.11":2}' ('{}' = the naive microVM that
// boots per call). BENCH_POOL_MODE=restore|boot chooses how a VM is made when the pool is empty,
// and BENCH_TEMPLATES='["python3.11"]' builds those runtimes' snapshot templates before it serves
// (a server past its first call per runtime). It reports pool readiness on stderr as
// `bench-pool {json}` lines.
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { createMicrovmBackend } from "../src/backends/microvm/backend.js";
import { Engine } from "../src/engine/engine.js";
import { findRootfs } from "../src/images/locate.js";
import { createMcpServer } from "../src/mcp/server.js";
import { LIMITS } from "../src/schema/limits.js";
import { RUNTIMES, type RuntimeName } from "../src/schema/exec.js";

async function main(): Promise<void> {
  const sizes = JSON.parse(process.env.BENCH_POOL ?? "{}") as Partial<Record<RuntimeName, number>>;
  const rootfs = findRootfs();
  if (!rootfs.ok) throw new Error(rootfs.error);
  const mode = process.env.BENCH_POOL_MODE === "boot" ? "boot" : "restore";
  const backend = await createMicrovmBackend({ rootfsDir: rootfs.dir, pool: { sizes, mode } });
  const templates = JSON.parse(process.env.BENCH_TEMPLATES ?? "[]") as RuntimeName[];
  for (const rt of templates) await backend.template(rt, LIMITS.memoryMb.default);
  const engine = new Engine(backend, { forceNetworkNone: true });
  const server = createMcpServer(engine);
  const transport = new StdioServerTransport();
  let last = "";
  const timer = setInterval(() => {
    const ready = Object.fromEntries(RUNTIMES.map((r) => [r, backend.pool.readyCount(r)]));
    const line = JSON.stringify(ready);
    if (line !== last) process.stderr.write(`bench-pool ${line}\n`);
    last = line;
  }, 50);
  const shutdown = async () => {
    clearInterval(timer);
    await engine.close();
    process.exit(0);
  };
  transport.onclose = () => void shutdown();
  process.stdin.on("end", () => void shutdown());
  process.on("SIGTERM", () => void shutdown());
  await server.connect(transport);
  process.stderr.write(`bench-server ready (isolation ${backend.isolation})\n`);
}

main().catch((e: unknown) => {
  process.stderr.write(`bench microvm server: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
