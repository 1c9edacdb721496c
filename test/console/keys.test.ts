/**
 * Keys as a person uses them from the console (issue 55), in Debian's Chromium at 1280 and 390 px:
 * a new key's copy button and its snippets for Claude Code, Claude Desktop or Cursor and curl
 * (the curl one run as shown, the Claude Code one's URL and header taken by /mcp), the secret
 * gone once the key is revoked, revoked keys listed as such, every box inside its card and no
 * sideways scroll on a phone. An expiry, enforced at every door: REST, /mcp with the key, /mcp
 * with an OAuth token of the key's grant and that grant's refresh, and the key's open sessions,
 * which end. The front door too: `GET /` sends a browser to the console, `/favicon.ico` is an
 * icon, and `serve`'s start line names the console's and MCP's URLs.
 */
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { Browser } from "playwright-core";
import { SCOPE } from "../../src/oauth/authorization.js";
import { OAuthStore } from "../../src/store/oauth.js";
import { UserStore } from "../../src/store/users.js";
import { makeUser } from "../api/oauth-browser.js";
import { startService, waitFor, type ServiceHarness } from "../api/harness.js";
import { REPO_ROOT } from "../helpers/mcp-client.js";
import { inPage, launchChromium, overflow, signIn, until } from "./chromium.js";

const CLI = join(REPO_ROOT, "dist/src/bin/scratchrun.js");
const SHOTS =
  process.env.SCRATCHRUN_SCREENSHOTS === "1"
    ? join(REPO_ROOT, "docs/console")
    : mkdtempSync(join(tmpdir(), "console-keys-shots-"));

/** An MCP initialize at /mcp with this bearer: its HTTP status. */
const mcpStatus = async (url: string, token: string) =>
  (
    await fetch(`${url}/mcp`, {
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
          clientInfo: { name: "keys-probe", version: "1" },
        },
      }),
    })
  ).status;

describe("console keys: snippets, revocation, expiry at every door (namespace backend)", () => {
  let h: ServiceHarness;
  let browser: Browser;
  let users: UserStore;
  let oauth: OAuthStore;
  let mia: { name: string; password: string; id: string };
  let ada: { name: string; password: string; id: string };

  before(async () => {
    mkdirSync(SHOTS, { recursive: true });
    h = await startService();
    users = new UserStore(h.db);
    oauth = new OAuthStore(h.db);
    mia = await makeUser(users, "mia");
    ada = await makeUser(users, "ada", "admin");
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
    await h?.close();
    if (process.env.SCRATCHRUN_SCREENSHOTS !== "1") rmSync(SHOTS, { recursive: true, force: true });
  });

  const signedIn = (user: { name: string; password: string }, width = 1280) =>
    signIn(browser, h.api.url, user, width);

  test("GET / sends a browser to the console and tells any other client where things are; /favicon.ico is an icon", async () => {
    const html = await fetch(`${h.api.url}/`, {
      headers: { Accept: "text/html,application/xhtml+xml" },
      redirect: "manual",
    });
    assert.equal(html.status, 303);
    assert.equal(html.headers.get("location"), "/console");
    const json = await fetch(`${h.api.url}/`);
    assert.equal(json.status, 200);
    const where = (await json.json()) as Record<string, string>;
    assert.equal(where.console, `${h.api.url}/console`);
    assert.equal(where.mcp, `${h.api.url}/mcp`);
    // A browser opening the root lands on the sign-in page, with the icon in its tab.
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(`${h.api.url}/`);
    assert.match(page.url(), /\/console\/signin/);
    const icon = await fetch(`${h.api.url}/favicon.ico`);
    assert.equal(icon.status, 200);
    assert.equal(icon.headers.get("content-type"), "image/x-icon");
    const bytes = Buffer.from(await icon.arrayBuffer());
    assert.deepEqual([...bytes.subarray(0, 4)], [0, 0, 1, 0], "an ICO header");
    // The browser decodes it: a 32x32 image.
    await page.goto(`${h.api.url}/favicon.ico`);
    const size = await inPage<number[]>(
      page,
      `(async () => {
        const i = document.querySelector("img");
        await i.decode();
        return [i.naturalWidth, i.naturalHeight];
      })()`,
    );
    assert.deepEqual(size, [32, 32]);
    await context.close();
  });

  test("serve's start line names the console's and the MCP endpoint's URLs", async () => {
    const home = mkdtempSync(join(tmpdir(), "sr-console-serve-"));
    const child = spawn(process.execPath, [CLI, "serve", "--host", "127.0.0.1", "--port", "0"], {
      // Network none: a second server with public networking on this host would, at its start,
      // remove the sandbox networks of this file's own server (one server per prefix per host).
      env: {
        ...process.env,
        SCRATCHRUN_HOME: home,
        SCRATCHRUN_ISOLATION: "namespace",
        SCRATCHRUN_NETWORK: "none",
      },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let err = "";
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const exited = new Promise((r) => child.once("exit", r));
    try {
      const line = await waitFor(
        "the start line",
        () => /^scratchrun: serving on .*$/m.exec(err)?.[0],
        60_000,
      );
      const url = /serving on (http:\/\/\S+)/.exec(line)![1]!;
      assert.ok(line.includes(`console ${url}/console`), line);
      assert.ok(line.includes(`MCP ${url}/mcp`), line);
    } finally {
      child.kill("SIGTERM");
      await exited;
      rmSync(home, { recursive: true, force: true });
    }
  });

  test("a new key: copy button, snippets for Claude Code, Claude Desktop/Cursor and curl that work as shown; revoked, its secret leaves the screen and the key is listed as revoked", async () => {
    const { context, page } = await signedIn(mia);
    await page.fill("#key-name", "mia-snippets");
    await page.fill("#key-policy", '{"network": "none", "runtimes": ["bash", "python3.12"]}');
    await page.selectOption("#key-expiry", "30");
    await page.click("#key-create button[type=submit]");
    await page.waitForSelector("#key-secret:not([hidden])");
    const secret = (await page.textContent("#key-secret-value"))!;
    assert.match(secret, /^srk_[0-9a-f]{12}_/);
    const keyId = secret.slice(4, 16);
    await page.waitForSelector(`[data-revoke="${keyId}"]`);
    // Copy puts the secret on the clipboard.
    await page.click('[data-copy="key-secret-value"]');
    assert.equal(await inPage(page, "navigator.clipboard.readText()"), secret);
    // The key table never shows it; only the box with the secret and its snippets does.
    assert.ok(!(await page.textContent("#key-table"))!.includes(secret));
    const listed = (await page.textContent("#key-table"))!;
    assert.match(listed, /mia-snippets/);
    assert.match(listed, /active, expires \d{4}-/);

    // curl, run exactly as shown.
    const curl = (await page.textContent("#snippet-curl"))!;
    assert.ok(curl.startsWith(`curl -sS ${h.api.url}/v1/exec`), curl);
    // (Not spawnSync: the server answering it runs in this process.)
    const ran = await new Promise<string>((resolve, reject) =>
      execFile("sh", ["-c", curl], { timeout: 60_000 }, (e, out, err) =>
        e ? reject(new Error(`${e.message}: ${err}`)) : resolve(out),
      ),
    );
    const answer = JSON.parse(ran) as { stdout: string; exit_reason: string };
    assert.equal(answer.exit_reason, "ok", ran);
    assert.equal(answer.stdout, "42\n");
    // Claude Code's: this server's /mcp, and the header it names is taken there.
    const claude = (await page.textContent("#snippet-claude"))!;
    const m =
      /^claude mcp add --transport http scratchrun (\S+) --header "Authorization: Bearer (\S+)"$/.exec(
        claude,
      );
    assert.ok(m, claude);
    assert.equal(m[1], `${h.api.url}/mcp`);
    assert.equal(await mcpStatus(h.api.url, m[2]!), 200);
    // Claude Desktop's and Cursor's: the package's remote mode, pointed at this server.
    const json = JSON.parse((await page.textContent("#snippet-json"))!) as {
      mcpServers: { scratchrun: { command: string; args: string[]; env: Record<string, string> } };
    };
    assert.deepEqual(json.mcpServers.scratchrun, {
      command: "npx",
      args: ["-y", "scratchrun-mcp"],
      env: { SCRATCHRUN_URL: h.api.url, SCRATCHRUN_API_KEY: secret },
    });

    // At 1280 px every box, the Revoke button of a key with a policy included, is inside its card.
    const wide = await overflow(page, "#keys");
    assert.deepEqual(wide.out, []);
    assert.ok(wide.scroll <= wide.width, `scrollWidth ${wide.scroll} at ${wide.width}`);
    await page.screenshot({ path: join(SHOTS, "key-created.png"), fullPage: true });
    // And at 390 px: rows become cards; nothing leaves the screen, nothing scrolls sideways.
    await page.setViewportSize({ width: 390, height: 800 });
    const phone = await overflow(page, "#keys");
    assert.deepEqual(phone.out, []);
    assert.ok(phone.scroll <= 390, `scrollWidth ${phone.scroll} on a 390 px screen`);
    await page.screenshot({ path: join(SHOTS, "key-created-phone.png"), fullPage: true });
    await page.setViewportSize({ width: 1280, height: 800 });

    // Revoked: the secret and its snippets leave the screen, the key stays listed as revoked.
    page.once("dialog", (d) => void d.accept());
    await page.click(`[data-revoke="${keyId}"]`);
    await page.waitForSelector(`[data-revoke="${keyId}"]`, { state: "detached" });
    await page.waitForSelector("#key-secret", { state: "hidden" });
    assert.ok(!(await inPage<string>(page, "document.body.innerText")).includes(secret));
    assert.match((await page.textContent("#key-table"))!, /mia-snippets.*revoked \d{4}-/s);
    assert.equal((await h.post("/v1/exec", { runtime: "bash", code: "true" }, secret)).status, 401);
    await context.close();
  });

  test("SEC-KEY-EXPIRY: once a key expires, REST, /mcp, its grant's OAuth tokens and their refresh refuse it, and its open session ends", async () => {
    const now = Date.now();
    const k = await h.keys.create("short-lived", null, now, mia.id, null, now + 4000);
    // An OAuth grant of this key, made as the consent page makes it, with its tokens.
    const client = await oauth.register("probe", ["http://127.0.0.1:9/cb"]);
    const request = await oauth.createRequest({
      clientId: client.clientId,
      clientName: "probe",
      redirectUri: "http://127.0.0.1:9/cb",
      state: null,
      codeChallenge: "x".repeat(43),
      resource: `${h.api.url}/mcp`,
      scope: SCOPE,
    });
    const decided = await oauth.decide(request.id, { approve: { userId: mia.id, keyId: k.id } });
    const tokens = await oauth.issue(decided!.request.grantId!);
    const refresh = (token: string) =>
      fetch(`${h.api.url}/oauth/token`, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({
          grant_type: "refresh_token",
          refresh_token: token,
          client_id: client.clientId,
        }),
      });
    // Before: every door opens.
    assert.equal((await h.post("/v1/exec", { runtime: "bash", code: "true" }, k.key)).status, 200);
    assert.equal(await mcpStatus(h.api.url, k.key), 200);
    assert.equal(await mcpStatus(h.api.url, tokens.access_token), 200);
    const refreshed = await refresh(tokens.refresh_token);
    assert.equal(refreshed.status, 200, await refreshed.clone().text());
    const next = (await refreshed.json()) as { access_token: string; refresh_token: string };
    const started = await h.post("/v1/sessions", { runtime: "bash", network: "none" }, k.key);
    assert.equal(started.status, 201, await started.clone().text());
    const sessionId = ((await started.json()) as { session_id: string }).session_id;
    const reason = () =>
      (
        h.db
          .prepare("SELECT end_reason FROM sessions WHERE id_sha256 = ?")
          .get(createHash("sha256").update(sessionId).digest("hex")) as
          { end_reason: string | null } | undefined
      )?.end_reason;
    assert.equal(reason(), null);
    assert.equal(h.engine.sessions.count, 1);

    await new Promise((r) => setTimeout(r, now + 4000 - Date.now() + 50));
    // After: every door refuses it.
    const rest = await h.post("/v1/exec", { runtime: "bash", code: "true" }, k.key);
    assert.equal(rest.status, 401, await rest.clone().text());
    assert.equal(await mcpStatus(h.api.url, k.key), 401);
    assert.equal(await mcpStatus(h.api.url, tokens.access_token), 401);
    assert.equal(await mcpStatus(h.api.url, next.access_token), 401);
    const late = await refresh(next.refresh_token);
    assert.equal(late.status, 400, await late.clone().text());
    // Its session ends (reason policy, as a revoked key's) and its sandbox is gone.
    await waitFor("the expired key's session's end", () => reason() === "policy", 10_000);
    await waitFor("its sandbox gone", () => h.engine.sessions.count === 0, 10_000);
    const cell = await h.post(
      "/v1/exec",
      { runtime: "bash", code: "true", session_id: sessionId },
      k.key,
    );
    assert.equal(cell.status, 401);

    // The console lists it as expired, offers no action on it, and runs nothing as it.
    const { context, page } = await signedIn(mia);
    await until(page, `document.querySelector("#key-table").textContent.includes("short-lived")`);
    assert.match((await page.textContent("#key-table"))!, /short-lived.*expired \d{4}-/s);
    assert.equal(await page.locator(`[data-revoke="${k.id}"]`).count(), 0);
    const exec = await inPage<number>(
      page,
      `(async () => {
        const s = await (await fetch("/v1/console/session")).json();
        const res = await fetch("/v1/console/exec", {
          method: "POST",
          headers: { "X-CSRF-Token": s.csrf_token, "Content-Type": "application/json" },
          body: JSON.stringify({ key_id: ${JSON.stringify(k.id)}, runtime: "bash", code: "true" }),
        });
        return res.status;
      })()`,
    );
    assert.equal(exec, 404);
    await context.close();
  });

  test("SEC-AUDIT: every key, grant and ceiling change made in the console is in the audit log (who, what, when, from where; never a secret), which an admin reads and nobody can change or delete; a member is refused it", async () => {
    const { context, page } = await signedIn(mia);
    const api = (method: string, path: string, body?: unknown) =>
      inPage<{ status: number; body: Record<string, unknown> }>(
        page,
        `(async () => {
          const s = await (await fetch("/v1/console/session")).json();
          const res = await fetch(${JSON.stringify(path)}, {
            method: ${JSON.stringify(method)},
            headers: { "X-CSRF-Token": s.csrf_token, "Content-Type": "application/json" },
            ${body === undefined ? "" : `body: ${JSON.stringify(JSON.stringify(body))},`}
          });
          return { status: res.status, body: await res.json() };
        })()`,
      );
    const made = await api("POST", "/v1/console/keys", { name: "mia-audited" });
    assert.equal(made.status, 201);
    const id = made.body.id as string;
    const secret = made.body.key as string;
    assert.equal(
      (await api("PUT", `/v1/console/keys/${id}/policy`, { network: "none" })).status,
      200,
    );
    assert.equal((await api("DELETE", `/v1/console/keys/${id}`)).status, 200);
    // A member reads no audit log: refused, and the page offers none.
    assert.equal((await api("GET", "/v1/console/audit")).status, 403);
    assert.equal(await page.isVisible("#nav-audit"), false);
    await context.close();

    const admin = await signedIn(ada);
    const ceiling = await inPage<number>(
      admin.page,
      `(async () => {
        const s = await (await fetch("/v1/console/session")).json();
        const res = await fetch("/v1/console/users/${mia.id}/key-ceiling", {
          method: "PUT",
          headers: { "X-CSRF-Token": s.csrf_token, "Content-Type": "application/json" },
          body: JSON.stringify({ max_memory_mb: 512 }),
        });
        return res.status;
      })()`,
    );
    assert.equal(ceiling, 200);
    await admin.page.click("#nav-audit");
    await admin.page.waitForSelector("body[data-view=audit]");
    await until(
      admin.page,
      `document.querySelector("#audit-table").textContent.includes("user.ceiling")`,
    );
    const rows = await inPage<string[][]>(
      admin.page,
      `[...document.querySelectorAll("#audit-table tbody tr")].map((tr) => [...tr.cells].map((td) => td.textContent))`,
    );
    const find = (action: string) =>
      rows.find((r) => r[2] === action && (r[3] === id || action === "user.ceiling"));
    for (const action of ["key.create", "key.policy", "key.revoke"]) {
      const row = find(action);
      assert.ok(row, `${action} in ${JSON.stringify(rows)}`);
      assert.equal(row[1], "mia");
      assert.equal(row[4], "127.0.0.1");
      assert.match(row[0]!, /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/);
    }
    assert.match(find("key.policy")![5]!, /"network":"none"/);
    assert.equal(find("user.ceiling")![1], "ada");
    assert.equal(find("user.ceiling")![3], mia.id);
    // Never a secret: not on the page, not in the table's rows.
    assert.ok(!(await inPage<string>(admin.page, "document.body.innerText")).includes(secret));
    assert.ok(!JSON.stringify(h.db.prepare("SELECT * FROM audit_log").all()).includes(secret));
    // Nothing in the product changes or removes an entry: no such route, for an admin either.
    const before = (h.db.prepare("SELECT COUNT(*) AS n FROM audit_log").get() as { n: number }).n;
    for (const method of ["DELETE", "PUT", "POST"]) {
      const status = await inPage<number>(
        admin.page,
        `(async () => {
          const s = await (await fetch("/v1/console/session")).json();
          return (await fetch("/v1/console/audit", { method: ${JSON.stringify(method)}, headers: { "X-CSRF-Token": s.csrf_token } })).status;
        })()`,
      );
      assert.equal(status, 405, method);
    }
    assert.equal(
      (h.db.prepare("SELECT COUNT(*) AS n FROM audit_log").get() as { n: number }).n,
      before,
    );
    // The page at 1280 and 390 px: every box inside its card, no sideways scroll on the phone.
    const wide = await overflow(admin.page, "#audit");
    assert.deepEqual(wide.out, []);
    await admin.page.screenshot({ path: join(SHOTS, "audit.png"), fullPage: true });
    await admin.page.setViewportSize({ width: 390, height: 800 });
    const phone = await overflow(admin.page, "#audit");
    assert.deepEqual(phone.out, []);
    assert.ok(phone.scroll <= 390, `scrollWidth ${phone.scroll} on a 390 px screen`);
    await admin.context.close();
  });

  test("an expiry in the past, or not a time, is refused before any key is made", async () => {
    const { context, page } = await signedIn(mia);
    const before = (await h.keys.list()).length;
    for (const expires_at of [Date.now() - 1000, "tomorrow", 1.5]) {
      const status = await inPage<number>(
        page,
        `(async () => {
          const s = await (await fetch("/v1/console/session")).json();
          const res = await fetch("/v1/console/keys", {
            method: "POST",
            headers: { "X-CSRF-Token": s.csrf_token, "Content-Type": "application/json" },
            body: JSON.stringify({ name: "bad-expiry", expires_at: ${JSON.stringify(expires_at)} }),
          });
          return res.status;
        })()`,
      );
      assert.equal(status, 400, String(expires_at));
    }
    assert.equal((await h.keys.list()).length, before);
    await context.close();
  });
});
