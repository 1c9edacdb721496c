// Limits taken before the work they limit, in the store both databases share (issue 47): wrong
// sign-ins reserved per name before the password check, and a key's session slots reserved before
// a sandbox starts, each by one statement (SQLite) or one statement under a per-key lock
// (Postgres). On Postgres two stores on two connection pools stand for two API replicas, and
// their attempts are sent at once: what each database lets through is counted.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { openDatabase } from "../../src/store/db.js";
import { migratePostgres, PostgresDriver } from "../../src/store/postgres.js";
import { SessionStore, START_HOLD_MS } from "../../src/store/sessions.js";
import { SqliteDriver, type SqlDriver } from "../../src/store/sql.js";
import { LOCKOUT, UserStore } from "../../src/store/users.js";
import { skipOutsideCi } from "../helpers/ci.js";
import { postgresMissing, startPostgres, type PgServer } from "../helpers/postgres.js";

const PG_MISSING = postgresMissing();
let pgServer: PgServer | undefined;
const cleanups: (() => Promise<void> | void)[] = [];

before(async () => {
  if (!PG_MISSING) pgServer = await startPostgres();
});
after(async () => {
  for (const c of cleanups.reverse()) await c();
  await pgServer?.stop();
});

/** Two drivers on one fresh database: two replicas' pools (SQLite: one process, one driver). */
const KINDS: Record<string, () => Promise<[SqlDriver, SqlDriver]>> = {
  sqlite: async () => {
    const home = mkdtempSync(join(tmpdir(), "sr-limits-"));
    const sql = new SqliteDriver(openDatabase(home));
    cleanups.push(async () => {
      await sql.close();
      rmSync(home, { recursive: true, force: true });
    });
    return [sql, sql];
  },
  postgres: async () => {
    const url = await pgServer!.createDatabase(`limits_${process.pid}`);
    const a = new PostgresDriver({ url, max: 8 });
    const b = new PostgresDriver({ url, max: 8 });
    await migratePostgres(a);
    cleanups.push(async () => {
      await a.close();
      await b.close();
    });
    return [a, b];
  },
};

for (const [kind, open] of Object.entries(KINDS))
  describe(
    `limits taken before the work, ${kind}`,
    { skip: kind === "postgres" ? skipOutsideCi(PG_MISSING) : undefined },
    () => {
      let a: SqlDriver;
      let b: SqlDriver;
      before(async () => {
        [a, b] = await open();
      });

      test("40 wrong sign-ins for one name at once, on two replicas: 5 passwords checked, the name locked", async () => {
        const replicas = [new UserStore(a), new UserStore(b)];
        const victim = "victim";
        await replicas[0]!.create(victim, "member", "the-right-password-1");
        const outcomes = await Promise.all(
          Array.from({ length: 40 }, (_, i) => replicas[i % 2]!.signIn(victim, `wrong-${i}-pw`)),
        );
        const checked = replicas.reduce((n, r) => n + r.checks.counts.done, 0);
        assert.equal(checked, LOCKOUT.failures, "passwords checked");
        const reasons = outcomes.map((o) => (o.ok ? "ok" : o.reason));
        assert.equal(reasons.filter((r) => r === "wrong").length, LOCKOUT.failures - 1);
        assert.equal(reasons.filter((r) => r === "locked").length, 40 - LOCKOUT.failures + 1);
        const right = await replicas[1]!.signIn(victim, "the-right-password-1");
        assert.equal(right.ok ? "" : right.reason, "locked");
        // The lock ends; the right password then clears the count.
        const later = Date.now() + LOCKOUT.lockMs + 1;
        assert.ok((await replicas[0]!.signIn(victim, "the-right-password-1", later)).ok);
        const left = await a.get<{ n: number | string }>(
          "SELECT count(*) AS n FROM signin_attempts WHERE name = ?",
          [victim],
        );
        assert.equal(Number(left?.n), 0, "a right password removes the name's count");
      });

      test("a name nobody has is counted and locked as a user's is", async () => {
        const users = new UserStore(a);
        const reasons: string[] = [];
        for (let i = 0; i < LOCKOUT.failures + 1; i++) {
          const r = await users.signIn("no-such-user", "guess-guess-1");
          reasons.push(r.ok ? "ok" : r.reason);
        }
        assert.deepEqual(reasons, [
          ...Array<string>(LOCKOUT.failures - 1).fill("wrong"),
          "locked",
          "locked",
        ]);
        assert.equal(users.checks.counts.done, LOCKOUT.failures, "each let through cost a check");
      });

      test("8 session starts at once for one key, on two replicas: 3 slots; a released or placed one as counted", async () => {
        const replicas = [new SessionStore(a), new SessionStore(b)];
        const start = {
          keyId: "k1",
          transport: "rest" as const,
          runtime: "bash",
          memoryMb: 256,
          network: "none",
        };
        const ids = await Promise.all(
          Array.from({ length: 8 }, (_, i) => replicas[i % 2]!.reserve(start, 3)),
        );
        const got = ids.filter((x): x is string => x !== null);
        assert.equal(got.length, 3, JSON.stringify(ids));
        assert.equal(await replicas[0]!.openCount("k1"), 3);
        // Another key is not held by k1's slots.
        assert.ok(await replicas[1]!.reserve({ ...start, keyId: "k2" }, 3));
        // A start that failed gives its slot back; one that ran keeps it, now under its id.
        await replicas[0]!.release(got[0]!);
        assert.equal(await replicas[1]!.openCount("k1"), 2);
        await replicas[1]!.placed(got[1]!, {
          sessionId: "the-session-id",
          runtime: "bash",
          memoryMb: 256,
          network: "none",
          isolation: "namespace",
        });
        assert.equal((await replicas[0]!.find("the-session-id"))?.id, got[1]);
        await replicas[0]!.release(got[1]!);
        assert.equal(await replicas[0]!.openCount("k1"), 2, "a placed session is not released");
        const third = await replicas[0]!.reserve(start, 3);
        assert.ok(third);
        assert.equal(await replicas[1]!.reserve(start, 3), null);
        // A start its replica never finished holds the slot for START_HOLD_MS, then not.
        const later = Date.now() + START_HOLD_MS + 1;
        assert.equal(await replicas[0]!.openCount("k1", later), 1, "the placed session only");
        assert.ok(await replicas[1]!.reserve(start, 3, later));
        // A sweep removes reservations past their hold; the placed session stays open.
        await replicas[0]!.markOutlived(0, later + START_HOLD_MS + 1);
        const open = await a.all<{ id: string }>(
          "SELECT id FROM sessions WHERE key_id = 'k1' AND ended_at IS NULL",
        );
        assert.deepEqual(
          open.map((r) => r.id),
          [got[1]],
        );
      });
    },
  );
