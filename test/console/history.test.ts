/**
 * The console's run history, run page and usage queries (RunStore.history, RunStore.one,
 * RunStore.usage, RunStore.report) on both stores: SQLite and a real Postgres. Only the keys asked
 * for, filters (the session's too), paging, one run's whole record with its session, calls per
 * UTC day, and a period's calls, compute, peak concurrency and refusals per key and in total.
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
  session: string | null = null,
) {
  await sql.run(
    `INSERT INTO runs (id, key_id, transport, runtime, network, timeout_ms, memory_mb, status,
       received_at, duration_ms, isolation, exit_reason, code_bytes, code_sha256, env_count,
       files_in_count, files_in_bytes, session_record)
     VALUES (?, ?, 'rest', ?, 'none', 10000, 256, 'finished', ?, 40, 'namespace', ?, 1, 'x', 0, 0, 0, ?)`,
    [id, keyId, runtime, at, exit, session],
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

let databases = 0;
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
    const sql = new PostgresDriver({
      url: await pg!.createDatabase(`console_${process.pid}_${++databases}`),
    });
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

    test("one run: its whole record and its session's, for its own keys only; the session filter", async () => {
      const sql = await open();
      const runs = new RunStore(sql);
      await sql.run(
        `INSERT INTO sessions (id, id_sha256, key_id, transport, runtime, memory_mb, network,
           started_at, ended_at, end_reason, calls)
         VALUES ('s1', 'digest', 'aaaa', 'rest', 'bash', 256, 'none', ?, ?, 'closed', 2)`,
        [T0, T0 + 5000],
      );
      await insert(sql, "s1-a", "aaaa", "bash", "ok", T0 + 1000, "s1");
      await insert(sql, "s1-b", "aaaa", "bash", "error", T0 + 2000, "s1");
      await insert(sql, "alone", "aaaa", "bash", "ok", T0 + 3000);
      await insert(sql, "other", "bbbb", "bash", "ok", T0 + 4000);

      const inSession = await runs.history({ keyIds: ["aaaa"], session: "s1", limit: 50 });
      assert.deepEqual(
        inSession.map((r) => [r.id, r.session_record]),
        [
          ["s1-b", "s1"],
          ["s1-a", "s1"],
        ],
      );

      const one = await runs.one(["aaaa"], "s1-a");
      assert.ok(one);
      // Every column of the row, numbers as numbers on both stores; none of them code or output.
      const cols = (
        await sql.all<Record<string, unknown>>("SELECT * FROM runs WHERE id = 's1-a'")
      )[0]!;
      assert.deepEqual(Object.keys(one.run).sort(), Object.keys(cols).sort());
      assert.equal(one.run.received_at, T0 + 1000);
      assert.equal(one.run.timeout_ms, 10000);
      assert.equal(one.run.code_sha256, "x");
      assert.equal(one.run.stdout_bytes, null);
      assert.deepEqual(one.session, {
        id: "s1",
        runtime: "bash",
        started_at: T0,
        ended_at: T0 + 5000,
        end_reason: "closed",
        calls: 2,
      });
      assert.equal((await runs.one(["aaaa"], "alone"))!.session, null);
      // Another key's run is not found, exactly as a run that does not exist.
      assert.equal(await runs.one(["aaaa"], "other"), undefined);
      assert.equal(await runs.one(["aaaa"], "nope"), undefined);
      assert.equal(await runs.one([], "s1-a"), undefined);
    });

    test("usage over a period: calls, sandbox- and GB-seconds, peak concurrency and refusals, per key and in total", async () => {
      const sql = await open();
      const runs = new RunStore(sql);
      const run = (
        id: string,
        key: string,
        received: number,
        started: number | null,
        finished: number | null,
        duration: number | null,
        memory: number,
        error: string | null = null,
      ) =>
        sql.run(
          `INSERT INTO runs (id, key_id, transport, runtime, network, timeout_ms, memory_mb, status,
             received_at, started_at, finished_at, duration_ms, error_code, code_bytes, code_sha256,
             env_count, files_in_count, files_in_bytes)
           VALUES (?, ?, 'rest', 'bash', 'none', 10000, ?, ?, ?, ?, ?, ?, ?, 1, 'x', 0, 0, 0)`,
          [
            id,
            key,
            memory,
            error ? "failed" : finished === null ? "running" : "finished",
            T0 + received,
            started === null ? null : T0 + started,
            finished === null ? null : T0 + finished,
            duration,
            error,
          ],
        );
      await run("r1", "aaaa", 0, 0, 100, 100, 256);
      await run("r2", "aaaa", 10, 50, 150, 100, 1024);
      // Starts as r2 ends: the two only touch.
      await run("r3", "aaaa", 140, 150, 300, 150, 512);
      await run("r4", "aaaa", 400, null, 400, null, 256, "BUSY");
      await run("r5", "aaaa", 500, 500, 510, null, 256, "SANDBOX_FAILED");
      await run("b1", "bbbb", 60, 60, 120, 60, 256);
      // Still running: its end is taken to be now (T0 + 1000).
      await run("b3", "bbbb", 80, 90, null, null, 256);
      await run("b2", "bbbb", 2 * DAY, 2 * DAY, 2 * DAY + 10, 10, 256);
      await run("c1", "cccc", 70, 70, 130, 60, 256);

      const r = await runs.report({
        keyIds: ["aaaa", "bbbb"],
        since: T0 - 1,
        until: T0 + DAY,
        now: T0 + 1000,
      });
      assert.deepEqual(r.per_key, [
        {
          key_id: "aaaa",
          calls: 5,
          sandbox_seconds: 0.35,
          gb_seconds: 0.2,
          peak_concurrency: 2,
          refusals: { BUSY: 1, SANDBOX_FAILED: 1 },
        },
        {
          key_id: "bbbb",
          calls: 2,
          sandbox_seconds: 0.06,
          gb_seconds: 0.015,
          peak_concurrency: 2,
          refusals: {},
        },
      ]);
      // r1, r2, b1 and b3 all run at T0 + 90; cccc is not asked for.
      assert.deepEqual(r.total, {
        calls: 7,
        sandbox_seconds: 0.41,
        gb_seconds: 0.215,
        peak_concurrency: 4,
        refusals: { BUSY: 1, SANDBOX_FAILED: 1 },
      });
      assert.deepEqual(await runs.report({ keyIds: [], since: 0, until: T0 + DAY, now: T0 }), {
        per_key: [],
        total: { calls: 0, sandbox_seconds: 0, gb_seconds: 0, peak_concurrency: 0, refusals: {} },
      });
      // The per-day rows end where the period does.
      assert.deepEqual(
        (await runs.usage(["bbbb"], T0 - 1, T0 + DAY)).map((u) => [u.day, u.runs]),
        [["2026-12-01", 2]],
      );
    });
  });
