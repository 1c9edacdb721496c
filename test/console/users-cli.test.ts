/**
 * `scratchrun users role|reset|remove` (issue 55) on a real SQLite store, as an operator runs them:
 * a role change holds for the user's open console session at once; a reset signs them out
 * everywhere and only the new password signs in; a removal ends their sessions and revokes the
 * keys they own. Each is in the console's audit log as "cli", never with the password. Bad input
 * is refused with nothing changed.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { runUsers } from "../../src/cli/users.js";
import { openStore, type Store } from "../../src/store/open.js";

describe("scratchrun users role, reset and remove", () => {
  let home: string;
  let env: NodeJS.ProcessEnv;
  let store: Store;

  before(async () => {
    home = mkdtempSync(join(tmpdir(), "sr-users-cli-"));
    env = { SCRATCHRUN_HOME: home };
    store = await openStore(env);
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
});
