/**
 * The console's run history and usage queries (RunStore.history, RunStore.usage) on both stores:
 * SQLite and a real Postgres. Only the keys asked for, filters, paging, and calls per UTC day.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { openDatabase } from "../../src/store/db.js";
import { migratePostgres, PostgresDriver } from "../../src/store/postgres.js";
import { RunStore } from "../../src/store/runs.js";
import { SqliteDriver, type SqlDriver } from "../../src/store/sql.js";
import { startPostgres, type PgServer } from "../helpers/postgres.js";

const DAY = 86_400_000;
const T0 = Date.UTC(2026, 11, 1, 12);

/** A finished run, as the service records one (the columns the console reads, and the required). */
async function insert(
  sql: SqlDriver,
  id: string,
  keyId: string,
  runtime: string,
  exit: string,
  at: number,
) {
  await sql.run(
    `INSERT INTO runs (id, key_id, transport, runtime, network, timeout_ms, memory_mb, status,
       received_at, duration_ms, isolation, exit_reason, code_bytes, code_sha256, env_count,
       files_in_count, files_in_bytes)
     VALUES (?, ?, 'rest', ?, 'none', 10000, 256, 'finished', ?, 40, 'namespace', ?, 1, 'x', 0, 0, 0)`,
    [id, keyId, runtime, at, exit],
  );
}

let pg: PgServer | undefined;
const cleanups: (() => Promise<void> | void)[] = [];
before(async () => {
  pg = await startPostgres();
});
after(async () => {
  for (const c of cleanups.reverse()) await c();
  await pg?.stop();
});

const KINDS: Record<string, () => Promise<SqlDriver>> = {
  sqlite: async () => {
    const home = mkdtempSync(join(tmpdir(), "sr-console-history-"));
    const sql = new SqliteDriver(openDatabase(home));
    cleanups.push(async () => {
      await sql.close();
      rmSync(home, { recursive: true, force: true });
    });
    return sql;
  },
  postgres: async () => {
    const sql = new PostgresDriver({ url: await pg!.createDatabase(`console_${process.pid}`) });
    await migratePostgres(sql);
    cleanups.push(() => sql.close());
    return sql;
  },
};

for (const [kind, open] of Object.entries(KINDS))
  describe(`console history and usage (${kind})`, () => {
    test("only the keys asked for; filters by runtime, exit and time; pages newest first; counts per UTC day", async () => {
      const sql = await open();
      const runs = new RunStore(sql);
      await insert(sql, "a1", "aaaa", "python3.12", "ok", T0);
      await insert(sql, "a2", "aaaa", "bash", "timeout", T0 + 1000);
      await insert(sql, "a3", "aaaa", "bash", "ok", T0 + DAY);
      await insert(sql, "b1", "bbbb", "bash", "ok", T0 + 2000);

      const mine = await runs.history({ keyIds: ["aaaa"], limit: 50 });
      assert.deepEqual(
        mine.map((r) => r.id),
        ["a3", "a2", "a1"],
      );
      assert.equal(mine[0]!.received_at, T0 + DAY);
      assert.equal(mine[0]!.duration_ms, 40);
      assert.deepEqual(await runs.history({ keyIds: [], limit: 50 }), []);
      const bash = await runs.history({ keyIds: ["aaaa"], runtime: "bash", limit: 50 });
      assert.deepEqual(
        bash.map((r) => r.id),
        ["a3", "a2"],
      );
      const timeouts = await runs.history({ keyIds: ["aaaa"], exitReason: "timeout", limit: 50 });
      assert.deepEqual(
        timeouts.map((r) => r.id),
        ["a2"],
      );
      const since = await runs.history({ keyIds: ["aaaa"], since: T0 + 500, limit: 50 });
      assert.deepEqual(
        since.map((r) => r.id),
        ["a3", "a2"],
      );
      const page1 = await runs.history({ keyIds: ["aaaa", "bbbb"], limit: 2 });
      const page2 = await runs.history({
        keyIds: ["aaaa", "bbbb"],
        limit: 2,
        before: page1.at(-1)!.received_at,
      });
      assert.deepEqual(
        [...page1, ...page2].map((r) => r.id),
        ["a3", "b1", "a2", "a1"],
      );

      const usage = await runs.usage(["aaaa"], T0 - DAY);
      assert.deepEqual(usage, [
        { key_id: "aaaa", day: "2026-12-01", runs: 2, duration_ms: 80 },
        { key_id: "aaaa", day: "2026-12-02", runs: 1, duration_ms: 40 },
      ]);
      assert.deepEqual(await runs.usage(["aaaa"], T0 + DAY), [
        { key_id: "aaaa", day: "2026-12-02", runs: 1, duration_ms: 40 },
      ]);
    });
  });
