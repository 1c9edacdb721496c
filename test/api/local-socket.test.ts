// The service's local socket (decision 0018), in process with a real namespace engine: the same
// REST and /mcp rows as TCP, the caller the kernel-proven uid as the principal `uid:N` in the key
// store, never anything the request carries. Real users made with useradd send raw HTTP over
// the socket: a bearer key, forwarded-user headers or another user's session id change nothing.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { ensureServiceGroup } from "../../src/cli/service-state.js";
import { startService, type ServiceHarness } from "./harness.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import { REPO_ROOT } from "../helpers/mcp-client.js";
import { makeUser, requestAs, type TestUser } from "../helpers/users.js";

let h: ServiceHarness;
let base: HostSnapshot;
let dir: string;
let socket: string;
let alice: TestUser;
let bob: TestUser;
let carol: TestUser;
/** A real API key of this service, which alice and bob both "present" over the socket. */
let rootKey: string;

const ECHO = { runtime: "bash", code: "echo hi-$(id -u)" };

before(async () => {
  base = snapshot();
  alice = makeUser("sock-a", ["scratchrun"]);
  bob = makeUser("sock-b", ["scratchrun"]);
  carol = makeUser("sock-c", ["scratchrun"]);
  dir = mkdtempSync("/run/sr-api-sock-");
  chmodSync(dir, 0o755);
  socket = join(dir, "s.sock");
  h = await startService(
    {},
    { socket: { path: socket, gid: ensureServiceGroup() } },
    {
      SCRATCHRUN_NETWORK: "none",
      SCRATCHRUN_POOL_SIZE: "bash=1",
    },
  );
  rootKey = (await h.keys.create("root-key")).key;
});

after(async () => {
  await h?.close();
  for (const u of [alice, bob, carol]) u?.remove();
  rmSync(dir, { recursive: true, force: true });
  await assertNoLeaks(base);
});

const principal = async (name: string) => (await h.keys.list()).filter((k) => k.name === name);

describe("the local socket's caller is the kernel's uid", () => {
  test("a member's call runs as uid:N: a principal made at its first call, its run recorded under it", async () => {
    const info = await requestAs(alice, socket, "GET", "/v1/info");
    assert.equal(info.status, 200, JSON.stringify(info));
    const r = await requestAs(alice, socket, "POST", "/v1/exec", ECHO);
    assert.equal(r.status, 200, JSON.stringify(r));
    assert.match((r.body as { stdout: string }).stdout, /^hi-\d+\n$/);
    const [row, ...more] = await principal(`uid:${alice.uid}`);
    assert.ok(row, "uid:N is in the key store");
    assert.deepEqual(more, [], "one principal per uid");
    assert.equal(row.policy, null, "the server's policy");
    assert.ok(row.lastUsedAt !== null);
    assert.ok(h.runs.all().some((run) => run.key_id === row.id && run.transport === "rest"));
  });

  test("headers change nothing: a bearer key, forwarded users, another uid claimed", async () => {
    const start = await requestAs(alice, socket, "POST", "/v1/sessions", { runtime: "bash" });
    assert.equal(start.status, 201, JSON.stringify(start));
    const id = (start.body as { session_id: string }).session_id;
    const pretend = {
      Authorization: `Bearer ${rootKey}`,
      "X-Forwarded-User": alice.name,
      "X-Remote-User": String(alice.uid),
      "X-ScratchRun-Uid": String(alice.uid),
      Forwarded: `for=${alice.name}`,
    };
    // bob, claiming to be alice (and holding a real key), cannot see or end alice's session.
    const cell = await requestAs(
      bob,
      socket,
      "POST",
      "/v1/exec",
      { ...ECHO, session_id: id },
      pretend,
    );
    assert.equal(cell.status, 404, JSON.stringify(cell));
    assert.equal((cell.body as { error: { code: string } }).error.code, "SESSION_NOT_FOUND");
    const end = await requestAs(bob, socket, "DELETE", `/v1/sessions/${id}`, undefined, pretend);
    assert.equal(end.status, 404, JSON.stringify(end));
    // bob's own calls are bob's: his principal, not the key's and not alice's.
    const mine = await requestAs(bob, socket, "POST", "/v1/exec", ECHO, pretend);
    assert.equal(mine.status, 200);
    const [bobRow] = await principal(`uid:${bob.uid}`);
    const [keyRow] = (await h.keys.list()).filter((k) => k.name === "root-key");
    assert.ok(bobRow && keyRow);
    assert.ok(
      h.runs.all().some((run) => run.key_id === bobRow.id),
      "bob's run is recorded as his",
    );
    assert.equal(keyRow.lastUsedAt, null, "the presented key was never used");
    // Nor can the real key's holder over TCP: the session is uid:alice's.
    const tcp = await fetch(`${h.api.url}/v1/sessions/${id}`, {
      method: "DELETE",
      headers: { Authorization: `Bearer ${rootKey}` },
    });
    assert.equal(tcp.status, 404);
    // alice's session is alive and hers.
    const hers = await requestAs(alice, socket, "POST", "/v1/exec", { ...ECHO, session_id: id });
    assert.equal(hers.status, 200, JSON.stringify(hers));
    const ended = await requestAs(alice, socket, "DELETE", `/v1/sessions/${id}`);
    assert.equal(ended.status, 200, JSON.stringify(ended));
  });

  test("TCP is unchanged: no bearer, no caller (the peer's uid is never asked there)", async () => {
    const r = await fetch(`${h.api.url}/v1/info`);
    assert.equal(r.status, 401);
  });

  test("the socket serves the service's rows, not a browser's: no console, no OAuth", async () => {
    assert.equal((await requestAs(alice, socket, "GET", "/healthz")).status, 200);
    assert.equal((await requestAs(alice, socket, "GET", "/openapi.json")).status, 200);
    for (const path of [
      "/console",
      "/console/signin",
      "/oauth/token",
      "/.well-known/oauth-authorization-server",
    ])
      assert.equal((await requestAs(alice, socket, "GET", path)).status, 404, path);
  });

  test("root's word holds: a revoked uid is refused with what to do, a policy given before its first call applies", async () => {
    assert.equal((await requestAs(bob, socket, "GET", "/v1/info")).status, 200);
    const cli = (args: string[]) =>
      spawnSync(
        process.execPath,
        [join(REPO_ROOT, "dist/src/bin/scratchrun.js"), "keys", ...args],
        {
          env: { ...process.env, SCRATCHRUN_HOME: h.home },
          encoding: "utf8",
        },
      );
    const revoked = cli(["revoke", `uid:${bob.uid}`]);
    assert.equal(revoked.status, 0, revoked.stderr);
    const refused = await requestAs(bob, socket, "POST", "/v1/exec", ECHO);
    assert.equal(refused.status, 403);
    assert.match(
      (refused.body as { error: { message: string } }).error.message,
      new RegExp(`uid:${bob.uid} is revoked`),
    );
    assert.equal((await requestAs(alice, socket, "GET", "/v1/info")).status, 200, "alice is not");
    // carol has never called: root gives her a policy first.
    const given = cli([
      "update",
      `uid:${carol.uid}`,
      "--runtimes",
      "bash",
      "--max-timeout-ms",
      "2000",
    ]);
    assert.equal(given.status, 0, given.stderr);
    const info = await requestAs(carol, socket, "GET", "/v1/info");
    const limits = (info.body as { limits: { runtimes: string[]; timeout_ms: { max: number } } })
      .limits;
    assert.deepEqual(limits.runtimes, ["bash"]);
    assert.equal(limits.timeout_ms.max, 2000);
    const py = await requestAs(carol, socket, "POST", "/v1/exec", {
      runtime: "python3.12",
      code: "1",
    });
    assert.equal(py.status, 400, JSON.stringify(py));
  });

  test("no key can be made, or named, as a local user's principal", async () => {
    await assert.rejects(h.keys.create(`uid:${alice.uid}`), /must be 1-64 letters/);
    await assert.rejects(h.keys.principal("uid:01"), /is not uid:N/);
    await assert.rejects(h.keys.principal("root-key"), /is not uid:N/);
  });
});
