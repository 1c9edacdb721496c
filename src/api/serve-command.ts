import { parseArgs } from "node:util";
import { createEngineFromEnv } from "../setup/engine-factory.js";
import { openDatabase } from "../store/db.js";
import { scratchrunHome } from "../store/home.js";
import { acquireHomeLock } from "../store/lock.js";
import { RunStore } from "../store/runs.js";
import { SandboxStore } from "../store/sandboxes.js";
import { createLogger } from "./log.js";
import { reapOrphanSandboxes } from "./reap.js";
import { startApiServer } from "./server.js";

export const SERVE_USAGE = `scratchrun serve [--host H] [--port N] [limits]

  --host H                 address to bind (default 127.0.0.1; loopback binds check Host/Origin)
  --port N                 port (default 8787; 0 picks a free one)
  --max-concurrent N       sandboxes running at once (default 4)
  --max-queued N           calls waiting for a sandbox (default 64)
  --queue-deadline-ms N    longest wait in the queue before 429 (default 60000)
  --key-concurrency N      calls in flight per API key (default 4)
  --key-rate N             calls per minute per API key (default 120, burst 30)
  --body-cap-bytes N       largest request body (default 16 MiB)

State (database, lock) lives in SCRATCHRUN_HOME (default /var/lib/scratchrun for root).
`;

function int(v: string | undefined, name: string, fallback: number, min = 1): number {
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer >= ${min}`);
  return n;
}

/**
 * `scratchrun serve`: takes the state directory's lock, marks runs a dead predecessor left
 * running as failed, destroys its orphaned sandboxes, then serves until SIGTERM/SIGINT, when it
 * drains calls in flight before exiting.
 */
export async function runServe(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      host: { type: "string" },
      port: { type: "string" },
      "max-concurrent": { type: "string" },
      "max-queued": { type: "string" },
      "queue-deadline-ms": { type: "string" },
      "key-concurrency": { type: "string" },
      "key-rate": { type: "string" },
      "body-cap-bytes": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(SERVE_USAGE);
    return 0;
  }
  const logger = createLogger();
  const home = scratchrunHome(env);
  const db = openDatabase(home);
  const lock = acquireHomeLock(home);
  const interrupted = new RunStore(db).markInterrupted();
  const sandboxes = new SandboxStore(db);
  const reaped = await reapOrphanSandboxes({ recorded: sandboxes.names() });
  sandboxes.clear();
  logger.info(
    {
      home,
      interrupted_runs: interrupted,
      reaped_sandboxes: reaped.cgroups.length,
      reaped_processes: reaped.processes.length,
    },
    "recovered",
  );
  const engine = await createEngineFromEnv(env, {
    maxConcurrent: int(values["max-concurrent"], "max-concurrent", 4),
    maxQueued: int(values["max-queued"], "max-queued", 64, 0),
    queueDeadlineMs: int(values["queue-deadline-ms"], "queue-deadline-ms", 60_000),
  });
  const api = await startApiServer({
    engine,
    db,
    logger,
    host: values.host ?? "127.0.0.1",
    port: int(values.port, "port", 8787, 0),
    keyLimits: {
      maxConcurrent: int(values["key-concurrency"], "key-concurrency", 4),
      ratePerMinute: int(values["key-rate"], "key-rate", 120),
    },
    bodyCapBytes: int(values["body-cap-bytes"], "body-cap-bytes", 16 * 1024 * 1024),
  });
  process.stderr.write(
    `scratchrun: serving on ${api.url} (isolation ${engine.backend.isolation})\n`,
  );
  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) return resolve(1);
      stopping = true;
      logger.info({ signal, in_flight: api.service.active }, "draining");
      void (async () => {
        await api.close();
        await engine.close();
        db.close();
        lock.release();
        resolve(0);
      })();
    };
    process.on("SIGTERM", () => stop("SIGTERM"));
    process.on("SIGINT", () => stop("SIGINT"));
  });
}
