// OAuth for /mcp end to end (SVC-OAUTH-FLOW): the MCP SDK's own OAuth client provider finds the
// authorization server from /mcp's 401, registers (2025-11-25, v1 SDK, dynamic registration) or
// names its client ID metadata document (2026-07-28, v2 SDK), a person signs in and approves on
// the consent page, the SDK redeems the code and calls scratchrun_exec with the token; the run is
// the approved key's. Real server, real engine (namespace), real SQLite.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { auth, UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { CallToolResultSchema, type CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import {
  Client as ModernClient,
  StreamableHTTPClientTransport as ModernHttpTransport,
  UnauthorizedError as ModernUnauthorizedError,
} from "@modelcontextprotocol/client";
import { UserStore } from "../../src/store/users.js";
import { Browser, consent, makeUser, MemoryProvider, startDocumentHost } from "./oauth-browser.js";
import { startService, type ServiceHarness } from "./harness.js";

const REDIRECT = "http://127.0.0.1:9/callback";

const exec = async (client: { callTool: Client["callTool"] }, code: string) =>
  (await client.callTool(
    { name: "scratchrun_exec", arguments: { runtime: "bash", code } },
    CallToolResultSchema,
  )) as CallToolResult;

describe("OAuth for /mcp with the MCP SDK's own OAuth client (SVC-OAUTH-FLOW)", () => {
  let h: ServiceHarness;
  let users: UserStore;
  let alice: { id: string; name: string; password: string };
  let aliceKey: string;
  const clientUrlPath = "/oauth/client.json";
  let docs: Awaited<ReturnType<typeof startDocumentHost>>;
  const served = new Map<string, () => { body: string }>();

  before(async () => {
    docs = await startDocumentHost(served);
    served.set(clientUrlPath, () => ({
      body: JSON.stringify({
        client_id: `${docs.origin}${clientUrlPath}`,
        client_name: "Metadata Document Client",
        redirect_uris: [REDIRECT],
        grant_types: ["authorization_code", "refresh_token"],
        response_types: ["code"],
        token_endpoint_auth_method: "none",
      }),
    }));
    h = await startService({}, { metadataFetch: { allowLoopback: true, ca: docs.ca } });
    users = new UserStore(h.db);
    alice = await makeUser(users, "alice");
    aliceKey = (await h.keys.create("alice-key", null, Date.now(), alice.id)).id;
    await h.keys.create("unowned", null);
  });
  after(async () => {
    await h?.close();
    await docs?.close();
  });

  test("/mcp's 401 names the protected-resource metadata, which names this server", async () => {
    const res = await h.post("/mcp", { jsonrpc: "2.0", id: 1, method: "ping" });
    assert.equal(res.status, 401);
    const challenge = res.headers.get("www-authenticate") ?? "";
    const url = /resource_metadata="([^"]+)"/.exec(challenge)?.[1];
    assert.equal(url, `${h.api.url}/.well-known/oauth-protected-resource/mcp`);
    const prm = (await (await fetch(url!)).json()) as Record<string, unknown>;
    assert.equal(prm.resource, `${h.api.url}/mcp`);
    assert.deepEqual(prm.authorization_servers, [h.api.url]);
    const asm = (await (
      await fetch(`${h.api.url}/.well-known/oauth-authorization-server`)
    ).json()) as Record<string, unknown>;
    assert.equal(asm.issuer, h.api.url);
    assert.deepEqual(asm.code_challenge_methods_supported, ["S256"]);
    assert.equal(asm.client_id_metadata_document_supported, true);
    assert.equal(asm.authorization_response_iss_parameter_supported, true);
  });

  test("2025-11-25: v1 SDK, dynamic registration, consent, exec as the approved key; refresh rotates", async () => {
    const provider = new MemoryProvider("Legacy Registered Client", REDIRECT);
    const url = new URL(`${h.api.url}/mcp`);
    const first = new StreamableHTTPClientTransport(url, { authProvider: provider });
    await assert.rejects(
      new Client({ name: "oauth-test", version: "1" }).connect(first),
      UnauthorizedError,
    );
    assert.ok(provider.info?.client_id.startsWith("src_"), "registered dynamically");
    const browser = new Browser(h.api.url);
    const back = await consent(browser, provider.authUrl!.toString(), alice);
    assert.equal(`${back.origin}${back.pathname}`, REDIRECT);
    assert.equal(back.searchParams.get("state"), "state-123");
    assert.equal(back.searchParams.get("iss"), h.api.url);
    const code = back.searchParams.get("code")!;
    assert.ok(code, `a code in ${back}`);
    await first.finishAuth(code);
    assert.ok(provider.saved?.access_token.startsWith("sra_"));
    for (const seen of browser.visited)
      assert.doesNotMatch(
        seen,
        /sra_|srr_|access_token|refresh_token/,
        "no token in a URL the browser keeps",
      );

    const client = new Client({ name: "oauth-test", version: "1" });
    await client.connect(new StreamableHTTPClientTransport(url, { authProvider: provider }));
    const r = await exec(client, "echo via-oauth-2025");
    assert.equal((r.structuredContent as { stdout: string }).stdout, "via-oauth-2025\n");
    const run = h.runs.all().at(-1)!;
    assert.equal(run.key_id, aliceKey, "the run is the approved key's");
    assert.equal(run.transport, "mcp");
    await client.close();

    // The SDK refreshes with its refresh token: a new pair; the old refresh token is spent.
    const before = provider.saved!;
    assert.equal(await auth(provider, { serverUrl: url }), "AUTHORIZED");
    assert.notEqual(provider.saved!.access_token, before.access_token);
    assert.notEqual(provider.saved!.refresh_token, before.refresh_token);
    const again = new Client({ name: "oauth-test", version: "1" });
    await again.connect(new StreamableHTTPClientTransport(url, { authProvider: provider }));
    const r2 = await exec(again, "echo refreshed");
    assert.equal((r2.structuredContent as { stdout: string }).stdout, "refreshed\n");
    await again.close();
  });

  test("2026-07-28: v2 SDK, client ID metadata document, consent, exec as the approved key", async () => {
    const provider = new MemoryProvider("ignored: the document names the client", REDIRECT);
    provider.clientMetadataUrl = `${docs.origin}${clientUrlPath}`;
    const url = new URL(`${h.api.url}/mcp`);
    const pinned = () =>
      new ModernClient(
        { name: "oauth-test-2026", version: "1" },
        { versionNegotiation: { mode: { pin: "2026-07-28" } } },
      );
    const first = new ModernHttpTransport(url, { authProvider: provider });
    await assert.rejects(pinned().connect(first), ModernUnauthorizedError);
    assert.equal(provider.info?.client_id, provider.clientMetadataUrl, "the URL is the client_id");
    const browser = new Browser(h.api.url);
    let consentHtml = "";
    const page = await browser.follow(provider.authUrl!.toString());
    // Not signed in: the sign-in page first (the consent page's own text is checked below).
    assert.match(page.url, /\/console\/signin\?next=/);
    const back = await consent(browser, provider.authUrl!.toString(), alice);
    {
      // The consent page showed the document's name and the redirect, exactly.
      const again = await fetch(provider.authUrl!, { redirect: "manual" });
      const req = new URL(again.headers.get("location")!, h.api.url).searchParams.get("request");
      consentHtml = await (await browser.get(`/oauth/consent?request=${req}`)).text();
    }
    assert.match(consentHtml, /Metadata Document Client/);
    assert.ok(consentHtml.includes(REDIRECT));
    assert.equal(back.searchParams.get("iss"), h.api.url);
    await first.finishAuth(back.searchParams);
    const client = pinned();
    await client.connect(new ModernHttpTransport(url, { authProvider: provider }));
    assert.equal(client.getProtocolEra(), "modern");
    const r = (await client.callTool({
      name: "scratchrun_exec",
      arguments: { runtime: "bash", code: "echo via-oauth-2026" },
    })) as CallToolResult;
    assert.equal((r.structuredContent as { stdout: string }).stdout, "via-oauth-2026\n");
    assert.equal(h.runs.all().at(-1)!.key_id, aliceKey);
    await client.close();
  });

  test("an API key as bearer keeps working on /mcp and /v1/exec", async () => {
    const { key } = await h.keys.create("plain", null);
    const res = await h.post("/v1/exec", { runtime: "bash", code: "echo key" }, key);
    assert.equal(res.status, 200);
    const client = new Client({ name: "key-test", version: "1" });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${h.api.url}/mcp`), {
        requestInit: { headers: { Authorization: `Bearer ${key}` } },
      }),
    );
    const r = await exec(client, "echo still-a-key");
    assert.equal((r.structuredContent as { stdout: string }).stdout, "still-a-key\n");
    await client.close();
  });
});
