// An external OIDC issuer the operator trusts (SVC-OIDC, SEC-OIDC-*): a local test issuer on
// loopback signs real JWTs. Its access token for /mcp acts as the key bound to its subject,
// through a real MCP client; forged, foreign, expired, unbound and revoked ones are refused; a
// rotated key is fetched again. People sign in to the console through the issuer (code flow,
// PKCE, nonce), and every way to smuggle a sign-in into another browser is refused. Real
// server, real engine (namespace), real SQLite.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, type CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { isScratchRunError } from "../../src/errors.js";
import { TrustedIssuer } from "../../src/oauth/oidc.js";
import { UserStore } from "../../src/store/users.js";
import { makeKey, signHs256, TestIssuer } from "../helpers/oidc-issuer.js";
import { Browser } from "./oauth-browser.js";
import { startService, type ServiceHarness } from "./harness.js";

const CLIENT_ID = "scratchrun-console";

describe("a trusted external OIDC issuer", () => {
  let idp: TestIssuer;
  let h: ServiceHarness;
  let users: UserStore;
  let bound: { id: string; key: string };
  let resource: string;

  before(async () => {
    idp = await TestIssuer.start(CLIENT_ID, "console-secret");
    // A refetch gap of 0: a rotation is seen at the first token with the new kid.
    const oidc = new TrustedIssuer(
      { issuer: idp.url, clientId: CLIENT_ID, clientSecret: "console-secret" },
      0,
    );
    h = await startService({}, { oidc });
    resource = `${h.api.url}/mcp`;
    users = new UserStore(h.db);
    bound = await h.keys.create("agent-key", null, Date.now(), null, "agent-1");
  });

  after(async () => {
    await h?.close();
    await idp?.close();
  });

  const mcpStatus = async (token: string) =>
    (
      await fetch(resource, {
        method: "POST",
        headers: {
          Authorization: `Bearer ${token}`,
          "Content-Type": "application/json",
          Accept: "application/json, text/event-stream",
        },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: 1,
          method: "initialize",
          params: {
            protocolVersion: "2025-11-25",
            capabilities: {},
            clientInfo: { name: "oidc-probe", version: "1" },
          },
        }),
      })
    ).status;

  test("the protected-resource metadata sends clients to the trusted issuer", async () => {
    const prm = (await (
      await fetch(`${h.api.url}/.well-known/oauth-protected-resource/mcp`)
    ).json()) as { authorization_servers: string[]; resource: string };
    assert.deepEqual(prm.authorization_servers, [idp.url]);
    assert.equal(prm.resource, resource);
    const res = await fetch(resource, { method: "POST" });
    assert.equal(res.status, 401);
    assert.match(res.headers.get("www-authenticate") ?? "", /resource_metadata=/);
  });

  test("its access token for this /mcp acts as the key bound to its subject, through an MCP client", async () => {
    const token = idp.token({ sub: "agent-1", aud: resource });
    const client = new Client({ name: "oidc-test", version: "1" });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(resource), {
        requestInit: { headers: { Authorization: `Bearer ${token}` } },
      }),
    );
    try {
      const r = (await client.callTool(
        { name: "scratchrun_exec", arguments: { runtime: "bash", code: "echo via-oidc" } },
        CallToolResultSchema,
      )) as CallToolResult;
      assert.equal(r.structuredContent?.stdout, "via-oidc\n");
    } finally {
      await client.close();
    }
    // REST is not the resource the token was issued for: there it is no credential (SEC-LIMIT-AUDIENCE).
    const rest = await h.post("/v1/exec", { runtime: "bash", code: "echo rest" }, token);
    assert.equal(rest.status, 401);
    assert.match(await rest.text(), /OAuth access tokens are for \/mcp/);
    const runs = h.runs.all().filter((r) => r.key_id === bound.id);
    assert.equal(runs.length, 1, "the /mcp run is recorded under the bound key, nothing else ran");
  });

  test("refused: another subject, another audience, another issuer, expired, a forged or HS256 signature", async () => {
    const ok = { sub: "agent-1", aud: resource };
    const attacker = makeKey("ES256", idp.signer.kid);
    const pem = idp.signer.publicKey.export({ format: "pem", type: "spki" });
    const now = Math.floor(Date.now() / 1000);
    const cases: Record<string, string> = {
      "a subject no key is bound to": idp.token({ ...ok, sub: "agent-2" }),
      "a token for another resource": idp.token({ ...ok, aud: `${h.api.url}/other` }),
      "a token for the console's client": idp.token({ ...ok, aud: CLIENT_ID }),
      "another issuer's claim": idp.token({ ...ok, iss: "https://evil.example.com" }),
      expired: idp.token({ ...ok, exp: now - 120, iat: now - 600 }),
      "an attacker's key under the issuer's kid": idp.token(ok, attacker),
      "HS256 keyed with the issuer's public key": signHs256(
        { ...ok, iss: idp.url, exp: now + 300 },
        Buffer.from(pem),
        idp.signer.kid,
      ),
    };
    for (const [what, token] of Object.entries(cases))
      assert.equal(await mcpStatus(token), 401, what);
    assert.equal(await mcpStatus(idp.token(ok)), 200, "the good token still works");
  });

  test("a rotated key is fetched again; the old key's tokens stop working", async () => {
    const old = idp.token({ sub: "agent-1", aud: resource });
    const before = idp.requests.filter((p) => p === "/jwks").length;
    idp.rotate("RS256");
    assert.equal(await mcpStatus(idp.token({ sub: "agent-1", aud: resource })), 200);
    assert.ok(idp.requests.filter((p) => p === "/jwks").length > before, "the keys were fetched");
    assert.equal(await mcpStatus(old), 401, "the retired key is no longer published");
  });

  test("a revoked key's subject is no caller; a new key bound to it is", async () => {
    const k = await h.keys.create("short-lived", null, Date.now(), null, "agent-3");
    const token = idp.token({ sub: "agent-3", aud: resource });
    assert.equal(await mcpStatus(token), 200);
    await h.keys.revoke(k.id);
    assert.equal(await mcpStatus(token), 401);
    await assert.rejects(
      h.keys.create("dup", null, Date.now(), null, "agent-1"),
      /bound to OIDC subject "agent-1" already/,
    );
    const again = await h.keys.create("successor", null, Date.now(), null, "agent-3");
    assert.equal(await mcpStatus(token), 200);
    await h.keys.revoke(again.id);
  });

  test("an issuer that cannot be reached is a 503 to retry, not a 401 or a crash", async () => {
    const dead = new TrustedIssuer({ issuer: "http://127.0.0.1:9" });
    await assert.rejects(
      dead.verifyAccess(idp.token({ sub: "agent-1", aud: resource }), resource),
      (e) => isScratchRunError(e) && e.code === "NOT_READY",
    );
  });

  /** A browser's sign-in through the issuer: the redirects, followed by hand. */
  async function oidcSignIn(b: Browser, next = "/console") {
    const start = await b.get(`/console/signin/oidc?next=${encodeURIComponent(next)}`);
    assert.equal(start.status, 303);
    const atIssuer = new URL(start.headers.get("location")!);
    assert.equal(atIssuer.origin, idp.url);
    assert.equal(atIssuer.searchParams.get("code_challenge_method"), "S256");
    assert.ok(atIssuer.searchParams.get("nonce"), "a nonce is sent");
    const back = await fetch(atIssuer, { redirect: "manual" });
    const callback = new URL(back.headers.get("location")!);
    assert.equal(callback.origin, h.api.url);
    return { callback, res: await b.get(callback.pathname + callback.search) };
  }

  test("console: the person the issuer vouches for signs in as the linked user, and lands where they were going", async () => {
    await users.create("oidc-member", "member", "", Date.now(), "person-1");
    idp.subject = "person-1";
    const b = new Browser(h.api.url);
    const page = await (await b.get("/console/signin")).text();
    assert.match(page, /href="\/console\/signin\/oidc\?next=%2Fconsole"/);
    const { res } = await oidcSignIn(b, "/console/#/keys");
    assert.equal(res.status, 303, await res.clone().text());
    assert.equal(res.headers.get("location"), "/console/#/keys");
    const session = (await (await b.get("/v1/console/session")).json()) as {
      user: { name: string };
    };
    assert.equal(session.user.name, "oidc-member");
    // A user made for the issuer has no password the form would take.
    const signed = await users.signIn("oidc-member", "");
    assert.equal(signed.ok, false);
  });

  test("console: a sign-in started in another browser, a foreign state, a bad nonce or audience, a replayed code, an unlinked person are refused", async () => {
    idp.subject = "person-1";
    // Login CSRF: the attacker's own code and state, planted in the victim's browser.
    const attacker = new Browser(h.api.url);
    const start = await attacker.get("/console/signin/oidc");
    const back = await fetch(new URL(start.headers.get("location")!), { redirect: "manual" });
    const planted = new URL(back.headers.get("location")!);
    const victim = new Browser(h.api.url);
    const noCookie = await victim.get(planted.pathname + planted.search);
    assert.equal(noCookie.status, 400);
    assert.match(await noCookie.text(), /not started in this browser/);
    await victim.get("/console/signin/oidc");
    const foreign = await victim.get(planted.pathname + planted.search);
    assert.equal(foreign.status, 400);
    assert.match(await foreign.text(), /state does not match/);
    assert.equal(victim.jar.has("scratchrun_session"), false);

    // The ID token's nonce is not this browser's (a replayed ID token).
    idp.nonceOverride = "replayed";
    const replayed = await oidcSignIn(new Browser(h.api.url));
    idp.nonceOverride = undefined;
    assert.equal(replayed.res.status, 401);
    assert.match(await replayed.res.text(), /nonce is not this sign-in/);

    // An ID token minted for another client.
    idp.idAudience = "another-client";
    const foreignAud = await oidcSignIn(new Browser(h.api.url));
    idp.idAudience = undefined;
    assert.equal(foreignAud.res.status, 401);
    assert.match(await foreignAud.res.text(), /not for this audience/);

    // The code redeemed once; the same callback again is refused at the issuer.
    const b = new Browser(h.api.url);
    const first = await oidcSignIn(b);
    assert.equal(first.res.status, 303);
    await b.get("/console/signin/oidc");
    const again = await b.get(first.callback.pathname + first.callback.search);
    assert.equal(again.status, 400, "its state belonged to the first sign-in");

    // A person the issuer knows but no console user is linked to.
    idp.subject = "stranger";
    const stranger = await oidcSignIn(new Browser(h.api.url));
    assert.equal(stranger.res.status, 403);
    assert.match(await stranger.res.text(), /No console user is linked.*stranger/);

    // Where to go after sign-in stays on this server.
    idp.subject = "person-1";
    const away = await oidcSignIn(new Browser(h.api.url), "https://evil.example.com/");
    assert.equal(away.res.headers.get("location"), "/console");
  });
});
