import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { openDatabase } from "../../src/store/db.js";
import { hashKey, KeyStore, parseKeyId } from "../../src/store/keys.js";
import { DATABASE_FILE } from "../../src/store/home.js";
import Sqlite from "better-sqlite3";
import { MIGRATIONS } from "../../src/store/migrations.js";
import { OAUTH_TTL } from "../../src/store/oauth.js";
import { checkPassword, hashPassword, LOCKOUT, SESSION_MS } from "../../src/store/users.js";
import { storeOn, type Store } from "../../src/store/open.js";
import { INVITE_MS, InviteMakerNotAdmin } from "../../src/store/invites.js";
import { isTransientDbError, migratePostgres, PostgresDriver } from "../../src/store/postgres.js";
import { admitShared } from "../../src/store/shared-quota.js";
import { decideQuota } from "../../src/policy/quota.js";
import fc from "fast-check";
import { SqliteDriver, type SqlDriver } from "../../src/store/sql.js";
import { parseExecRequest } from "../../src/schema/validate.js";
import type { ExecOutcome } from "../../src/engine/result.js";
import { skipOutsideCi } from "../helpers/ci.js";
import { postgresMissing, relaunch, startPostgres, type PgServer } from "../helpers/postgres.js";

const PG_MISSING = postgresMissing();
const REQ = parseExecRequest({ runtime: "bash", code: "echo hi", env: { A: "secret-value" } });
const OUTCOME: ExecOutcome = {
  result: {
    stdout: "hi\n",
    stderr: "",
    exit_code: 0,
    exit_reason: "ok",
    signal: null,
    duration_ms: 12,
    isolation: "namespace",
    network: "none",
    stdout_truncated: false,
    stderr_truncated: false,
    stdout_omitted_bytes: 0,
    stderr_omitted_bytes: 0,
    files: [],
  },
  files: [],
  images: [],
};

let pgServer: PgServer | undefined;
let dbCount = 0;
const cleanups: (() => Promise<void> | void)[] = [];

before(async () => {
  if (!PG_MISSING) pgServer = await startPostgres();
});
after(async () => {
  for (const c of cleanups.reverse()) await c();
  await pgServer?.stop();
});

/** A fresh, migrated store of each kind. */
const KINDS: Record<string, () => Promise<Store>> = {
  sqlite: async () => {
    const home = mkdtempSync(join(tmpdir(), "sr-store-"));
    const store = storeOn(new SqliteDriver(openDatabase(home)), 0);
    cleanups.push(async () => {
      await store.close().catch(() => {});
      rmSync(home, { recursive: true, force: true });
    });
    return store;
  },
  postgres: async () => {
    const url = await pgServer!.createDatabase(`store_${process.pid}_${++dbCount}`);
    const sql = new PostgresDriver({ url });
    await migratePostgres(sql);
    const store = storeOn(sql, 0);
    cleanups.push(() => store.close().catch(() => {}));
    return store;
  },
};

const VETERAN_ID = "0123456789ab";
const VETERAN = `srk_${VETERAN_ID}_${"v".repeat(43)}`;

/**
 * A database of each kind with only the first `version` migrations applied (a release's), and
 * the step that brings it to the current schema the way a server's start does.
 */
async function openAtVersion(
  kind: string,
  version: number,
): Promise<{ sql: SqlDriver; migrate(): Promise<Store> }> {
  if (kind === "sqlite") {
    const home = mkdtempSync(join(tmpdir(), "sr-store-old-"));
    const db = new Sqlite(join(home, DATABASE_FILE));
    for (const m of MIGRATIONS.slice(0, version)) db.exec(m.sqlite);
    db.pragma(`user_version = ${version}`);
    cleanups.push(() => rmSync(home, { recursive: true, force: true }));
    return {
      sql: new SqliteDriver(db),
      async migrate() {
        db.close();
        const store = storeOn(new SqliteDriver(openDatabase(home)), 0);
        cleanups.push(() => store.close().catch(() => {}));
        return store;
      },
    };
  }
  const url = await pgServer!.createDatabase(`store_old_${process.pid}_${++dbCount}`);
  const sql = new PostgresDriver({ url });
  for (const m of MIGRATIONS.slice(0, version)) await sql.run(m.postgres);
  await sql.run("CREATE TABLE schema_version (version INTEGER NOT NULL)");
  await sql.run("INSERT INTO schema_version (version) VALUES (?)", [version]);
  cleanups.push(() => sql.close().catch(() => {}));
  return {
    sql,
    async migrate() {
      assert.equal(await migratePostgres(sql), MIGRATIONS.length - version);
      return storeOn(sql, 0);
    },
  };
}

async function columns(sql: SqlDriver, table: string): Promise<string[]> {
  const rows =
    sql.dialect === "sqlite"
      ? await sql.all<{ name: string }>(`SELECT name FROM pragma_table_info('${table}')`)
      : await sql.all<{ name: string }>(
          "SELECT column_name AS name FROM information_schema.columns WHERE table_name = ?",
          [table],
        );
  return rows.map((r) => r.name).sort();
}

for (const [kind, open] of Object.entries(KINDS)) {
  describe(
    `store on ${kind}`,
    { skip: kind === "postgres" ? skipOutsideCi(PG_MISSING) : undefined },
    () => {
      let store: Store;
      before(async () => {
        store = await open();
      });

      test("migrations bring a fresh database to the same tables and columns on both", async () => {
        const expected: Record<string, string[]> = {
          keys: [
            "created_at",
            "expires_at",
            "hash",
            "id",
            "last_used_at",
            "name",
            "oidc_subject",
            "owner_id",
            "policy",
            "revoked_at",
          ],
          audit_log: ["action", "actor", "actor_id", "address", "at", "detail", "id", "target"],
          users: [
            "created_at",
            "failed_count",
            "id",
            "key_ceiling",
            "locked_until",
            "name",
            "oidc_subject",
            "password_hash",
            "role",
          ],
          console_sessions: ["created_at", "csrf", "expires_at", "id_sha256", "user_id"],
          oauth_clients: ["client_id", "created_at", "kind", "name", "redirect_uris"],
          oauth_grants: [
            "client_id",
            "client_name",
            "created_at",
            "id",
            "key_id",
            "resource",
            "revoked_at",
            "revoked_reason",
            "scope",
            "user_id",
          ],
          oauth_tokens: ["created_at", "expires_at", "grant_id", "kind", "token_sha256", "used_at"],
          replicas: ["expires_at", "id", "renewed_at", "started_at"],
          key_quota: ["at", "key_id", "tokens"],
          sandboxes: ["name", "seen_at", "server_pid"],
          sessions: [
            "calls",
            "end_reason",
            "ended_at",
            "id",
            "id_sha256",
            "isolation",
            "key_id",
            "memory_mb",
            "network",
            "replica_id",
            "runtime",
            "started_at",
            "starting_until",
            "transport",
            "worker",
            "worker_id",
          ],
          signin_attempts: ["failed_count", "last_at", "locked_until", "name"],
        };
        for (const [table, cols] of Object.entries(expected))
          assert.deepEqual(await columns(store.sql, table), cols, table);
        const runCols = await columns(store.sql, "runs");
        for (const c of [
          "replica_id",
          "worker",
          "status",
          "error_code",
          "code_sha256",
          "session_record",
        ])
          assert.ok(runCols.includes(c), c);
        assert.equal(runCols.length, 32);
        if (store.sql.dialect === "postgres") {
          assert.equal(await migratePostgres(store.sql), 0, "a second run applies nothing");
          const v = await store.sql.get<{ version: number }>("SELECT version FROM schema_version");
          assert.equal(v?.version, MIGRATIONS.length);
        } else {
          assert.equal(store.sqlite!.pragma("user_version", { simple: true }), MIGRATIONS.length);
        }
      });

      test("a created key verifies; near misses, other keys' ids and revoked keys do not", async () => {
        const { keys } = store;
        const a = await keys.create("alice");
        const b = await keys.create("bob");
        assert.equal((await keys.verify(a.key))?.id, a.id);
        assert.equal((await keys.verify(b.key))?.id, b.id);
        const secretA = a.key.slice(-43);
        const last = a.key.at(-1) === "A" ? "B" : "A";
        for (const bad of [
          a.key.slice(0, -1) + last,
          `srk_${b.id}_${secretA}`,
          a.key + "x",
          a.key.toUpperCase(),
          "",
          `srk_${a.id}_`,
          secretA,
        ])
          assert.equal(await keys.verify(bad), null, bad.slice(0, 20));
        assert.deepEqual(await keys.revoke("alice"), [a.id]);
        assert.equal(await keys.verify(a.key), null);
        assert.equal((await keys.verify(b.key))?.id, b.id);
        assert.deepEqual(await keys.revoke("alice"), []);
      });

      test("a replica's verified-key cache: a revoked key stops within its time, a wrong key is never cached", async () => {
        const cached = new KeyStore(store.sql, { verifiedCacheMs: 1000 });
        const c = await store.keys.create("carol");
        const t0 = 1_000_000;
        assert.equal((await cached.verify(c.key, t0))?.id, c.id);
        const wrong = c.key.slice(0, -1) + (c.key.at(-1) === "A" ? "B" : "A");
        assert.equal(await cached.verify(wrong, t0), null);
        await store.keys.revoke("carol");
        assert.equal((await cached.verify(c.key, t0 + 999))?.id, c.id, "trusted within the second");
        assert.equal(await cached.verify(c.key, t0 + 1000), null, "revoked after it");
        assert.equal(
          await cached.verify(c.key, t0 + 1001),
          null,
          "a refusal is not cached as a pass",
        );
        assert.equal(await cached.verify(wrong, t0 + 1), null);
        // Without the cache (the single server) a revocation holds at once.
        const d = await store.keys.create("dave");
        assert.equal((await store.keys.verify(d.key))?.id, d.id);
        await store.keys.revoke("dave");
        assert.equal(await store.keys.verify(d.key), null);
      });

      test("STORE-KEY-EXPIRY: a key past its expiry verifies nowhere (by key, by id, by OIDC subject, through a replica's cache), its sessions read as its key's end; a past expiry is refused", async () => {
        const t0 = Date.now();
        const e = await store.keys.create("erin", null, t0, null, "erin-sub", t0 + 60_000);
        assert.equal(e.expiresAt, t0 + 60_000);
        const cached = new KeyStore(store.sql, { verifiedCacheMs: 10 * 60_000 });
        assert.equal((await store.keys.verify(e.key, t0 + 59_999))?.id, e.id);
        assert.equal((await cached.verify(e.key, t0 + 59_000))?.id, e.id);
        assert.equal((await store.keys.active(e.id, t0 + 59_999))?.id, e.id);
        assert.equal((await store.keys.bySubject("erin-sub", t0 + 59_999))?.id, e.id);
        for (const at of [t0 + 60_000, t0 + 120_000]) {
          assert.equal(await store.keys.verify(e.key, at), null);
          // A replica's cache never keeps a key past its expiry, however long its time.
          assert.equal(await cached.verify(e.key, at), null);
          assert.equal(await store.keys.active(e.id, at), null);
          assert.equal(await store.keys.bySubject("erin-sub", at), null);
        }
        const listed = (await store.keys.list()).find((k) => k.id === e.id);
        assert.equal(listed?.expiresAt, t0 + 60_000);
        assert.equal(listed?.revokedAt, null);
        // Its open session reads as its key's end from the expiry on (the sweep ends it).
        const rec = await store.sessions.begin(
          {
            sessionId: "E".repeat(22),
            keyId: e.id,
            transport: "rest",
            runtime: "bash",
            memoryMb: 256,
            network: "none",
            isolation: "namespace",
          },
          t0,
        );
        const open = async (at: number) =>
          (await store.sessions.openWithKeys(at)).find((s) => s.recordId === rec);
        assert.equal((await open(t0 + 59_999))?.revoked, false);
        assert.equal((await open(t0 + 60_000))?.revoked, true);
        await store.sessions.end(rec, "policy", null);
        for (const bad of [t0 - 1, t0, 1.5, Number.NaN])
          await assert.rejects(
            store.keys.create("late", null, t0, null, null, bad),
            /expiry is a time in the future/,
          );
      });

      test("STORE-AUDIT: the audit log keeps entries as recorded, newest first, in pages; it offers no way to change or remove one", async () => {
        const audit = store.users.audit;
        for (let i = 0; i < 5; i++)
          await audit.record(
            {
              actorId: "u_1",
              actor: "ada",
              address: "192.0.2.7",
              action: "key.revoke",
              target: `k${i}`,
              detail: { name: `key ${i}` },
            },
            50_000 + i,
          );
        const page1 = await audit.list(3);
        assert.deepEqual(
          page1.map((e) => e.target),
          ["k4", "k3", "k2"],
        );
        assert.deepEqual(page1[0], {
          id: page1[0]!.id,
          at: 50_004,
          actorId: "u_1",
          actor: "ada",
          address: "192.0.2.7",
          action: "key.revoke",
          target: "k4",
          detail: { name: "key 4" },
        });
        const page2 = await audit.list(3, page1.at(-1)!.at);
        assert.deepEqual(
          page2.map((e) => e.target),
          ["k1", "k0"],
        );
        // Append only: the store's whole surface is record and list.
        assert.deepEqual(Object.getOwnPropertyNames(Object.getPrototypeOf(audit)).sort(), [
          "constructor",
          "list",
          "record",
        ]);
      });

      test("keys are stored only as hashes and never listed; names are checked", async () => {
        const a = await store.keys.create("ci");
        assert.equal(parseKeyId(a.key), a.id);
        const listed = JSON.stringify(await store.keys.list());
        assert.ok(!listed.includes(a.key.slice(-43)));
        assert.match(a.key, /^srk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}$/);
        const raw = JSON.stringify(await store.sql.all("SELECT * FROM keys"));
        assert.ok(!raw.includes(a.key.slice(-43)), "the table holds no secret");
        for (const bad of ["", " lead", "a/b", "x".repeat(65), "a\nb"])
          await assert.rejects(store.keys.create(bad));
        const touched = Date.now();
        await store.keys.touch(a.id, touched);
        const info = (await store.keys.list()).find((k) => k.id === a.id)!;
        assert.equal(info.lastUsedAt, touched, "ms timestamps come back as numbers");
      });

      test("a key's policy is stored with it, read back with every verification, updated and cleared; a bad one is refused, a corrupt one fails closed", async () => {
        const { keys } = store;
        const narrow = await keys.create("narrow", { runtimes: ["bash"], max_timeout_ms: 5000 });
        assert.deepEqual(narrow.policy, { runtimes: ["bash"], max_timeout_ms: 5000 });
        assert.deepEqual((await keys.verify(narrow.key))?.policy, narrow.policy);
        const plain = await keys.create("plain");
        assert.equal((await keys.verify(plain.key))?.policy, null);
        const updated = await keys.updatePolicy("narrow", {
          max_timeout_ms: 900_000,
          max_memory_mb: 4096,
          runtimes: null,
        });
        assert.deepEqual(updated, {
          id: narrow.id,
          policy: { max_timeout_ms: 900_000, max_memory_mb: 4096 },
        });
        assert.deepEqual((await keys.verify(narrow.key))?.policy, updated!.policy);
        const listed = (await keys.list()).find((k) => k.id === narrow.id);
        assert.deepEqual(listed?.policy, updated!.policy);
        await assert.rejects(keys.updatePolicy(narrow.id, { max_timeout_ms: 900_001 }), /900000/);
        await assert.rejects(keys.create("bad", { network: "none", egress_allow: ["a.com"] }));
        assert.equal(
          (await keys.list()).some((k) => k.name === "bad"),
          false,
          "nothing written",
        );
        assert.equal(await keys.updatePolicy("nobody", { concurrency: 1 }), null);
        await keys.create("twin");
        await keys.create("twin");
        await assert.rejects(keys.updatePolicy("twin", { concurrency: 1 }), /give the id/);
        assert.deepEqual(
          await keys.updatePolicy(narrow.id, { max_timeout_ms: null, max_memory_mb: null }),
          { id: narrow.id, policy: null },
        );
        assert.equal(
          (
            await store.sql.get<{ policy: string | null }>("SELECT policy FROM keys WHERE id = ?", [
              narrow.id,
            ])
          )?.policy,
          null,
          "no policy left: NULL, the server's settings",
        );
        await store.sql.run("UPDATE keys SET policy = ? WHERE id = ?", [
          '{"max_timeout_ms": 99999999}',
          plain.id,
        ]);
        await assert.rejects(keys.verify(plain.key), (e: Error & { code?: string }) => {
          assert.equal(e.code, "INTERNAL");
          assert.match(e.message, /stored policy of API key .* is not valid/);
          return true;
        });
        await store.sql.run("UPDATE keys SET policy = NULL WHERE id = ?", [plain.id]);
      });

      test("migration 5 brings a database of the last release forward: its keys keep working, with no policy", async () => {
        const old = await openAtVersion(kind, 4);
        const created = await new KeyStore(old.sql).create("veteran").catch(() => null);
        assert.equal(created, null, "version 4 has no policy column to write");
        await old.sql.run("INSERT INTO keys (id, name, hash, created_at) VALUES (?, ?, ?, ?)", [
          VETERAN_ID,
          "veteran",
          hashKey(VETERAN),
          1,
        ]);
        const store5 = await old.migrate();
        assert.deepEqual(await store5.keys.verify(VETERAN), {
          id: VETERAN_ID,
          name: "veteran",
          policy: null,
        });
        assert.ok((await columns(store5.sql, "keys")).includes("policy"));
      });

      test("STORE-INVITES: a link is kept only as its token's hash; it is accepted once (two at once: one wins), never after 24 h or a cancel, never for a name taken since", async () => {
        const t0 = Date.now();
        const a = await store.users.invite("inv-a", "member", null, t0);
        const row = await store.sql.get<{ token_sha256: string }>(
          "SELECT token_sha256 FROM invites WHERE id = ?",
          [a.invite.id],
        );
        assert.equal(row?.token_sha256, createHash("sha256").update(a.token).digest("hex"));
        assert.ok(!JSON.stringify(await store.sql.all("SELECT * FROM invites")).includes(a.token));
        assert.deepEqual(
          (await store.users.invites.pending(t0)).map((i) => i.name),
          ["inv-a"],
        );
        // Two acceptances at once: exactly one wins.
        const both = await Promise.all([
          store.users.acceptInvite(a.token, "inv-a-password-1", t0 + 1),
          store.users.acceptInvite(a.token, "inv-a-password-2", t0 + 1),
        ]);
        assert.deepEqual(both.map((r) => r.ok).sort(), [false, true]);
        assert.equal((await store.users.byName("inv-a"))?.role, "member");
        assert.equal((await store.users.invites.pending(t0 + 2)).length, 0);
        // Expired: at 24 h it opens nothing.
        const b = await store.users.invite("inv-b", "admin", null, t0);
        assert.ok(await store.users.invites.peek(b.token, t0 + INVITE_MS - 1));
        assert.equal(
          (await store.users.acceptInvite(b.token, "inv-b-password-1", t0 + INVITE_MS)).ok,
          false,
        );
        // Cancelled.
        const c = await store.users.invite("inv-c", "member", null, t0);
        assert.equal(await store.users.invites.cancel(c.invite.id, t0 + 5), true);
        assert.equal(await store.users.invites.cancel(c.invite.id, t0 + 6), false);
        assert.equal(
          (await store.users.acceptInvite(c.token, "inv-c-password-1", t0 + 7)).ok,
          false,
        );
        // A name taken since the invite: refused, the link left as it was.
        const d = await store.users.invite("inv-d", "member", null, t0);
        await store.users.create("inv-d", "member", "inv-d-own-password", t0 + 1);
        assert.equal(
          (await store.users.acceptInvite(d.token, "inv-d-password-1", t0 + 2)).ok,
          false,
        );
        assert.ok(await store.users.invites.peek(d.token, t0 + 3));
        // A reset link sets the password and ends the user's sessions.
        const before = await store.users.signIn("inv-d", "inv-d-own-password", t0 + 4);
        assert.ok(before.ok);
        const r = (await store.users.resetLink((await store.users.byName("inv-d"))!.id, null, t0))!;
        const reset = await store.users.acceptInvite(r.token, "inv-d-new-password", t0 + 5);
        assert.ok(reset.ok);
        assert.equal(await store.users.session(before.session, t0 + 6), null);
        assert.ok((await store.users.signIn("inv-d", "inv-d-new-password", t0 + 7)).ok);
        for (const bad of [
          ["", "member"],
          ["inv-a", "member"],
          ["inv-e", "owner"],
        ] as const)
          await assert.rejects(store.users.invite(bad[0], bad[1] as "member", null, t0));
      });

      test("STORE-INVITE-MAKER: a link works only while its maker is an admin: once they are made a member, or removed, their open invites and reset links open nothing and are not listed; the CLI's stay", async () => {
        const t0 = Date.now();
        const boss = await store.users.create("mk-boss", "admin", "mk-boss-password", t0);
        const target = await store.users.create("mk-target", "member", "mk-target-password", t0);
        const join = await store.users.invite("mk-join", "member", boss.id, t0);
        const reset = (await store.users.resetLink(target.id, boss.id, t0))!;
        const cli = await store.users.invite("mk-cli", "member", null, t0);
        assert.ok(await store.users.invites.peek(join.token, t0 + 1));
        const listed = async (at: number) =>
          (await store.users.invites.pending(at))
            .map((i) => i.name)
            .filter((n) => n.startsWith("mk-"))
            .sort();
        assert.deepEqual(await listed(t0 + 2), ["mk-cli", "mk-join", "mk-target"]);

        await store.users.setRole("mk-boss", "member", t0 + 3);
        assert.equal(await store.users.invites.peek(join.token, t0 + 3), undefined);
        assert.equal(await store.users.invites.peek(reset.token, t0 + 3), undefined);
        assert.deepEqual(await listed(t0 + 3), ["mk-cli"]);
        assert.equal(
          (await store.users.acceptInvite(join.token, "mk-join-password", t0 + 4)).ok,
          false,
        );
        assert.equal(await store.users.byName("mk-join"), undefined);
        assert.equal(
          (await store.users.acceptInvite(reset.token, "mk-target-new-password", t0 + 4)).ok,
          false,
        );
        assert.ok((await store.users.signIn("mk-target", "mk-target-password", t0 + 5)).ok);

        // An admin again, their old links stay dead (made a member cancelled them).
        await store.users.setRole("mk-boss", "admin", t0 + 5);
        assert.equal(await store.users.invites.peek(join.token, t0 + 5), undefined);
        assert.deepEqual(await listed(t0 + 5), ["mk-cli"]);
        // Removed: their links open nothing either.
        const later = await store.users.invite("mk-later", "member", boss.id, t0);
        await store.users.remove("mk-boss", t0 + 6);
        assert.equal(await store.users.invites.peek(later.token, t0 + 7), undefined);
        assert.equal(
          (await store.users.acceptInvite(later.token, "mk-later-password", t0 + 7)).ok,
          false,
        );

        // The CLI's link needs no console user.
        assert.ok((await store.users.acceptInvite(cli.token, "mk-cli-password", t0 + 8)).ok);
      });

      test("STORE-INVITE-MAKER-RACE: a link is not stored for a maker who is no longer an admin (a request that passed its check just before the demotion), so it cannot open once they are an admin again", async () => {
        const t0 = Date.now();
        const alice = await store.users.create("mr-alice", "admin", "mr-alice-password", t0);
        const target = await store.users.create("mr-target", "member", "mr-target-password", t0);
        await store.users.setRole("mr-alice", "member", t0 + 1);
        await assert.rejects(
          store.users.invite("mr-eve", "admin", alice.id, t0 + 2),
          InviteMakerNotAdmin,
        );
        await assert.rejects(store.users.resetLink(target.id, alice.id, t0 + 2), /not an admin/);
        const stored = await store.sql.all("SELECT id FROM invites WHERE created_by = ?", [
          alice.id,
        ]);
        assert.deepEqual(stored, [], "nothing stored");
        await store.users.setRole("mr-alice", "admin", t0 + 3);
        assert.equal(
          (await store.users.invites.pending(t0 + 3)).filter((i) => i.name.startsWith("mr-"))
            .length,
          0,
        );
        assert.equal(await store.users.byName("mr-eve"), undefined);
        // An admin again, they make links as before; a removed maker makes none; the CLI needs none.
        const ok = await store.users.invite("mr-eve", "member", alice.id, t0 + 4);
        assert.ok(await store.users.invites.peek(ok.token, t0 + 4));
        await store.users.remove("mr-alice", t0 + 5);
        await assert.rejects(
          store.users.invite("mr-fay", "member", alice.id, t0 + 6),
          InviteMakerNotAdmin,
        );
        assert.ok(await store.users.invite("mr-fay", "member", null, t0 + 6));
      });

      // Postgres only (SQLite writes one at a time): not registered on SQLite rather than skipped,
      // as a CI run skips nothing.
      if (kind === "postgres")
        test("STORE-INVITE-MAKER-RACE on Postgres: a link made while the maker's demotion is in flight waits for it and stores nothing", async () => {
          const t0 = Date.now();
          const bob = await store.users.create("mw-bob", "admin", "mw-bob-password", t0);
          let made: Promise<unknown> | undefined;
          // setRole's statements, held open while the invite is sent from another connection.
          await store.sql.transaction(async (tx) => {
            await tx.run("UPDATE users SET role = 'member' WHERE id = ?", [bob.id]);
            await tx.run(
              `UPDATE invites SET expires_at = CAST(? AS BIGINT)
             WHERE created_by = ? AND used_at IS NULL AND expires_at > CAST(? AS BIGINT)`,
              [t0 + 1, bob.id, t0 + 1],
            );
            made = store.users.invite("mw-eve", "admin", bob.id, t0 + 2);
            made.catch(() => {});
            let settled = false;
            void made.then(
              () => (settled = true),
              () => (settled = true),
            );
            // Until the insert waits on the maker's row (or, unfixed, is done).
            for (;;) {
              const waiting = await store.sql.get<{ n: string }>(
                `SELECT count(*) AS n FROM pg_stat_activity
               WHERE datname = current_database() AND wait_event_type = 'Lock'
                 AND query LIKE 'INSERT INTO invites%'`,
              );
              if (settled || Number(waiting!.n) > 0) break;
              await new Promise((r) => setTimeout(r, 20));
            }
          });
          await assert.rejects(made!, InviteMakerNotAdmin);
          await store.users.setRole("mw-bob", "admin", t0 + 3);
          assert.deepEqual(
            (await store.users.invites.pending(t0 + 3)).filter((i) => i.name === "mw-eve"),
            [],
          );
        });

      test("STORE-USERS: passwords only as scrypt hashes; wrong ones lock the account, the right one then too; sessions only as digests and expire", async () => {
        const t0 = 1_000_000;
        const u = await store.users.create("carol", "member", "a-long-password-1", t0);
        await assert.rejects(store.users.create("carol", "admin", "a-long-password-2"), /exists/);
        await assert.rejects(store.users.create("Bad Name", "member", "a-long-password-1"));
        await assert.rejects(store.users.create("dave", "root" as never, "a-long-password-1"));
        await assert.rejects(store.users.create("dave", "member", "short"));
        const raw = JSON.stringify(await store.sql.all("SELECT * FROM users"));
        assert.ok(!raw.includes("a-long-password-1") && raw.includes("scrypt$"));
        assert.ok(
          await checkPassword("a-long-password-1", await hashPassword("a-long-password-1")),
        );
        assert.equal((await store.users.signIn("nobody", "a-long-password-1", t0)).ok, false);
        for (let i = 1; i < LOCKOUT.failures; i++)
          assert.deepEqual(await store.users.signIn("carol", "wrong", t0 + i), {
            ok: false,
            reason: "wrong",
          });
        const locked = await store.users.signIn("carol", "wrong", t0 + 10);
        assert.equal(locked.ok ? "" : locked.reason, "locked");
        const refused = await store.users.signIn("carol", "a-long-password-1", t0 + 20);
        assert.equal(
          refused.ok ? "" : refused.reason,
          "locked",
          "the right password, while locked",
        );
        const later = await store.users.signIn(
          "carol",
          "a-long-password-1",
          t0 + 10 + LOCKOUT.lockMs,
        );
        assert.ok(later.ok, "the lock ends");
        const sessions = JSON.stringify(await store.sql.all("SELECT * FROM console_sessions"));
        assert.ok(!sessions.includes(later.session), "the cookie is kept only as its digest");
        const now = t0 + LOCKOUT.lockMs + 20;
        assert.deepEqual((await store.users.session(later.session, now))?.user, {
          id: u.id,
          name: "carol",
          role: "member",
        });
        assert.equal(await store.users.session(later.session, now + SESSION_MS), null, "expired");
        await store.users.signOut(later.session);
        assert.equal(await store.users.session(later.session, now), null, "signed out");
      });

      test("STORE-OIDC: one user and one active key per subject; a subject's sign-in opens a session, a password-less user's form never does", async () => {
        const u = await store.users.create("oidc-erin", "member", "", Date.now(), "idp|erin");
        await assert.rejects(
          store.users.create("oidc-erin2", "member", "", Date.now(), "idp|erin"),
          /linked to OIDC subject/,
        );
        await assert.rejects(store.users.create("nosub", "member", ""), /password is/);
        await assert.rejects(
          store.users.create("badsub", "member", "", Date.now(), "has space"),
          /printable ASCII/,
        );
        assert.deepEqual(await store.users.bySubject("idp|erin"), {
          id: u.id,
          name: "oidc-erin",
          role: "member",
        });
        assert.deepEqual((await store.users.signIn("oidc-erin", "")).ok, false);
        const signed = await store.users.signInSubject("idp|erin");
        assert.ok(signed.ok && (await store.users.session(signed.session))?.user.id === u.id);
        assert.equal((await store.users.signInSubject("idp|nobody")).ok, false);
        const k = await store.keys.create("oidc-key", null, Date.now(), u.id, "idp|erin");
        assert.equal((await store.keys.bySubject("idp|erin"))?.id, k.id);
        await assert.rejects(
          store.keys.create("oidc-key2", null, Date.now(), u.id, "idp|erin"),
          /bound to OIDC subject/,
        );
        await store.keys.revoke(k.id);
        assert.equal(await store.keys.bySubject("idp|erin"), null, "a revoked key is no one's");
        // The partial unique index lets a new key take the subject of a revoked one.
        const k2 = await store.keys.create("oidc-key3", null, Date.now(), u.id, "idp|erin");
        assert.equal((await store.keys.bySubject("idp|erin"))?.id, k2.id);
      });

      test("STORE-OAUTH: codes and refresh tokens are spent once (reuse revokes the grant); tokens only as digests; access dies with its grant", async () => {
        const key = await store.keys.create("oauth-key", null, Date.now(), "u_owner");
        assert.deepEqual(
          (await store.keys.list("u_owner")).map((k) => k.id),
          [key.id],
          "a user's own keys",
        );
        const client = await store.oauth.register("c", ["https://c.example/cb"]);
        const r = await store.oauth.createRequest({
          clientId: client.clientId,
          clientName: "c",
          redirectUri: "https://c.example/cb",
          state: "s",
          codeChallenge: "x".repeat(43),
          resource: "https://sr.example/mcp",
          scope: "scratchrun:exec",
        });
        const d = await store.oauth.decide(r.id, { approve: { userId: "u_owner", keyId: key.id } });
        assert.ok(d?.code);
        assert.equal(await store.oauth.decide(r.id, { deny: true }), null, "decided once");
        const first = await store.oauth.redeemCode(d.code);
        assert.ok(first.ok);
        const pair = await store.oauth.issue(d.request.grantId!);
        assert.deepEqual(await store.oauth.verifyAccess(pair.access_token), {
          keyId: key.id,
          resource: "https://sr.example/mcp",
          grantId: d.request.grantId,
        });
        const raw =
          JSON.stringify(await store.sql.all("SELECT * FROM oauth_tokens")) +
          JSON.stringify(await store.sql.all("SELECT * FROM oauth_requests"));
        for (const secret of [pair.access_token, pair.refresh_token, d.code])
          assert.ok(!raw.includes(secret), "stored only as a digest");
        const spent = await store.oauth.refresh(pair.refresh_token);
        assert.ok(spent.ok);
        const next = await store.oauth.issue(d.request.grantId!);
        assert.deepEqual(await store.oauth.refresh(pair.refresh_token), {
          ok: false,
          reason: "reused",
        });
        assert.equal(
          await store.oauth.verifyAccess(next.access_token),
          null,
          "the grant is revoked",
        );
        assert.equal(
          (await store.oauth.grant(d.request.grantId!))?.revokedReason,
          "refresh token reused",
        );
        assert.deepEqual(await store.oauth.redeemCode(d.code), { ok: false, reason: "reused" });
        // Expiry: an access token past its time is no token.
        const r2 = await store.oauth.createRequest({ ...r, state: null });
        const d2 = await store.oauth.decide(r2.id, {
          approve: { userId: "u_owner", keyId: key.id },
        });
        const t = Date.now();
        const p2 = await store.oauth.issue(d2!.request.grantId!, t);
        assert.ok(await store.oauth.verifyAccess(p2.access_token, t + OAUTH_TTL.accessMs - 1));
        assert.equal(await store.oauth.verifyAccess(p2.access_token, t + OAUTH_TTL.accessMs), null);
        const late = await store.oauth.redeemCode(d2!.code!, Date.now() + OAUTH_TTL.codeMs + 1);
        assert.deepEqual(late, { ok: false, reason: "expired" });
        // Purged once nothing can use them: expired tokens and long-expired requests.
        await store.oauth.purge(Date.now() + OAUTH_TTL.refreshMs + 2 * 60 * 60_000);
        const left = await store.sql.all("SELECT * FROM oauth_tokens");
        const requests = await store.sql.all("SELECT * FROM oauth_requests");
        assert.deepEqual([left.length, requests.length], [0, 0]);
        assert.ok(
          await store.oauth.grant(d.request.grantId!),
          "grants stay (the console lists them)",
        );
      });

      test("a run's record: begin, started on a worker, finished; a late failed does not undo it", async () => {
        const id = await store.runs.begin("k1", "rest", REQ, 1000, { replicaId: "r1" });
        await store.runs.started(id, 1001, "10.0.0.7:8788");
        await store.runs.finished(id, OUTCOME, 1050);
        await store.runs.failed(id, "WORKER_LOST", 1060);
        await store.runs.started(id, 1070, "other");
        const row = (await store.runs.get(id))!;
        assert.equal(row.status, "finished");
        assert.equal(row.error_code, null);
        assert.equal(row.worker, "10.0.0.7:8788");
        assert.equal(row.started_at, 1001);
        assert.equal(row.finished_at, 1050);
        assert.equal(row.replica_id, "r1");
        assert.equal(row.exit_reason, "ok");
        assert.equal(row.stdout_bytes, 3);
        assert.ok(!JSON.stringify(row).includes("secret-value"), "no env value in the record");
        // Idempotent: the same writes again leave the same row.
        await store.runs.finished(id, OUTCOME, 1050);
        assert.deepEqual(await store.runs.get(id), row);
      });

      test("a short call's start is written with its end, never over a start already written", async () => {
        // The service writes `started` only for calls still running after STARTED_RECORD_DELAY_MS.
        const short = await store.runs.begin("k1", "rest", REQ, 2000, { replicaId: "r1" });
        await store.runs.finished(short, OUTCOME, 2040, { at: 2001, worker: "10.0.0.7:8788" });
        const s = (await store.runs.get(short))!;
        assert.deepEqual(
          [s.status, s.started_at, s.worker, s.finished_at],
          ["finished", 2001, "10.0.0.7:8788", 2040],
        );
        const lost = await store.runs.begin("k1", "rest", REQ, 3000, { replicaId: "r1" });
        await store.runs.failed(lost, "WORKER_LOST", 3100, { at: 3002, worker: "10.0.0.8:8788" });
        const l = (await store.runs.get(lost))!;
        assert.deepEqual(
          [l.status, l.error_code, l.started_at, l.worker],
          ["failed", "WORKER_LOST", 3002, "10.0.0.8:8788"],
        );
        const long = await store.runs.begin("k1", "rest", REQ, 4000, { replicaId: "r1" });
        await store.runs.started(long, 4001, "10.0.0.7:8788");
        await store.runs.finished(long, OUTCOME, 4900, { at: 4500, worker: "other" });
        const g = (await store.runs.get(long))!;
        assert.deepEqual([g.started_at, g.worker], [4001, "10.0.0.7:8788"]);
      });

      test("a session's record: its calls' runs name it, it closes once with its reason; only the session_id's digest is stored", async () => {
        const sessionId = "S".repeat(22);
        const rec = await store.sessions.begin(
          {
            sessionId,
            keyId: "k3",
            transport: "rest",
            runtime: "python3.12",
            memoryMb: 512,
            network: "none",
            isolation: "namespace",
          },
          6_000,
        );
        const SREQ = { ...REQ, session_id: sessionId };
        const a = await store.runs.begin("k3", "rest", SREQ, 6_001, { sessionRecord: rec });
        await store.runs.finished(a, OUTCOME, 6_002);
        const admitted = store.sql.dialect === "postgres";
        // On Postgres a replica's run is inserted by scratchrun_admit: it names the session too.
        const b = admitted
          ? await admitShared(
              store.sql,
              {
                keyId: "k3",
                transport: "mcp",
                req: SREQ,
                replicaId: "r9",
                limits: { maxConcurrent: 4, ratePerMinute: 60, burst: 10 },
                sessionRecord: rec,
              },
              6_003,
            ).then((r) => (r.ok ? r.runId : assert.fail("admitted")))
          : await store.runs.begin("k3", "mcp", SREQ, 6_003, { sessionRecord: rec });
        assert.equal((await store.runs.get(a))!.session_record, rec);
        assert.equal((await store.runs.get(b))!.session_record, rec);
        await store.runs.failed(b, "SESSION_LOST", 6_004);
        const found = (await store.sessions.find(sessionId))!;
        assert.deepEqual(
          [found.id, found.key_id, found.runtime, found.memory_mb, found.network, found.started_at],
          [rec, "k3", "python3.12", 512, "none", 6_000],
        );
        assert.equal(found.ended_at, null, "open");
        assert.equal(await store.sessions.find("T".repeat(22)), undefined);
        const raw = JSON.stringify(await store.sql.all("SELECT * FROM sessions"));
        assert.ok(!raw.includes(sessionId), "the bearer session_id itself is never stored");
        assert.ok(!JSON.stringify(await store.runs.all()).includes(sessionId));
        assert.equal(await store.sessions.openCount("k3"), 1);
        assert.equal(await store.sessions.endById(sessionId, "idle", 2, 6_100), true);
        assert.equal(
          await store.sessions.end(rec, "shutdown", 5, 6_200),
          false,
          "a second close changes nothing",
        );
        const ended = (await store.sessions.get(rec))!;
        assert.deepEqual([ended.ended_at, ended.end_reason, ended.calls], [6_100, "idle", 2]);
        assert.equal(await store.sessions.openCount("k3"), 0);
      });

      test("records a killed process left open are closed as lost, their calls counted from their runs; a lost worker's sessions too, not its successor's", async () => {
        const begin = (sessionId: string, worker?: string, workerId?: string) =>
          store.sessions.begin(
            {
              sessionId,
              keyId: "k4",
              transport: "mcp",
              runtime: "bash",
              memoryMb: 256,
              network: "none",
              isolation: "namespace",
              ...(worker ? { worker, workerId: workerId ?? null, replicaId: "r1" } : {}),
            },
            7_000,
          );
        const onOld = await begin("w-old-session-00000001", "10.0.0.7:8788", "aaaa");
        const onNew = await begin("w-new-session-00000001", "10.0.0.7:8788", "bbbb");
        const elsewhere = await begin("w-else-session-0000001", "10.0.0.8:8788", "cccc");
        assert.equal(await store.sessions.markWorkerLost("10.0.0.7:8788", "bbbb", 7_100), 1);
        assert.equal((await store.sessions.get(onOld))!.end_reason, "lost");
        assert.equal((await store.sessions.get(onNew))!.ended_at, null, "the live process's stays");
        assert.equal(await store.sessions.markWorkerLost("10.0.0.8:8788", null, 7_150), 1);
        assert.equal((await store.sessions.get(elsewhere))!.end_reason, "lost");
        const local = await begin("local-session-000000001");
        const run = await store.runs.begin("k4", "mcp", REQ, 7_001, { sessionRecord: local });
        await store.runs.finished(run, OUTCOME, 7_002);
        await store.runs.begin("k4", "mcp", REQ, 7_003, { sessionRecord: local });
        // A server's start: every open record is its dead predecessor's.
        assert.equal(await store.sessions.markLost(7_200), 2);
        const l = (await store.sessions.get(local))!;
        assert.deepEqual([l.ended_at, l.end_reason, l.calls], [7_200, "lost", 1]);
        assert.equal((await store.sessions.get(onNew))!.end_reason, "lost");
        assert.equal(await store.sessions.markLost(7_300), 0);
      });

      test("stale records: an earlier process's at a worker's address, and any past the longest lifetime, are closed as lost; the live process's and unknown ones stay", async () => {
        const begin = (sessionId: string, at: number, worker: string, workerId: string | null) =>
          store.sessions.begin(
            {
              sessionId,
              keyId: "k5",
              transport: "rest",
              runtime: "bash",
              memoryMb: 256,
              network: "none",
              isolation: "namespace",
              worker,
              workerId,
              replicaId: "r1",
            },
            at,
          );
        const earlier = await begin("s-earlier-0000000000001", 8_000, "10.0.0.9:8788", "old1");
        const live = await begin("s-live-000000000000001", 8_000, "10.0.0.9:8788", "new1");
        const unknown = await begin("s-unknown-00000000000001", 8_000, "10.0.0.9:8788", null);
        const other = await begin("s-other-0000000000000001", 8_000, "10.0.0.10:8788", "old1");
        assert.equal(await store.sessions.markEarlierLivesLost("10.0.0.9:8788", "new1", 8_100), 1);
        const e = (await store.sessions.get(earlier))!;
        assert.deepEqual([e.ended_at, e.end_reason], [8_100, "lost"]);
        for (const id of [live, unknown, other])
          assert.equal((await store.sessions.get(id))!.ended_at, null, id);
        assert.equal(await store.sessions.openCount("k5"), 3);
        // Started before the cutoff: no session lives that long.
        const old = await begin("s-old-000000000000000001", 1_000, "10.0.0.11:8788", "x");
        assert.equal(await store.sessions.markOutlived(8_000, 8_200), 1);
        assert.equal((await store.sessions.get(old))!.end_reason, "lost");
        assert.equal(await store.sessions.openCount("k5"), 3);
      });

      test("leases: runs of a replica whose lease expired become INTERRUPTED, a live one's stay", async () => {
        await store.leases.renew("live", 10_000, 5_000);
        await store.leases.renew("dead", 1_000, 5_000);
        const mine = await store.runs.begin("k2", "rest", REQ, 5_001, { replicaId: "live" });
        const theirs = await store.runs.begin("k2", "mcp", REQ, 5_001, { replicaId: "dead" });
        const done = await store.runs.begin("k2", "rest", REQ, 5_001, { replicaId: "dead" });
        await store.runs.finished(done, OUTCOME, 5_010);
        assert.equal(await store.leases.sweep(5_500), 0, "nothing has expired yet");
        assert.equal(await store.leases.sweep(7_000), 1);
        assert.deepEqual(await store.leases.live(7_000), ["live"]);
        assert.equal((await store.runs.get(mine))!.status, "queued");
        const t = (await store.runs.get(theirs))!;
        assert.deepEqual([t.status, t.error_code], ["failed", "INTERRUPTED"]);
        assert.equal((await store.runs.get(done))!.status, "finished", "a finished run is kept");
        await store.leases.release("live");
        assert.equal(await store.leases.sweep(7_001), 1, "a released lease frees its runs too");
      });
    },
  );
}

describe("shared quota on Postgres", { skip: skipOutsideCi(PG_MISSING) }, () => {
  test("concurrency and rate per key hold across replicas admitting at once", async () => {
    const url = await pgServer!.createDatabase(`quota_${process.pid}`);
    const a = new PostgresDriver({ url, max: 5 });
    const b = new PostgresDriver({ url, max: 5 });
    cleanups.push(
      () => a.close(),
      () => b.close(),
    );
    await Promise.all([migratePostgres(a), migratePostgres(b)]);
    const store = storeOn(a, 0);
    const key = await store.keys.create("shared");
    const now = Date.now();
    await store.leases.renew("ra", 60_000, now);
    await store.leases.renew("rb", 60_000, now);
    const limits = { maxConcurrent: 3, ratePerMinute: 60, burst: 100 };
    const admit = (sql: SqlDriver, replicaId: string) =>
      admitShared(sql, { keyId: key.id, transport: "rest", req: REQ, replicaId, limits }, now);
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => (i % 2 ? admit(a, "ra") : admit(b, "rb"))),
    );
    const ok = results.filter((r) => r.ok);
    assert.equal(ok.length, 3, "exactly maxConcurrent admitted across both replicas");
    const used = (await store.keys.list()).find((k) => k.id === key.id)!;
    assert.equal(used.lastUsedAt, now, "admission records the key's last use");
    for (const r of results.filter((x) => !x.ok))
      assert.deepEqual(r, { ok: false, reason: "concurrency", retryAfterS: 1 });
    // A finished call frees its slot; a dead replica's calls stop counting when its lease ends.
    const first = ok[0] as { runId: string };
    await store.runs.finished(first.runId, OUTCOME, now + 1);
    assert.equal((await admit(a, "ra")).ok, true);
    await store.leases.renew("rb", 1, now - 10);
    const afterExpiry = await admit(a, "ra");
    const rbHeld = (await store.runs.all()).filter(
      (r) => r.replica_id === "rb" && r.status === "queued",
    ).length;
    assert.equal(afterExpiry.ok, rbHeld > 0, "rb's calls no longer count once its lease expired");

    // Rate: a burst of 2, one token a minute, shared by both replicas.
    const k2 = await store.keys.create("rated");
    const rated = { maxConcurrent: 100, ratePerMinute: 1, burst: 2 };
    const admitRated = (sql: SqlDriver) =>
      admitShared(
        sql,
        { keyId: k2.id, transport: "rest", req: REQ, replicaId: "ra", limits: rated },
        now,
      );
    const r = await Promise.all([admitRated(a), admitRated(b), admitRated(a), admitRated(b)]);
    assert.equal(r.filter((x) => x.ok).length, 2);
    const refused = r.find((x) => !x.ok) as { reason: string; retryAfterS: number };
    assert.equal(refused.reason, "rate");
    assert.ok(refused.retryAfterS >= 1 && refused.retryAfterS <= 60);
  });

  test("the database's admission rule is decideQuota's (property: same verdicts over random call sequences)", async () => {
    const url = await pgServer!.createDatabase(`parity_${process.pid}`);
    const sql = new PostgresDriver({ url });
    cleanups.push(() => sql.close());
    await migratePostgres(sql);
    const store = storeOn(sql, 0);
    await store.leases.renew("rp", 10 ** 12, 0);
    const step = fc.oneof(
      fc.record({ admit: fc.constant(true), dt: fc.integer({ min: 0, max: 5000 }) }),
      fc.record({ admit: fc.constant(false), dt: fc.constant(0) }),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          maxConcurrent: fc.integer({ min: 1, max: 4 }),
          ratePerMinute: fc.integer({ min: 1, max: 600 }),
          burst: fc.integer({ min: 1, max: 4 }),
        }),
        fc.array(step, { minLength: 1, maxLength: 12 }),
        async (limits, steps) => {
          const key = await store.keys.create("parity");
          let now = 1_000_000;
          let bucket: { tokens: number; at: number } | undefined;
          const open: string[] = [];
          for (const s of steps) {
            now += s.dt;
            if (!s.admit) {
              const id = open.shift();
              if (id) await store.runs.finished(id, OUTCOME, now);
              continue;
            }
            const model = decideQuota(limits, open.length, bucket, now);
            if (model.bucket) bucket = model.bucket;
            const got = await admitShared(
              sql,
              { keyId: key.id, transport: "rest", req: REQ, replicaId: "rp", limits },
              now,
            );
            if (got.ok) open.push(got.runId);
            const expected = model.ok
              ? { ok: true }
              : { ok: false, reason: model.reason, retryAfterS: model.retryAfterS };
            const actual = got.ok ? { ok: true } : got;
            assert.deepEqual(actual, expected, JSON.stringify({ limits, steps }));
          }
        },
      ),
      { numRuns: 25 },
    );
  });

  test("an idempotent write waits out a restart; a read fails NOT_READY at once", async () => {
    const url = await pgServer!.createDatabase(`restart_${process.pid}`);
    const sql = new PostgresDriver({ url, connectTimeoutMs: 500 });
    cleanups.push(() => sql.close());
    await migratePostgres(sql);
    const store = storeOn(sql, 20_000);
    const id = await store.runs.begin("k", "rest", REQ, 1, {});
    await pgServer!.kill();
    await assert.rejects(store.runs.get(id), (e: Error & { code?: string }) => {
      assert.equal(e.code, "NOT_READY");
      return true;
    });
    const write = store.runs.finished(id, OUTCOME, 2);
    await new Promise((r) => setTimeout(r, 800));
    pgServer = await relaunch(pgServer!);
    await write;
    assert.equal((await store.runs.get(id))!.status, "finished");
  });

  test("transient errors are told apart from the caller's mistakes", () => {
    const err = (message: string, code?: string) => Object.assign(new Error(message), { code });
    for (const e of [
      err("connect ECONNREFUSED 127.0.0.1:5432", "ECONNREFUSED"),
      err("terminating connection due to administrator command", "57P01"),
      err("the database system is starting up", "57P03"),
      err("cannot execute UPDATE in a read-only transaction", "25006"),
      err("Connection terminated unexpectedly"),
      err("timeout exceeded when trying to connect"),
      err("connection failure", "08006"),
    ])
      assert.equal(isTransientDbError(e), true, e.message);
    for (const e of [
      err('relation "nope" does not exist', "42P01"),
      err("duplicate key value violates unique constraint", "23505"),
      err("syntax error", "42601"),
      "not an error",
    ])
      assert.equal(isTransientDbError(e), false, String(e));
  });
});
