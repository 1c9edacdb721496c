import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import type { Engine, EngineOptions } from "../../src/engine/engine.js";
import { createLogger } from "../../src/http/log.js";
import { startApiServer, type ApiServer, type ApiServerCommon } from "../../src/api/server.js";
import { createEngineFromEnv } from "../../src/compose/engine-factory.js";
import { openDatabase, type Db } from "../../src/store/db.js";
import { KeyStore } from "../../src/store/keys.js";
import type { RunRow } from "../../src/store/runs.js";

/** A real service on 127.0.0.1 with a real engine, its own state dir and a captured log. */
export interface ServiceHarness {
  api: ApiServer;
  engine: Engine;
  db: Db;
  home: string;
  keys: KeyStore;
  runs: RunRows;
  logText(): string;
  post(
    path: string,
    body: unknown,
    key?: string,
    headers?: Record<string, string>,
  ): Promise<Response>;
  close(): Promise<void>;
}

export async function startService(
  engineOptions: EngineOptions = {},
  apiOptions: Partial<ApiServerCommon> = {},
  env: Record<string, string> = {},
): Promise<ServiceHarness> {
  const home = mkdtempSync(join(tmpdir(), "sr-api-test-"));
  const db = openDatabase(home);
  const log = new PassThrough();
  let logged = "";
  log.on("data", (d: Buffer) => (logged += d.toString()));
  const engine = await createEngineFromEnv(
    { ...process.env, SCRATCHRUN_ISOLATION: "namespace", ...env },
    engineOptions,
  );
  const api = await startApiServer({
    engine,
    db,
    logger: createLogger("info", log),
    host: "127.0.0.1",
    port: 0,
    ...apiOptions,
  });
  return {
    api,
    engine,
    db,
    home,
    keys: new KeyStore(db),
    runs: runRows(db),
    logText: () => logged,
    post: (path, body, key, headers = {}) =>
      fetch(`${api.url}${path}`, {
        method: "POST",
        headers: {
          "Content-Type": "application/json",
          ...(key ? { Authorization: `Bearer ${key}` } : {}),
          ...headers,
        },
        body: typeof body === "string" ? body : JSON.stringify(body),
      }),
    async close() {
      await api.close();
      await engine.close();
      db.close();
      rmSync(home, { recursive: true, force: true });
    },
  };
}

/** The run records, read synchronously from a test's own SQLite database. */
export interface RunRows {
  all(): RunRow[];
  get(id: string): RunRow | undefined;
}

export function runRows(db: Db): RunRows {
  return {
    all: () => db.prepare("SELECT * FROM runs ORDER BY received_at, id").all() as RunRow[],
    get: (id) => db.prepare("SELECT * FROM runs WHERE id = ?").get(id) as RunRow | undefined,
  };
}

export async function waitFor<T>(
  what: string,
  probe: () => T | undefined | false | Promise<T | undefined | false>,
  ms = 30_000,
) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
