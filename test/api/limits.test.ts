// The service's limits under concurrency and by role (issue 47), each test the attack on a real
// server (namespace backend, real SQLite, real sandboxes) through HTTP: guesses sent at once
// against the sign-in limits, a burst of password checks beside a bystander's call, clients that
// send no credential (or a wrong one) before one that has a valid key, a console member widening
// what an admin narrowed, a key starting many sessions at once, a key narrowed or revoked under
// its live session, a session start its client abandons. The server trusts 127.0.0.1 as a proxy,
// so each test names its own client addresses in X-Forwarded-For and has buckets of its own.
// What is held is counted (password checks run, at most at once, sessions started); the one
// duration asserted is the issue's: a bystander's call during the burst within 2x its idle latency
// (the median of three calls before it or after it, the larger), both printed.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { parseTrustedProxies } from "../../src/http/client-address.js";
import { LOCKOUT, UserStore } from "../../src/store/users.js";
import { makeUser } from "./oauth-browser.js";
import { startService, waitFor, type ServiceHarness } from "./harness.js";

const MCP_HEADERS = { Accept: "application/json, text/event-stream" };
const PING = { jsonrpc: "2.0", id: 1, method: "ping" };

describe("the service's limits under concurrency and by role (SEC-LIMIT-*)", () => {
  let h: ServiceHarness;
  let users: UserStore;
  let key: string;
  let keyId: string;

  before(async () => {
    h = await startService(
      {},
      { trustedProxies: parseTrustedProxies(["127.0.0.1", "::1"]) },
      { SCRATCHRUN_POOL_SIZE: "bash=1" },
    );
    users = new UserStore(h.db);
    const k = await h.keys.create("limits", null);
    key = k.key;
    keyId = k.id;
  });
  after(async () => {
    await h?.close();
  });

  /** A request from `addr` (X-Forwarded-For through the trusted proxy that is this test). */
  const from = (addr: string, path: string, body: unknown, bearer?: string, extra = {}) =>
    h.post(path, body, bearer, { "X-Forwarded-For": addr, ...extra });
  const signIn = (addr: string, name: string, password: string) =>
    from(addr, "/v1/console/session", { name, password });

  /** The password checks the server has run, the most at once, and refusals (its metrics). */
  const checks = async () => {
    const text = await h.api.metrics.render();
    const read = (state: string) =>
      Number(new RegExp(`scratchrun_password_checks\\{state="${state}"\\} (\\d+)`).exec(text)?.[1]);
    return {
      done: read("done"),
      most: read("most_at_once"),
      refused: read("refused"),
      running: read("running"),
      waiting: read("waiting"),
    };
  };
  const tally = (statuses: number[]) =>
    statuses.reduce<Record<number, number>>((t, s) => ({ ...t, [s]: (t[s] ?? 0) + 1 }), {});

  test("SEC-LIMIT-SIGNIN-RACE: 40 wrong passwords at once for one name, from 40 addresses: 5 checked, the name locked, the right password refused", async () => {
    const victim = await makeUser(users, "victim");
    const before = (await checks()).done;
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        signIn(`203.0.113.${i + 1}`, "victim", `wrong-${i}-xyz`),
      ),
    );
    const statuses = answers.map((r) => r.status);
    const checked = (await checks()).done - before;
    console.log(`# 40 at once: ${JSON.stringify(tally(statuses))}, ${checked} passwords checked`);
    assert.equal(checked, LOCKOUT.failures, "exactly the lockout's count of passwords was checked");
    assert.equal(statuses.filter((s) => s === 401).length, LOCKOUT.failures - 1);
    assert.equal(statuses.filter((s) => s === 429).length, 40 - (LOCKOUT.failures - 1));
    const right = await signIn("203.0.113.200", "victim", victim.password);
    assert.equal(right.status, 429, "the right password is refused while the name is locked");
    assert.match(await right.text(), /locked/);
    assert.equal((await checks()).done - before, LOCKOUT.failures, "and was not checked");
  });

  test("SEC-LIMIT-SIGNIN-ADDRESS: 120 sign-ins at once from one address: at most the address's 10 checked", async () => {
    const before = (await checks()).done;
    const started = Date.now();
    const statuses = (
      await Promise.all(
        Array.from({ length: 120 }, (_, i) =>
          signIn("198.51.100.7", `nobody${i}`, "wrong-guess-1"),
        ),
      )
    ).map((r) => r.status);
    const checked = (await checks()).done - before;
    // The bucket gives one more token per 6 s: a slow machine may have earned one meanwhile.
    const refilled = Math.floor((Date.now() - started) / 6000);
    console.log(
      `# 120 at once, one address: ${JSON.stringify(tally(statuses))}, ${checked} checked`,
    );
    assert.ok(checked <= 10 + refilled, `${checked} passwords checked`);
    assert.equal(statuses.filter((s) => s === 401).length, checked);
    assert.equal(statuses.filter((s) => s === 429).length, 120 - checked);
  });

  test("SEC-LIMIT-SIGNIN-NAMES: a name nobody has, and a user without a password, lock and answer as a user does", async () => {
    await users.create("oidc-only", "member", "", Date.now(), "subject-oidc-only");
    const before = (await checks()).done;
    for (const name of ["ghost", "oidc-only"]) {
      const answers: { status: number; text: string }[] = [];
      for (let i = 0; i < LOCKOUT.failures + 1; i++) {
        const r = await signIn(`192.0.2.${i + 10}`, name, "wrong-guess-123");
        answers.push({ status: r.status, text: await r.text() });
      }
      assert.deepEqual(
        answers.map((a) => a.status),
        [...Array<number>(LOCKOUT.failures - 1).fill(401), 429, 429],
        name,
      );
      assert.match(answers.at(-1)!.text, /This name is locked/);
    }
    // Each of the 2 x 5 attempts that were let through cost one password check, as a user's does.
    assert.equal((await checks()).done - before, 2 * LOCKOUT.failures);
  });

  test("SEC-LIMIT-SIGNIN-THREADS: 120 sign-ins at once from 120 addresses take turns (one check at a time); a bystander's call is served", async () => {
    const exec = async () => {
      const t = Date.now();
      const r = await h.post("/v1/exec", { runtime: "bash", code: "echo bystander" }, key);
      assert.equal(r.status, 200, await r.clone().text());
      return Date.now() - t;
    };
    const median3 = async () =>
      [await exec(), await exec(), await exec()].sort((a, b) => a - b)[1]!;
    await exec();
    // The bystander's idle latency is measured before the burst and again after it (the median
    // of three calls each time), and the larger is its idle: the host is shared (other test
    // files, builds), and its load may change while the burst runs. A burst measured beyond 2x is
    // sent once more (new names and addresses): without the bound every attempt waits for the
    // whole burst's checks (seconds), and a single slow moment should not fail the promise.
    const measured: string[] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const idleBefore = await median3();
      const before = await checks();
      const burst = Promise.all(
        Array.from({ length: 120 }, (_, i) =>
          signIn(
            `2001:db8:${(attempt * 0x100 + i).toString(16)}::1`,
            `stranger${attempt}-${i}`,
            "wrong-guess-2",
          ),
        ),
      );
      // The bystander's call once every sign-in of the burst is in (running, waiting or
      // refused): what it then competes with is the password checks (one at a time; without the
      // bound, all).
      await waitFor("the burst's sign-ins all in", async () => {
        const c = await checks();
        return c.running + c.waiting + c.done - before.done + c.refused - before.refused >= 120;
      });
      const during = await exec();
      const statuses = (await burst).map((r) => r.status);
      const after = await checks();
      const idle = Math.max(idleBefore, await median3());
      measured.push(`${during} ms (idle ${idle} ms)`);
      console.log(
        `# bystander /v1/exec: idle ${idle} ms (before ${idleBefore}), during 120 sign-ins ${during} ms (${(during / idle).toFixed(2)}x); ` +
          `sign-ins ${JSON.stringify(tally(statuses))}; checks: ${after.done - before.done} run, at most ${after.most} at once, ${after.refused - before.refused} refused`,
      );
      assert.equal(after.most, 1, `${after.most} password checks ran at once`);
      assert.equal(
        statuses.filter((s) => s === 401).length,
        after.done - before.done,
        "every check answered as a wrong password",
      );
      assert.equal(statuses.filter((s) => s === 429).length, after.refused - before.refused);
      if (during <= 2 * idle) return;
    }
    assert.fail(`the bystander's call took ${measured.join(", then ")}`);
  });

  test("SEC-LIMIT-NO-CREDENTIAL: 21 token-less requests, then a valid key from the same address is served", async () => {
    const addr = "198.51.100.21";
    for (let i = 0; i < 21; i++) {
      const r = await from(addr, "/mcp", PING, undefined, MCP_HEADERS);
      assert.equal(r.status, 401);
      assert.match(String(r.headers.get("www-authenticate")), /resource_metadata/);
    }
    const mcp = await from(addr, "/mcp", PING, key, MCP_HEADERS);
    assert.notEqual(mcp.status, 401);
    assert.notEqual(mcp.status, 429);
    const rest = await from(addr, "/v1/exec", { runtime: "bash", code: "echo served" }, key);
    assert.equal(rest.status, 200, await rest.clone().text());
  });

  test("SEC-LIMIT-WRONG-KEY: an address's wrong keys slow it down, and never refuse a valid key sent from it", async () => {
    const addr = "198.51.100.22";
    const wrong = `srk_000000000000_${"B".repeat(43)}`;
    const statuses: number[] = [];
    for (let i = 0; i < 25; i++)
      statuses.push(
        (
          await fetch(`${h.api.url}/v1/info`, {
            headers: { Authorization: `Bearer ${wrong}`, "X-Forwarded-For": addr },
          })
        ).status,
      );
    assert.ok(
      statuses.slice(0, 20).every((s) => s === 401),
      JSON.stringify(statuses),
    );
    assert.equal(statuses.at(-1), 429, "the address is told to wait");
    const info = await fetch(`${h.api.url}/v1/info`, {
      headers: { Authorization: `Bearer ${key}`, "X-Forwarded-For": addr },
    });
    assert.equal(info.status, 200, "a valid key from the same address");
    // Another address behind the same proxy has its own bucket.
    const other = await fetch(`${h.api.url}/v1/info`, {
      headers: { Authorization: `Bearer ${wrong}`, "X-Forwarded-For": "198.51.100.23" },
    });
    assert.equal(other.status, 401);
  });

  test("SEC-LIMIT-CEILING: a member's widening is refused, within their ceiling allowed; an admin's is allowed", async () => {
    const member = await makeUser(users, "member-m");
    const admin = await makeUser(users, "admin-a", "admin");
    const session = async (who: { name: string; password: string }, addr: string) => {
      const r = await signIn(addr, who.name, who.password);
      assert.equal(r.status, 200);
      const body = (await r.json()) as { csrf_token: string };
      const cookie = r.headers.get("set-cookie")!.split(";")[0]!;
      return (method: string, path: string, payload?: unknown) =>
        fetch(`${h.api.url}${path}`, {
          method,
          headers: {
            Cookie: cookie,
            "X-CSRF-Token": body.csrf_token,
            "Content-Type": "application/json",
          },
          ...(payload === undefined ? {} : { body: JSON.stringify(payload) }),
        });
    };
    const m = await session(member, "192.0.2.101");
    const a = await session(admin, "192.0.2.102");
    // The admin narrows the member: bash only, no network, 5 s, 2 calls at once.
    const ceiling = { runtimes: ["bash"], network: "none", max_timeout_ms: 5000, concurrency: 2 };
    const set = await a("PUT", `/v1/console/users/${member.id}/key-ceiling`, ceiling);
    assert.equal(set.status, 200, await set.clone().text());
    assert.equal((await m("PUT", `/v1/console/users/${member.id}/key-ceiling`, {})).status, 403);
    const seen = (await (await m("GET", "/v1/console/session")).json()) as { key_ceiling: unknown };
    assert.deepEqual(seen.key_ceiling, ceiling, "the member reads their own ceiling");
    // A new key: the server's settings (every runtime, public) are beyond it; within is fine.
    const wide = await m("POST", "/v1/console/keys", { name: "m-wide" });
    assert.equal(wide.status, 403);
    assert.match(await wide.text(), /runtimes.*network/);
    const raised = await m("POST", "/v1/console/keys", {
      name: "m-raised",
      policy: { ...ceiling, max_timeout_ms: 900_000, rate_per_minute: 1_000_000 },
    });
    assert.equal(raised.status, 403);
    assert.match(await raised.text(), /max_timeout_ms: 900000.*rate_per_minute/);
    const ok = await m("POST", "/v1/console/keys", { name: "m-ok", policy: ceiling });
    assert.equal(ok.status, 201, await ok.clone().text());
    const mine = (await ok.json()) as { id: string };
    // Widening it back: refused, field by field; narrowing further: allowed.
    for (const widen of [
      { runtimes: null },
      { network: "public" },
      { max_timeout_ms: 30_000 },
      { concurrency: 50 },
      { rate_per_minute: 1000 },
    ]) {
      const r = await m("PUT", `/v1/console/keys/${mine.id}/policy`, widen);
      assert.equal(r.status, 403, JSON.stringify(widen));
    }
    assert.equal(
      (await m("PUT", `/v1/console/keys/${mine.id}/policy`, { max_timeout_ms: 1000 })).status,
      200,
    );
    assert.deepEqual((await h.keys.list()).find((k) => k.id === mine.id)?.policy, {
      ...ceiling,
      max_timeout_ms: 1000,
    });
    // The admin may widen the member's key (an admin is held to no ceiling).
    const widened = await a("PUT", `/v1/console/keys/${mine.id}/policy`, {
      runtimes: null,
      network: null,
      max_timeout_ms: 900_000,
    });
    assert.equal(widened.status, 200, await widened.clone().text());
    // A member with no ceiling set gets the server's settings: no raise past them.
    const other = await makeUser(users, "member-n");
    const n = await session(other, "192.0.2.103");
    assert.equal((await n("POST", "/v1/console/keys", { name: "n-plain" })).status, 201);
    const past = await n("POST", "/v1/console/keys", {
      name: "n-raise",
      policy: { max_timeout_ms: 60_000, max_memory_mb: 2048 },
    });
    assert.equal(past.status, 403);
    assert.match(
      await past.text(),
      /max_timeout_ms: 60000 \(the ceiling is 30000\).*max_memory_mb/,
    );
  });

  test("SEC-LIMIT-AUTHORIZE-RATE: /oauth/authorize writes at most 30 requests at once per address, then one per 2 s", async () => {
    const reg = await h.post("/oauth/register", {
      client_name: "Rate Test",
      redirect_uris: ["http://127.0.0.1:9/cb"],
      token_endpoint_auth_method: "none",
    });
    const { client_id } = (await reg.json()) as { client_id: string };
    const url = (client: string) =>
      `${h.api.url}/oauth/authorize?${new URLSearchParams({
        response_type: "code",
        client_id: client,
        redirect_uri: "http://127.0.0.1:9/cb",
        code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
        code_challenge_method: "S256",
        resource: `${h.api.url}/mcp`,
      })}`;
    const get = (client: string) =>
      fetch(url(client), { redirect: "manual", headers: { "X-Forwarded-For": "198.51.100.40" } });
    const rows = () =>
      (h.db.prepare("SELECT count(*) AS n FROM oauth_requests").get() as { n: number }).n;
    const before = rows();
    // Refused requests (an unknown client) write nothing and are not counted.
    for (let i = 0; i < 40; i++) assert.equal((await get("nobody")).status, 400);
    const statuses = await Promise.all(Array.from({ length: 40 }, () => get(client_id)));
    const tallied = tally(statuses.map((r) => r.status));
    assert.ok((tallied[302] ?? 0) >= 30 && (tallied[302] ?? 0) <= 31, JSON.stringify(tallied));
    assert.equal(rows() - before, tallied[302], "one row per request let through, none else");
  });

  const sessionsOpen = () =>
    (
      h.db
        .prepare("SELECT count(*) AS n FROM sessions WHERE key_id = ? AND ended_at IS NULL")
        .get(keyId) as { n: number }
    ).n;

  test("SEC-LIMIT-SESSION-SLOTS: 8 session starts at once for one key: 3 start, 5 are refused BUSY", async () => {
    const answers = await Promise.all(
      Array.from({ length: 8 }, () => h.post("/v1/sessions", { runtime: "bash" }, key)),
    );
    const bodies = (await Promise.all(answers.map((r) => r.json()))) as {
      session_id?: string;
      error?: { code: string; message: string };
    }[];
    const started = bodies.filter((b) => b.session_id).map((b) => b.session_id!);
    console.log(`# 8 starts at once: ${JSON.stringify(tally(answers.map((r) => r.status)))}`);
    assert.equal(started.length, 3, JSON.stringify(bodies));
    assert.ok(bodies.filter((b) => !b.session_id).every((b) => b.error?.code === "BUSY"));
    assert.equal(h.engine.sessions.count, 3);
    assert.equal(sessionsOpen(), 3, "three records, no reservation left behind");
    for (const id of started)
      assert.equal(
        (
          await fetch(`${h.api.url}/v1/sessions/${id}`, {
            method: "DELETE",
            headers: { Authorization: `Bearer ${key}` },
          })
        ).status,
        200,
      );
    assert.equal(sessionsOpen(), 0);
  });

  test("SEC-LIMIT-SESSION-POLICY: a key narrowed below its session's memory, or revoked, ends it (policy); a narrowed timeout holds from the next cell", async () => {
    const k = await h.keys.create("narrowed", null);
    const start = async (memory_mb: number) => {
      const r = await h.post("/v1/sessions", { runtime: "bash", memory_mb }, k.key);
      assert.equal(r.status, 201, await r.clone().text());
      return ((await r.json()) as { session_id: string }).session_id;
    };
    const cell = (session_id: string, extra: object = {}) =>
      h.post("/v1/exec", { runtime: "bash", code: "echo cell", session_id, ...extra }, k.key);
    const reason = (id: string) =>
      (
        h.db
          .prepare("SELECT end_reason FROM sessions WHERE key_id = ? AND id_sha256 = ?")
          .get(k.id, createHashHex(id)) as { end_reason: string | null } | undefined
      )?.end_reason;
    const small = await start(128);
    const big = await start(256);
    assert.equal((await cell(big)).status, 200);
    // The operator narrows the key as `scratchrun keys update` does: straight in the store.
    await h.keys.updatePolicy(k.id, { max_memory_mb: 192, max_timeout_ms: 2000 });
    await waitFor("the big session's end", () => reason(big) === "policy", 10_000);
    const gone = await cell(big);
    assert.equal(gone.status, 404, await gone.clone().text());
    // The small one is still admitted; the new timeout holds for its next cell.
    assert.equal(reason(small), null);
    assert.equal((await cell(small, { timeout_ms: 5000 })).status, 400);
    assert.equal((await cell(small, { timeout_ms: 1000 })).status, 200);
    await h.keys.revoke(k.id);
    await waitFor("the revoked key's session's end", () => reason(small) === "policy", 10_000);
    await waitFor("both sandboxes gone", () => h.engine.sessions.count === 0, 10_000);
  });

  test("SEC-LIMIT-SESSION-ABANDONED: a session start whose client went away is destroyed, and its slot freed", async () => {
    const k = await h.keys.create("abandoning", null);
    const gave = new AbortController();
    const pending = fetch(`${h.api.url}/v1/sessions`, {
      method: "POST",
      headers: { Authorization: `Bearer ${k.key}`, "Content-Type": "application/json" },
      body: JSON.stringify({ runtime: "bash" }),
      signal: gave.signal,
    }).catch(() => null);
    await waitFor(
      "the start's reservation",
      () =>
        (
          h.db.prepare("SELECT count(*) AS n FROM sessions WHERE key_id = ?").get(k.id) as {
            n: number;
          }
        ).n === 1,
    );
    gave.abort();
    await pending;
    await waitFor(
      "no session, no record left",
      () =>
        h.engine.sessions.count === 0 &&
        (
          h.db.prepare("SELECT count(*) AS n FROM sessions WHERE key_id = ?").get(k.id) as {
            n: number;
          }
        ).n === 0,
      20_000,
    );
    // The key's three slots are all there.
    const three = await Promise.all(
      Array.from({ length: 3 }, () => h.post("/v1/sessions", { runtime: "bash" }, k.key)),
    );
    assert.deepEqual(
      three.map((r) => r.status),
      [201, 201, 201],
    );
    await h.keys.revoke(k.id);
    await waitFor("their end", () => h.engine.sessions.count === 0, 10_000);
  });
});

function createHashHex(s: string): string {
  return createHash("sha256").update(s, "utf8").digest("hex");
}
