/**
 * `scratchrun users role|reset|remove` (issue 55) on a real SQLite store, as an operator runs them:
 * a role change holds for the user's open console session at once; a reset signs them out
 * everywhere and only the new password signs in; a removal ends their sessions and revokes the
 * keys they own. Each is in the console's audit log as "cli", never with the password. Bad input
 * is refused with nothing changed. `users invite` prints a one-time link that makes its user;
 * `users create` and `keys create|update|revoke` are audited too, and `keys create --expires`
 * makes a key that expires.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { runKeys } from "../../src/cli/keys.js";
import { runUsers } from "../../src/cli/users.js";
import { openStore, type Store } from "../../src/store/open.js";
import { settingsFrom } from "../../src/schema/settings/values.js";

describe("scratchrun users role, reset and remove", () => {
  let home: string;
  let env: NodeJS.ProcessEnv;
  let store: Store;

  before(async () => {
    home = mkdtempSync(join(tmpdir(), "sr-users-cli-"));
    env = { SCRATCHRUN_HOME: home };
    store = await openStore(settingsFrom(env));
  });

  after(async () => {
    await store?.close();
    rmSync(home, { recursive: true, force: true });
  });

  const signIn = async (name: string, password: string) => {
    const r = await store.users.signIn(name, password);
    return r.ok ? r.session : null;
  };

  test("role: the user's open session holds to the new role at once", async () => {
    await store.users.create("mia", "member", "mia-first-password");
    const cookie = (await signIn("mia", "mia-first-password"))!;
    assert.equal((await store.users.session(cookie))?.user.role, "member");
    assert.equal(await runUsers(["role", "--name", "mia", "--role", "admin"], env), 0);
    assert.equal((await store.users.session(cookie))?.user.role, "admin");
    assert.equal(await runUsers(["role", "--name", "mia", "--role", "member"], env), 0);
    assert.equal((await store.users.session(cookie))?.user.role, "member");
  });

  test("reset: a new password from stdin; signed out everywhere; the old password no longer signs in", async () => {
    const cookie = (await signIn("mia", "mia-first-password"))!;
    const code = await runUsers(
      ["reset", "--name", "mia"],
      env,
      async () => "mia-second-password\n",
    );
    assert.equal(code, 0);
    assert.equal(await store.users.session(cookie), null);
    assert.equal(await signIn("mia", "mia-first-password"), null);
    assert.ok(await signIn("mia", "mia-second-password"));
  });

  test("remove: the user's sessions end and the keys they own are revoked; others' keys stay", async () => {
    const ada = await store.users.create("ada", "admin", "ada-the-admin-pw");
    const zoe = await store.users.create("zoe", "member", "zoe-the-member-pw");
    const zoeKey = await store.keys.create("zoe-laptop", null, Date.now(), zoe.id);
    const adaKey = await store.keys.create("ada-laptop", null, Date.now(), ada.id);
    const cookie = (await signIn("zoe", "zoe-the-member-pw"))!;
    assert.equal(await runUsers(["remove", "--name", "zoe"], env), 0);
    assert.equal(await store.users.byName("zoe"), undefined);
    assert.equal(await store.users.session(cookie), null);
    assert.equal(await store.keys.verify(zoeKey.key), null);
    assert.equal((await store.keys.verify(adaKey.key))?.id, adaKey.id);
    assert.equal(await signIn("zoe", "zoe-the-member-pw"), null);
  });

  test("each change is in the audit log as cli, with no password; bad input changes nothing", async () => {
    const entries = await store.users.audit.list(50);
    const actions = entries.map((e) => e.action).reverse();
    assert.deepEqual(actions, ["user.role", "user.role", "user.reset", "user.remove"]);
    assert.ok(entries.every((e) => e.actor === "cli"));
    const text = JSON.stringify(entries);
    assert.ok(!text.includes("mia-second-password") && !text.includes("mia-first-password"));
    assert.deepEqual(entries[0]!.detail, {
      name: "zoe",
      revoked_keys: [(await store.keys.list()).find((k) => k.name === "zoe-laptop")!.id],
    });
    // Refused: an unknown user (1), a bad role, a short password, a missing --role (2).
    assert.equal(await runUsers(["remove", "--name", "nobody"], env), 1);
    assert.equal(await runUsers(["role", "--name", "mia", "--role", "owner"], env), 2);
    assert.equal(await runUsers(["reset", "--name", "mia"], env, async () => "short\n"), 2);
    assert.equal(await runUsers(["role", "--name", "mia"], env), 2);
    assert.equal((await store.users.byName("mia"))?.role, "member");
    assert.ok(await signIn("mia", "mia-second-password"));
    assert.equal((await store.users.audit.list(50)).length, entries.length);
  });

  /** Runs `fn` with process.stdout's writes caught: what it printed there. */
  async function stdoutOf(fn: () => Promise<number>): Promise<{ code: number; out: string }> {
    let out = "";
    const write = process.stdout.write.bind(process.stdout);
    process.stdout.write = ((chunk: string | Uint8Array) => {
      out += String(chunk);
      return true;
    }) as typeof process.stdout.write;
    try {
      return { code: await fn(), out };
    } finally {
      process.stdout.write = write;
    }
  }

  test("invite: a one-time link on stdout (SCRATCHRUN_PUBLIC_URL in front) that makes the user once; create and keys create|update|revoke are audited as cli; keys create --expires", async () => {
    const withUrl = { ...env, SCRATCHRUN_PUBLIC_URL: "https://sr.example.com" };
    const invited = await stdoutOf(() =>
      runUsers(["invite", "--name", "neo", "--role", "admin"], withUrl),
    );
    assert.equal(invited.code, 0);
    const m = /^https:\/\/sr\.example\.com\/console\/invite\?token=(sri_[A-Za-z0-9_-]{43})\n$/.exec(
      invited.out,
    );
    assert.ok(m, invited.out);
    const joined = await store.users.acceptInvite(m[1]!, "neo-chosen-password");
    assert.equal(joined.ok && joined.user.role, "admin");
    assert.equal((await store.users.acceptInvite(m[1]!, "neo-other-password")).ok, false);
    // A name someone has, or a bad role: refused, no link.
    for (const args of [
      ["invite", "--name", "neo"],
      ["invite", "--name", "eve", "--role", "owner"],
    ]) {
      const r = await stdoutOf(() => runUsers(args, env));
      assert.deepEqual(r, { code: 2, out: "" }, args.join(" "));
    }

    assert.equal(
      await runUsers(["create", "--name", "ivy"], env, async () => "ivy-password-12\n"),
      0,
    );
    const made = await stdoutOf(() =>
      runKeys(
        ["create", "--name", "ivy-ci", "--owner", "ivy", "--expires", "30d", "--network", "none"],
        env,
      ),
    );
    assert.equal(made.code, 0);
    const key = (await store.keys.list()).find((k) => k.name === "ivy-ci")!;
    const days = (key.expiresAt! - Date.now()) / 86_400_000;
    assert.ok(days > 29.9 && days <= 30, String(days));
    assert.equal(await runKeys(["update", "ivy-ci", "--rate", "10"], env), 0);
    assert.equal(await runKeys(["revoke", "ivy-ci"], env), 0);
    // Bad expiries: refused before anything is made.
    for (const bad of ["yesterday", "0d", "2001-01-01", "30"])
      assert.equal(await runKeys(["create", "--name", "bad", "--expires", bad], env), 2, bad);
    assert.equal((await store.keys.list()).filter((k) => k.name === "bad").length, 0);

    const entries = (await store.users.audit.list(50)).filter((e) => e.at > 0).reverse();
    const mine = entries.slice(entries.findIndex((e) => e.action === "user.invite"));
    assert.deepEqual(
      mine.map((e) => e.action),
      ["user.invite", "user.create", "key.create", "key.policy", "key.revoke"],
    );
    assert.ok(mine.every((e) => e.actor === "cli"));
    assert.equal(mine[2]!.target, key.id);
    assert.equal(mine[2]!.detail?.expires_at, key.expiresAt);
    const text = JSON.stringify(mine);
    assert.ok(
      !text.includes(m[1]!) && !text.includes(made.out.trim()) && !text.includes("ivy-password"),
    );
  });
});
