#!/usr/bin/env node
// The product's stdio MCP server, built as `scratchrun-mcp` builds it (createEngineFromEnv from
// SCRATCHRUN_* settings, served by serveMcpStdio in both eras), plus what the benchmark needs to measure it
// fairly: `bench-pool {json}` lines on stderr whenever the pool changes (ready and target per
// runtime, starts in flight), BENCH_TEMPLATES='["python3.11"]' builds those runtimes' microVM
// snapshot templates (plain and pre-imported) before it serves (a server past its first call per
// runtime), and BENCH_IDLE_MS=N measures, once the pool is first full, what each kind of pooled
// sandbox costs over N ms of idleness (`bench-idle {json}`). BENCH_REST=1 also serves the REST
// API from the same engine (as `scratchrun serve` does, its SQLite in a scratch home) on a free
// loopback port, with one key whose quota never refuses (the engine's admission decides), and says
// `bench-rest {"url","key"}`: the time-to-interactive burst's 429s are the server's, not a key's.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startApiServer, type ApiServer } from "../src/api/server.js";
import { createLogger } from "../src/http/log.js";
import { openDatabase, type Db } from "../src/store/db.js";
import { KeyStore } from "../src/store/keys.js";
import { MicrovmBackend } from "../src/backends/microvm/backend.js";
import { NamespaceBackend } from "../src/backends/namespace/backend.js";
import { serveMcpStdio } from "../src/cli/mcp.js";
import { LIMITS } from "../src/schema/limits.js";
import { RUNTIMES, type RuntimeName } from "../src/schema/exec.js";
import { createEngineFromEnv } from "../src/compose/engine-factory.js";
import { groupCost } from "./proc.js";

async function main(): Promise<void> {
  // BENCH_MAX_CONCURRENT and BENCH_MAX_QUEUED: the engine's admission, as serve's flags set it.
  const admission = (name: string): number | undefined =>
    process.env[name] === undefined ? undefined : Number(process.env[name]);
  const maxConcurrent = admission("BENCH_MAX_CONCURRENT");
  const maxQueued = admission("BENCH_MAX_QUEUED");
  const engine = await createEngineFromEnv(process.env, {
    ...(maxConcurrent !== undefined ? { maxConcurrent } : {}),
    ...(maxQueued !== undefined ? { maxQueued } : {}),
  });
  const backend = engine.backend;
  if (!(backend instanceof MicrovmBackend) && !(backend instanceof NamespaceBackend))
    throw new Error("unknown backend");
  const templates = JSON.parse(process.env.BENCH_TEMPLATES ?? "[]") as RuntimeName[];
  if (backend instanceof MicrovmBackend)
    for (const rt of templates) {
      await backend.template(rt, LIMITS.memoryMb.default);
      if (engine.options.preimport?.[rt])
        await backend.template(rt, LIMITS.memoryMb.default, "preimport");
    }
  let last = "";
  const timer = setInterval(() => {
    const ready = Object.fromEntries(
      RUNTIMES.map((r) => {
        const w = backend.pooled(r);
        return [r, [w.ready, w.target]];
      }),
    );
    const line = JSON.stringify({ ready, starting: backend.pool.starting });
    if (line !== last) process.stderr.write(`bench-pool ${line}\n`);
    last = line;
  }, 50);
  const idleMs = Number(process.env.BENCH_IDLE_MS ?? 0);
  if (idleMs > 0)
    void (async () => {
      await backend.pool.whenFull();
      const groups: Record<string, { pids: number[]; memoryBytes: number }[]> = {};
      for (const [kind, list] of backend.pool.readySandboxes())
        groups[kind] = await Promise.all(
          list.map((v) => v.usage?.() ?? { pids: [], memoryBytes: 0 }),
        );
      const cost = await groupCost(groups, idleMs);
      process.stderr.write(`bench-idle ${JSON.stringify(cost)}\n`);
    })();
  let api: { server: ApiServer; db: Db; home: string } | null = null;
  if (process.env.BENCH_REST === "1") {
    const home = mkdtempSync(join(tmpdir(), "scratchrun-bench-rest-"));
    const db = openDatabase(home);
    const server = await startApiServer({
      engine,
      db,
      logger: createLogger("warn"),
      host: "127.0.0.1",
      port: 0,
      keyLimits: { maxConcurrent: 100_000, ratePerMinute: 1_000_000, burst: 100_000 },
    });
    api = { server, db, home };
    const { key } = await new KeyStore(db).create("bench");
    process.stderr.write(`bench-rest ${JSON.stringify({ url: server.url, key })}\n`);
  }
  const shutdown = async () => {
    clearInterval(timer);
    if (api) {
      await api.server.close();
      api.db.close();
      rmSync(api.home, { recursive: true, force: true });
    }
    await engine.close();
    process.exit(0);
  };
  process.stdin.on("end", () => void shutdown());
  process.on("SIGTERM", () => void shutdown());
  serveMcpStdio(engine, () => void shutdown());
  process.stderr.write(`bench-server ready (isolation ${backend.isolation})\n`);
}

main().catch((e: unknown) => {
  process.stderr.write(`bench server: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
