// The OAuth authorization server and the console's sign-in under attack (SEC-OAUTH-*): each test
// is the attack, on a real server with a real SQLite store, through HTTP as a browser or a client
// would send it. No sandbox is started (the pools are off): nothing here gets as far as a run.
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { createServer } from "node:https";
import { after, before, describe, test } from "node:test";
import { fetchClientMetadata, METADATA_FETCH } from "../../src/oauth/client-metadata.js";
import { OAuthStore } from "../../src/store/oauth.js";
import { LOCKOUT, UserStore } from "../../src/store/users.js";
import { Browser, consent, formOf, makeUser, startDocumentHost } from "./oauth-browser.js";
import { startService, type ServiceHarness } from "./harness.js";

const REDIRECT = "http://127.0.0.1:9/callback";

const pkce = () => {
  const verifier = randomBytes(32).toString("base64url");
  return { verifier, challenge: createHash("sha256").update(verifier).digest("base64url") };
};

describe("OAuth and console sign-in under attack (SEC-OAUTH-*)", () => {
  let h: ServiceHarness;
  let users: UserStore;
  let oauth: OAuthStore;
  let alice: { id: string; name: string; password: string };
  let bob: { id: string; name: string; password: string };
  let admin: { id: string; name: string; password: string };
  let aliceKey: string;
  let bobKey: string;
  let clientId: string;
  let resource: string;

  before(async () => {
    h = await startService({}, {}, { SCRATCHRUN_POOL_SIZE: "0" });
    users = new UserStore(h.db);
    oauth = new OAuthStore(h.db);
    alice = await makeUser(users, "alice");
    bob = await makeUser(users, "bob");
    admin = await makeUser(users, "root", "admin");
    aliceKey = (await h.keys.create("alice-key", null, Date.now(), alice.id)).id;
    bobKey = (await h.keys.create("bob-key", null, Date.now(), bob.id)).id;
    resource = `${h.api.url}/mcp`;
    const reg = await h.post("/oauth/register", {
      client_name: "Attack Test Client",
      redirect_uris: [REDIRECT],
      token_endpoint_auth_method: "none",
    });
    assert.equal(reg.status, 201);
    clientId = ((await reg.json()) as { client_id: string }).client_id;
  });
  after(async () => {
    await h?.close();
  });

  const authorizeUrl = (over: Record<string, string | null> = {}, challenge = pkce().challenge) => {
    const p = new URLSearchParams();
    const params: Record<string, string | null> = {
      response_type: "code",
      client_id: clientId,
      redirect_uri: REDIRECT,
      code_challenge: challenge,
      code_challenge_method: "S256",
      state: "st",
      resource,
      ...over,
    };
    for (const [k, v] of Object.entries(params)) if (v !== null) p.set(k, v);
    return `${h.api.url}/oauth/authorize?${p}`;
  };

  const tokenRequest = (form: Record<string, string>) =>
    fetch(`${h.api.url}/oauth/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ client_id: clientId, ...form }).toString(),
    });

  /** A code for alice's key, with the verifier that redeems it. */
  const codeFor = async (who = alice, keyId?: string) => {
    const { verifier, challenge } = pkce();
    const back = await consent(
      new Browser(h.api.url),
      authorizeUrl({}, challenge),
      who,
      "approve",
      keyId,
    );
    return { code: back.searchParams.get("code")!, verifier };
  };
  const redeem = (code: string, verifier: string, extra: Record<string, string> = {}) =>
    tokenRequest({
      grant_type: "authorization_code",
      code,
      code_verifier: verifier,
      redirect_uri: REDIRECT,
      resource,
      ...extra,
    });
  const tokensFor = async () => {
    const { code, verifier } = await codeFor();
    const res = await redeem(code, verifier);
    assert.equal(res.status, 200, await res.clone().text());
    return (await res.json()) as { access_token: string; refresh_token: string };
  };
  const mcpStatus = async (token: string) =>
    (
      await h.post("/mcp", { jsonrpc: "2.0", id: 1, method: "ping" }, token, {
        Accept: "application/json, text/event-stream",
      })
    ).status;

  test("SEC-OAUTH-LOCKOUT: wrong passwords lock the account, even against the right one; the address is limited too", async () => {
    const victim = await makeUser(users, "victim");
    const b = new Browser(h.api.url);
    const attempt = async (name: string, password: string) => {
      const form = formOf(await (await b.get("/console/signin")).text());
      return b.post("/console/signin", { ...form.fields, name, password });
    };
    for (let i = 1; i < LOCKOUT.failures; i++)
      assert.equal((await attempt("victim", "wrong-guess-123")).status, 401);
    const locking = await attempt("victim", "wrong-guess-123");
    assert.equal(locking.status, 429, "the last wrong password locks");
    const right = await attempt("victim", victim.password);
    assert.equal(right.status, 429, "the right password is refused while locked");
    assert.match(await right.text(), /locked/);
    assert.equal(b.jar.has("scratchrun_session"), false, "no session was made");
    // Another account is not locked by it.
    const c = new Browser(h.api.url);
    const form = formOf(await (await c.get("/console/signin")).text());
    assert.equal(
      (await c.post("/console/signin", { ...form.fields, name: "alice", password: alice.password }))
        .status,
      303,
    );
    // The JSON route shares the lock.
    const json = await h.post("/v1/console/session", { name: "victim", password: victim.password });
    assert.equal(json.status, 429);
  });

  test("SEC-OAUTH-CSRF: forms and JSON writes without the token are refused, and change nothing", async () => {
    const b = new Browser(h.api.url);
    await b.get("/console/signin");
    const noToken = await b.post("/console/signin", {
      name: "alice",
      password: alice.password,
      next: "/console",
    });
    assert.equal(noToken.status, 403, "sign-in without its CSRF token");
    const otherToken = await b.post("/console/signin", {
      csrf: "forged-token-value",
      name: "alice",
      password: alice.password,
    });
    assert.equal(otherToken.status, 403, "sign-in with a token that is not the cookie's");
    // Signed in, a consent post without the session's token decides nothing.
    const signed = new Browser(h.api.url);
    const at = await signed.follow(authorizeUrl());
    const form = formOf(await at.res.text());
    await signed.post("/console/signin", {
      ...form.fields,
      name: "alice",
      password: alice.password,
    });
    const page = await signed.follow(new URL(at.url).searchParams.get("next")!);
    const consentForm = formOf(await page.res.text());
    const forged = await signed.post("/oauth/consent", {
      request: consentForm.fields.request!,
      decision: "approve",
      key_id: aliceKey,
    });
    assert.equal(forged.status, 403);
    assert.equal(forged.headers.get("location"), null, "no code");
    const wrong = await signed.post("/oauth/consent", {
      ...consentForm.fields,
      csrf: "x".repeat(43),
      decision: "approve",
      key_id: aliceKey,
    });
    assert.equal(wrong.status, 403);
    assert.ok(
      await oauth.pendingRequest(consentForm.fields.request!),
      "the request is still undecided",
    );
    // JSON: a write without X-CSRF-Token.
    const s = await h.post("/v1/console/session", { name: "alice", password: alice.password });
    const cookie = s.headers.get("set-cookie")!.split(";")[0]!;
    const del = await fetch(`${h.api.url}/v1/console/session`, {
      method: "DELETE",
      headers: { cookie },
    });
    assert.equal(del.status, 403);
    const still = await fetch(`${h.api.url}/v1/console/session`, { headers: { cookie } });
    assert.equal(still.status, 200, "the session was not signed out");
  });

  test("SEC-OAUTH-AUDIENCE: a token for another resource is refused; resource must be this /mcp", async () => {
    const other = await fetch(authorizeUrl({ resource: "https://other.example/mcp" }), {
      redirect: "manual",
    });
    assert.equal(other.status, 302);
    const loc = new URL(other.headers.get("location")!);
    assert.equal(loc.searchParams.get("error"), "invalid_target");
    const missing = await fetch(authorizeUrl({ resource: null }), { redirect: "manual" });
    assert.equal(
      new URL(missing.headers.get("location")!).searchParams.get("error"),
      "invalid_target",
    );
    const { code, verifier } = await codeFor();
    const bad = await redeem(code, verifier, { resource: "https://other.example/mcp" });
    assert.equal(bad.status, 400);
    assert.equal(((await bad.json()) as { error: string }).error, "invalid_target");
    // A grant for another resource in the same store (another deployment sharing the database).
    const r = await oauth.createRequest({
      clientId,
      clientName: "x",
      redirectUri: REDIRECT,
      state: null,
      codeChallenge: pkce().challenge,
      resource: "https://other.example/mcp",
      scope: "scratchrun:exec",
    });
    const decided = await oauth.decide(r.id, { approve: { userId: alice.id, keyId: aliceKey } });
    const foreign = await oauth.issue(decided!.request.grantId!);
    assert.equal(await mcpStatus(foreign.access_token), 401, "audience is checked");
    const ours = await tokensFor();
    assert.notEqual(
      await mcpStatus(ours.access_token),
      401,
      "control: a token for this /mcp works",
    );
    // ... at /mcp only: REST is not the resource it was issued for (SEC-LIMIT-AUDIENCE).
    for (const [method, path] of [
      ["GET", "/v1/info"],
      ["POST", "/v1/exec"],
      ["POST", "/v1/sessions"],
    ]) {
      const rest = await fetch(`${h.api.url}${path}`, {
        method,
        headers: {
          Authorization: `Bearer ${ours.access_token}`,
          "Content-Type": "application/json",
        },
        ...(method === "POST"
          ? { body: JSON.stringify({ runtime: "bash", code: "echo no" }) }
          : {}),
      });
      assert.equal(rest.status, 401, path);
      assert.match(await rest.text(), /OAuth access tokens are for \/mcp/, path);
    }
  });

  test("SEC-OAUTH-PKCE: plain and missing challenges, missing and wrong verifiers are refused", async () => {
    for (const [over, what] of [
      [{ code_challenge_method: "plain" }, "plain"],
      [{ code_challenge_method: null }, "method missing (plain by default)"],
      [{ code_challenge: null }, "challenge missing"],
    ] as const) {
      const res = await fetch(authorizeUrl(over), { redirect: "manual" });
      const to = new URL(res.headers.get("location")!);
      assert.equal(to.searchParams.get("error"), "invalid_request", what);
    }
    const a = await codeFor();
    const none = await tokenRequest({
      grant_type: "authorization_code",
      code: a.code,
      redirect_uri: REDIRECT,
    });
    assert.equal(((await none.json()) as { error: string }).error, "invalid_grant", "no verifier");
    const b = await codeFor();
    const wrong = await redeem(b.code, pkce().verifier);
    assert.equal(
      ((await wrong.json()) as { error: string }).error,
      "invalid_grant",
      "wrong verifier",
    );
    const late = await redeem(b.code, b.verifier);
    assert.equal(late.status, 400, "a code tried with a wrong verifier is spent");
  });

  test("SEC-OAUTH-CODE-REUSE: a code redeems once; the second try revokes what the first got", async () => {
    const { code, verifier } = await codeFor();
    const first = await redeem(code, verifier);
    assert.equal(first.status, 200);
    const tokens = (await first.json()) as { access_token: string };
    assert.notEqual(await mcpStatus(tokens.access_token), 401);
    const second = await redeem(code, verifier);
    assert.equal(((await second.json()) as { error: string }).error, "invalid_grant");
    assert.equal(
      await mcpStatus(tokens.access_token),
      401,
      "the first redemption's token is revoked",
    );
  });

  test("SEC-OAUTH-REFRESH-REUSE: a rotated refresh token used again revokes the grant", async () => {
    const t = await tokensFor();
    const rotated = await tokenRequest({
      grant_type: "refresh_token",
      refresh_token: t.refresh_token,
    });
    assert.equal(rotated.status, 200);
    const next = (await rotated.json()) as { access_token: string; refresh_token: string };
    assert.notEqual(await mcpStatus(next.access_token), 401);
    const replay = await tokenRequest({
      grant_type: "refresh_token",
      refresh_token: t.refresh_token,
    });
    assert.equal(((await replay.json()) as { error: string }).error, "invalid_grant");
    assert.equal(
      await mcpStatus(next.access_token),
      401,
      "the newest access token dies with the grant",
    );
    const onward = await tokenRequest({
      grant_type: "refresh_token",
      refresh_token: next.refresh_token,
    });
    assert.equal(onward.status, 400, "and the newest refresh token");
  });

  test("SEC-OAUTH-REDIRECT: unregistered or altered redirect URIs and foreign next= targets are never followed", async () => {
    for (const uri of [
      "https://evil.example/callback",
      `${REDIRECT}/extra`,
      `${REDIRECT}?x=1`,
      "http://127.0.0.1:9/CALLBACK",
      "http://127.0.0.1:10/callback",
    ]) {
      const res = await fetch(authorizeUrl({ redirect_uri: uri }), { redirect: "manual" });
      assert.equal(res.status, 400, uri);
      assert.equal(res.headers.get("location"), null, `${uri}: no redirect`);
    }
    const unknown = await fetch(authorizeUrl({ client_id: "src_nosuchclient" }), {
      redirect: "manual",
    });
    assert.equal(unknown.status, 400);
    for (const uris of [
      ["javascript:alert(1)"],
      ["http://evil.example/cb"],
      ["https://a.example/cb#frag"],
      ["data:text/html,x"],
    ]) {
      const reg = await h.post("/oauth/register", { redirect_uris: uris });
      assert.equal(reg.status, 400, uris[0]);
    }
    for (const next of [
      "//evil.example/",
      "https://evil.example/",
      "/\\evil.example",
      "/%2F%2Fevil.example",
    ]) {
      const b = new Browser(h.api.url);
      const form = formOf(
        await (await b.get(`/console/signin?next=${encodeURIComponent(next)}`)).text(),
      );
      const res = await b.post("/console/signin", {
        ...form.fields,
        next,
        name: "alice",
        password: alice.password,
      });
      const to = res.headers.get("location") ?? "";
      assert.ok(to === "/console" || to === "/%2F%2Fevil.example", `next=${next} went to ${to}`);
      assert.equal(new URL(to, h.api.url).origin, h.api.url);
    }
  });

  test("SEC-OAUTH-CONSENT: deny and expiry send no code; a decided request is not decided twice", async () => {
    const back = await consent(new Browser(h.api.url), authorizeUrl(), alice, "deny");
    assert.equal(back.searchParams.get("error"), "access_denied");
    assert.equal(back.searchParams.get("code"), null);
    assert.equal(back.searchParams.get("state"), "st");
    const old = await oauth.createRequest(
      {
        clientId,
        clientName: "x",
        redirectUri: REDIRECT,
        state: null,
        codeChallenge: pkce().challenge,
        resource,
        scope: "scratchrun:exec",
      },
      Date.now() - 11 * 60_000,
    );
    const s = await h.post("/v1/console/session", { name: "alice", password: alice.password });
    const { csrf_token } = (await s.json()) as { csrf_token: string };
    const cookie = s.headers.get("set-cookie")!.split(";")[0]!;
    const expired = await fetch(`${h.api.url}/v1/oauth/requests/${old.id}`, {
      method: "POST",
      headers: { cookie, "x-csrf-token": csrf_token, "content-type": "application/json" },
      body: JSON.stringify({ decision: "approve", key_id: aliceKey }),
    });
    assert.equal(expired.status, 400);
    assert.doesNotMatch(await expired.text(), /code=/);
  });

  test("SEC-OAUTH-MEMBERS: a member sees and approves only their own keys and grants; an admin every key", async () => {
    const session = async (u: { name: string; password: string }) => {
      const s = await h.post("/v1/console/session", { name: u.name, password: u.password });
      const { csrf_token } = (await s.json()) as { csrf_token: string };
      return { cookie: s.headers.get("set-cookie")!.split(";")[0]!, csrf: csrf_token };
    };
    const keysOf = async (u: { name: string; password: string }) => {
      const { cookie } = await session(u);
      const res = await fetch(`${h.api.url}/v1/console/keys`, { headers: { cookie } });
      return ((await res.json()) as { keys: { id: string }[] }).keys.map((k) => k.id);
    };
    assert.deepEqual(await keysOf(bob), [bobKey]);
    assert.deepEqual(await keysOf(alice), [aliceKey]);
    assert.ok((await keysOf(admin)).includes(aliceKey) && (await keysOf(admin)).includes(bobKey));
    // Bob's consent page offers only his key; posting alice's key id is refused.
    const b = new Browser(h.api.url);
    const at = await b.follow(authorizeUrl());
    const f = formOf(await at.res.text());
    await b.post("/console/signin", { ...f.fields, name: "bob", password: bob.password });
    const page = await b.follow(new URL(at.url).searchParams.get("next")!);
    const form = formOf(await page.res.text());
    assert.deepEqual(form.options, [bobKey]);
    const stolen = await b.post("/oauth/consent", {
      ...form.fields,
      decision: "approve",
      key_id: aliceKey,
    });
    assert.equal(stolen.status, 403);
    // Alice's grants are not bob's to list or revoke.
    await tokensFor();
    const bobS = await session(bob);
    const grants = await fetch(`${h.api.url}/v1/console/grants`, {
      headers: { cookie: bobS.cookie },
    });
    const listed = ((await grants.json()) as { grants: { key_id: string }[] }).grants;
    assert.ok(
      listed.every((g) => g.key_id === bobKey),
      "only bob's key's grants",
    );
    const aliceGrant = (await oauth.grantsFor([aliceKey]))[0]!;
    const revoke = await fetch(`${h.api.url}/v1/console/grants/${aliceGrant.id}`, {
      method: "DELETE",
      headers: { cookie: bobS.cookie, "x-csrf-token": bobS.csrf },
    });
    assert.equal(revoke.status, 404);
    assert.equal((await oauth.grant(aliceGrant.id))!.revokedAt, null);
  });

  test("SEC-OAUTH-CSP: every console page forbids scripts, framing and other origins", async () => {
    const b = new Browser(h.api.url);
    const signin = await b.get("/console/signin");
    const at = await b.follow(authorizeUrl());
    const f = formOf(await at.res.text());
    await b.post("/console/signin", { ...f.fields, name: "alice", password: alice.password });
    const consentPage = await b.follow(new URL(at.url).searchParams.get("next")!);
    const refused = await fetch(authorizeUrl({ redirect_uri: "https://evil.example/cb" }));
    for (const [what, res] of [
      ["sign-in", signin],
      ["consent", consentPage.res],
      ["refusal", refused],
    ] as const) {
      const csp = res.headers.get("content-security-policy") ?? "";
      assert.match(csp, /default-src 'none'/, what);
      assert.match(csp, /frame-ancestors 'none'/, what);
      assert.match(csp, /base-uri 'none'/, what);
      assert.doesNotMatch(csp, /script-src|unsafe-inline|\*/, what);
      assert.equal(res.headers.get("x-frame-options"), "DENY", what);
      assert.equal(res.headers.get("cache-control"), "no-store", what);
      const html = await res.text();
      assert.doesNotMatch(
        html,
        /<script|https?:\/\/(?!127\.0\.0\.1:9)/i,
        `${what}: no script, nothing from elsewhere`,
      );
    }
    assert.match(
      consentPage.res.headers.get("content-security-policy")!,
      /form-action 'self' http:\/\/127\.0\.0\.1:9(;|$)/,
    );
    const cookie = (
      await h.post("/v1/console/session", { name: "alice", password: alice.password })
    ).headers.get("set-cookie")!;
    assert.match(cookie, /HttpOnly/);
    assert.match(cookie, /SameSite=Lax/);
  });

  test("SEC-OAUTH-CIMD: a client ID metadata document is fetched within bounds, from public addresses only", async () => {
    const big = "x".repeat(METADATA_FETCH.maxBytes + 1);
    const docs = new Map<string, () => { status?: number; type?: string; body: string }>();
    const host = await startDocumentHost(docs);
    const id = (p: string) => `${host.origin}${p}`;
    docs.set("/ok.json", () => ({
      body: JSON.stringify({
        client_id: id("/ok.json"),
        client_name: "ok",
        redirect_uris: [REDIRECT],
      }),
    }));
    docs.set("/big.json", () => ({
      body: JSON.stringify({ client_id: id("/big.json"), pad: big, redirect_uris: [REDIRECT] }),
    }));
    docs.set("/other.json", () => ({
      body: JSON.stringify({
        client_id: "https://elsewhere.example/c.json",
        redirect_uris: [REDIRECT],
      }),
    }));
    docs.set("/moved.json", () => ({ status: 302, body: "" }));
    docs.set("/secret.json", () => ({
      body: JSON.stringify({
        client_id: id("/secret.json"),
        redirect_uris: [REDIRECT],
        token_endpoint_auth_method: "client_secret_basic",
      }),
    }));
    const test = { ...METADATA_FETCH, allowLoopback: true, ca: host.ca };
    try {
      assert.equal((await fetchClientMetadata(id("/ok.json"), test)).ok, true, "control");
      const loopback = await fetchClientMetadata(id("/ok.json"), {
        ...METADATA_FETCH,
        ca: host.ca,
      });
      assert.equal(loopback.ok, false, "loopback refused without the test setting");
      assert.equal(
        (await fetchClientMetadata("https://10.0.0.1/c.json", METADATA_FETCH)).ok,
        false,
      );
      assert.equal(
        (await fetchClientMetadata("https://[::ffff:169.254.169.254]/c.json", METADATA_FETCH)).ok,
        false,
      );
      const tooBig = await fetchClientMetadata(id("/big.json"), test);
      assert.match(tooBig.ok ? "" : tooBig.message, /over 65536 bytes/);
      const mismatch = await fetchClientMetadata(id("/other.json"), test);
      assert.match(mismatch.ok ? "" : mismatch.message, /client_id is not the URL/);
      const moved = await fetchClientMetadata(id("/moved.json"), test);
      assert.match(moved.ok ? "" : moved.message, /302/);
      const secret = await fetchClientMetadata(id("/secret.json"), test);
      assert.match(secret.ok ? "" : secret.message, /public clients only/);
      assert.equal(
        (await fetchClientMetadata("http://127.0.0.1/c.json", test)).ok,
        false,
        "https only",
      );
      // A host that never answers: refused at the time bound.
      const hang = createServer({}, () => {});
      await new Promise<void>((r) => hang.listen(0, "127.0.0.1", () => r()));
      const port = (hang.address() as { port: number }).port;
      const t0 = Date.now();
      const slow = await fetchClientMetadata(`https://127.0.0.1:${port}/c.json`, {
        ...test,
        timeoutMs: 300,
      });
      assert.equal(slow.ok, false);
      assert.ok(Date.now() - t0 < 5000, "bounded by timeoutMs");
      hang.closeAllConnections();
      await new Promise<void>((r) => hang.close(() => r()));
    } finally {
      await host.close();
    }
  });

  // Last: it spends this address's sign-in allowance, which the tests above share.
  test("SEC-OAUTH-CORS: browser clients may read the metadata, token and registration endpoints, nothing else", async () => {
    for (const path of [
      "/.well-known/oauth-protected-resource",
      "/.well-known/oauth-protected-resource/mcp",
      "/.well-known/oauth-authorization-server",
      "/oauth/token",
      "/oauth/register",
    ]) {
      const pre = await fetch(`${h.api.url}${path}`, { method: "OPTIONS" });
      assert.equal(pre.status, 204, path);
      assert.equal(pre.headers.get("access-control-allow-origin"), "*", path);
      assert.match(pre.headers.get("access-control-allow-headers") ?? "", /MCP-Protocol-Version/);
      assert.equal(pre.headers.get("access-control-allow-credentials"), null, "never credentials");
    }
    const meta = await fetch(`${h.api.url}/.well-known/oauth-authorization-server`);
    assert.equal(meta.headers.get("access-control-allow-origin"), "*");
    const refused = await tokenRequest({ grant_type: "authorization_code", code: "nope" });
    assert.equal(refused.status, 400);
    assert.equal(refused.headers.get("access-control-allow-origin"), "*", "errors readable too");
    for (const path of ["/oauth/authorize", "/console/signin", "/v1/info", "/healthz"]) {
      const r = await fetch(`${h.api.url}${path}`, { redirect: "manual" });
      assert.equal(r.headers.get("access-control-allow-origin"), null, path);
    }
    // This server is loopback-bound: a page of another origin is refused before any CORS answer.
    const foreign = await fetch(`${h.api.url}/.well-known/oauth-authorization-server`, {
      headers: { origin: "https://evil.example" },
    });
    assert.equal(foreign.status, 403);
  });

  test("SEC-OAUTH-SIGNIN-RATE: wrong sign-ins from one address are limited, whichever names they try", async () => {
    let limited = 0;
    for (let i = 0; i < 12; i++) {
      const res = await h.post("/v1/console/session", {
        name: `nobody${i}`,
        password: "wrong-guess-123",
      });
      if (res.status === 429) limited++;
      else assert.equal(res.status, 401);
    }
    assert.ok(limited > 0, "the address was limited");
    const right = await h.post("/v1/console/session", { name: "alice", password: alice.password });
    assert.equal(right.status, 429, "while limited, even the right password waits");
    assert.ok(Number(right.headers.get("retry-after")) > 0);
  });
});
