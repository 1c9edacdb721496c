/**
 * The web console in a real headless Chromium (Debian's, driven by playwright-core): sign in,
 * create a key, run the product page's example in the playground and see its PNG, revoke a key
 * and see its next call refused, a member who cannot see another member's keys or runs, and the
 * pages' strict CSP with every request the browser made going to this server. Every page is
 * screenshotted; with SCRATCHRUN_SCREENSHOTS=1 the shots replace docs/console/*.png (the README
 * shows them), else they go to a temporary directory, so a test run leaves the checkout as it was.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { UserStore } from "../../src/store/users.js";
import { makeUser } from "../api/oauth-browser.js";
import { startService, type ServiceHarness } from "../api/harness.js";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { REPO_ROOT } from "../helpers/mcp-client.js";
import { inPage, launchChromium, until } from "./chromium.js";

const SHOTS =
  process.env.SCRATCHRUN_SCREENSHOTS === "1"
    ? join(REPO_ROOT, "docs/console")
    : mkdtempSync(join(tmpdir(), "console-shots-"));
const EXAMPLE_PNG_CODE =
  "import matplotlib.pyplot as plt\nimport numpy as np\nx = np.linspace(0, 10, 100)\nplt.plot(x, np.sin(x))\nplt.savefig('/tmp/plot.png')";

interface Answer {
  status: number;
  body: Record<string, unknown> & {
    keys?: { id: string }[];
    runs?: { key_id: string }[];
  };
}

/** A console API call from the page, as its script makes it (the session's CSRF token). */
const call = (page: Page, method: string, path: string, body?: unknown, csrf = true) =>
  inPage<Answer>(
    page,
    `(async () => {
      const s = await (await fetch("/v1/console/session")).json();
      const res = await fetch(${JSON.stringify(path)}, {
        method: ${JSON.stringify(method)},
        headers: {
          ${csrf ? '"X-CSRF-Token": s.csrf_token,' : ""}
          "Content-Type": "application/json",
        },
        ${body === undefined ? "" : `body: ${JSON.stringify(JSON.stringify(body))},`}
      });
      return { status: res.status, body: await res.json() };
    })()`,
  );

describe("console in headless Chromium (namespace backend)", () => {
  let h: ServiceHarness;
  let browser: Browser;
  let users: UserStore;
  let mia: { name: string; password: string; id: string };
  let max: { name: string; password: string; id: string };
  let ada: { name: string; password: string; id: string };
  let maxKey: { id: string; key: string };
  /** Every URL any page of the test asked for. */
  const requested: string[] = [];

  before(async () => {
    mkdirSync(SHOTS, { recursive: true });
    h = await startService();
    users = new UserStore(h.db);
    mia = await makeUser(users, "mia");
    max = await makeUser(users, "max");
    ada = await makeUser(users, "ada", "admin");
    // Another member's key, with a run on record: mia must see neither.
    maxKey = await h.keys.create("max-ci", null, Date.now(), max.id);
    const r = await h.post("/v1/exec", { runtime: "bash", code: "echo max" }, maxKey.key);
    assert.equal(r.status, 200);
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
    await h?.close();
    if (process.env.SCRATCHRUN_SCREENSHOTS !== "1") rmSync(SHOTS, { recursive: true, force: true });
  });

  async function signedIn(user: { name: string; password: string }): Promise<{
    context: BrowserContext;
    page: Page;
  }> {
    const context = await browser.newContext({ viewport: { width: 1000, height: 700 } });
    context.on("request", (r) => requested.push(r.url()));
    const page = await context.newPage();
    await page.goto(`${h.api.url}/console`);
    assert.match(page.url(), /\/console\/signin/);
    await page.fill("#name", user.name);
    await page.fill("#password", user.password);
    await Promise.all([page.waitForURL(/\/console$/), page.click("button[type=submit]")]);
    await page.waitForSelector("body[data-view=keys]");
    return { context, page };
  }

  const view = async (page: Page, name: string) => {
    await inPage(page, `location.hash = ${JSON.stringify(name)}`);
    await page.waitForSelector(`body[data-view=${name}]`);
  };

  test("the console page carries a strict CSP: own script and style only, no inline, no framing", async () => {
    const { context, page } = await signedIn(mia);
    const res = await page.goto(`${h.api.url}/console`);
    const csp = res!.headers()["content-security-policy"]!;
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self'(;|$)/);
    assert.match(csp, /style-src 'self'(;|$)/);
    assert.match(csp, /connect-src 'self'(;|$)/);
    assert.match(csp, /frame-ancestors 'none'/);
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|\*|https?:/);
    assert.equal(res!.headers()["x-frame-options"], "DENY");
    // The browser itself enforces it: an inline script injected into the page does not run.
    const violations: string[] = [];
    page.on("console", (m) => violations.push(m.text()));
    await inPage(
      page,
      `(() => {
        const s = document.createElement("script");
        s.textContent = "document.body.dataset.injected = 'yes'";
        document.body.append(s);
      })()`,
    );
    assert.equal(await inPage(page, `document.body.dataset.injected ?? "no"`), "no");
    await context.close();
  });

  test("sign in, create a key (shown once), run the product page's example and see its PNG, revoke the key and see its next call refused", async () => {
    const { context, page } = await signedIn(mia);
    await page.fill("#key-name", "mia-laptop");
    await page.click("#key-create button[type=submit]");
    await page.waitForSelector("#key-secret:not([hidden])");
    const secret = (await page.textContent("#key-secret-value"))!;
    assert.match(secret, /^srk_[0-9a-f]{12}_/);
    const keyId = secret.slice(4, 16);
    await page.waitForSelector(`[data-revoke="${keyId}"]`);
    await page.screenshot({ path: join(SHOTS, "keys.png") });
    // The secret is only in its box (the key and its snippets): the list shows ids and names.
    assert.equal(
      await inPage(
        page,
        `document.body.innerText.replace(document.querySelector("#key-secret").innerText, "").includes(${JSON.stringify(secret)})`,
      ),
      false,
    );

    await view(page, "playground");
    await page.selectOption("#play-key", keyId);
    await page.selectOption("#play-runtime", "python3.12");
    assert.equal(await page.inputValue("#play-code"), EXAMPLE_PNG_CODE);
    assert.equal(await page.inputValue("#play-return"), "/tmp/plot.png");
    await page.click("#play-run");
    await page.waitForSelector("#play-files-out img", { timeout: 120_000 });
    assert.equal(await page.getAttribute("#play-status", "data-exit"), "ok");
    const size = await inPage<number[]>(
      page,
      `(async () => {
        const i = document.querySelector("#play-files-out img");
        await i.decode();
        return [i.naturalWidth, i.naturalHeight];
      })()`,
    );
    assert.ok(size[0]! > 100 && size[1]! > 100, `the PNG decoded: ${size.join("x")}`);
    await page.screenshot({ path: join(SHOTS, "playground.png"), fullPage: true });
    // The run is recorded under the key the person picked, as any call of that key is.
    const rec = h.runs.all().find((r) => r.key_id === keyId);
    assert.equal(rec?.runtime, "python3.12");
    assert.equal(rec?.exit_reason, "ok");

    // The key works from outside the console too, until it is revoked there.
    const ok = await h.post("/v1/exec", { runtime: "bash", code: "echo hi" }, secret);
    assert.equal(ok.status, 200);
    await view(page, "keys");
    page.once("dialog", (d) => void d.accept());
    await page.click(`[data-revoke="${keyId}"]`);
    await page.waitForSelector(`[data-revoke="${keyId}"]`, { state: "detached" });
    const refused = await h.post("/v1/exec", { runtime: "bash", code: "echo hi" }, secret);
    assert.equal(refused.status, 401);
    await context.close();
  });

  test("runs, usage and health pages show the user's own records and the server's pools and image", async () => {
    const { context, page } = await signedIn(mia);
    await view(page, "runs");
    await page.waitForSelector("#run-table tbody tr");
    const runs = await page.textContent("#run-table");
    assert.match(runs!, /mia-laptop/);
    assert.match(runs!, /python3\.12/);
    assert.doesNotMatch(runs!, /max-ci/);
    await page.selectOption("#run-runtime", "bash");
    await until(page, `!document.querySelector("#run-table").textContent.includes("python3.12")`);
    await page.selectOption("#run-runtime", "");
    await page.screenshot({ path: join(SHOTS, "runs.png") });

    await view(page, "usage");
    assert.ok((await page.locator("#usage-chart svg rect").count()) >= 1);
    assert.match((await page.textContent("#usage-legend"))!, /mia-laptop \(revoked\): 2 calls/);
    await page.screenshot({ path: join(SHOTS, "usage.png") });

    await view(page, "health");
    const health = (await page.textContent("main"))!;
    assert.match(health, /namespace/);
    assert.match(health, /python3\.12 3\.12/);
    await page.click("#health-runtimes details:first-child summary");
    await page.screenshot({ path: join(SHOTS, "health.png") });

    // On a phone the page is one column: nothing is wider than the screen.
    await page.setViewportSize({ width: 390, height: 800 });
    await view(page, "playground");
    const wide = await inPage<number>(page, "document.documentElement.scrollWidth");
    assert.ok(wide <= 390, `scrollWidth ${wide} on a 390 px screen`);
    await page.screenshot({ path: join(SHOTS, "phone.png") });
    await context.close();
  });

  test("a member cannot see, revoke, run as or read the runs of another member's key", async () => {
    const { context, page } = await signedIn(mia);
    const keys = await call(page, "GET", "/v1/console/keys");
    assert.ok(!keys.body.keys!.some((k) => k.id === maxKey.id));
    assert.equal((await call(page, "GET", `/v1/console/runs?key_id=${maxKey.id}`)).status, 404);
    const all = await call(page, "GET", "/v1/console/runs?limit=200");
    assert.ok(!all.body.runs!.some((r) => r.key_id === maxKey.id));
    assert.equal((await call(page, "GET", `/v1/console/keys/${maxKey.id}/grants`)).status, 404);
    assert.equal((await call(page, "DELETE", `/v1/console/keys/${maxKey.id}`)).status, 404);
    assert.equal(
      (await call(page, "PUT", `/v1/console/keys/${maxKey.id}/policy`, { network: "none" })).status,
      404,
    );
    const before = h.runs.all().length;
    const exec = await call(page, "POST", "/v1/console/exec", {
      key_id: maxKey.id,
      runtime: "bash",
      code: "echo as-max",
    });
    assert.equal(exec.status, 404);
    assert.equal(h.runs.all().length, before, "nothing ran as max's key");
    // max's key is untouched: still active, its policy unchanged.
    const still = await h.post("/v1/exec", { runtime: "bash", code: "true" }, maxKey.key);
    assert.equal(still.status, 200);
    assert.equal((await h.keys.list()).find((k) => k.id === maxKey.id)?.policy, null);
    await context.close();
  });

  test("a console write without the CSRF token is refused and runs nothing; a bad policy is refused with its field named", async () => {
    const mine = await h.keys.create("mia-ci", null, Date.now(), mia.id);
    const { context, page } = await signedIn(mia);
    const before = h.runs.all().length;
    const run = { key_id: mine.id, runtime: "bash", code: "echo x" };
    const noToken = await call(page, "POST", "/v1/console/exec", run, false);
    assert.equal(noToken.status, 403);
    assert.equal(h.runs.all().length, before);
    // The policy form: the same parser as `scratchrun keys update`; a bad value names its field.
    await page.click(`[data-key="${mine.id}"]`);
    await page.fill("#key-policy-edit", '{"max_timeout_ms": 5}');
    await page.click("#key-policy-form button[type=submit]");
    await page.waitForSelector("#flash:not([hidden])");
    assert.match((await page.textContent("#flash"))!, /max_timeout_ms/);
    await page.fill("#key-policy-edit", '{"network": "none", "runtimes": ["bash"]}');
    await page.click("#key-policy-form button[type=submit]");
    await until(
      page,
      `document.querySelector("#key-table").textContent.includes('"network":"none"')`,
    );
    const k = (await h.keys.list()).find((x) => x.id === mine.id);
    assert.deepEqual(k?.policy, { runtimes: ["bash"], network: "none" });
    // Held to it at once: the playground's run as this key in python is refused before it runs.
    const refused = await call(page, "POST", "/v1/console/exec", {
      ...run,
      runtime: "python3.12",
      code: "print(1)",
    });
    assert.equal(refused.status, 400);
    assert.equal(h.runs.all().length, before, "nothing ran");
    // With the token, the same call runs (the 403 above was the missing token, nothing else).
    assert.equal((await call(page, "POST", "/v1/console/exec", run)).status, 200);
    await context.close();
  });

  test("an admin sees every member's keys", async () => {
    const { context, page } = await signedIn(ada);
    const text = (await page.textContent("#key-table"))!;
    assert.match(text, /max-ci/);
    assert.match(text, /mia-ci/);
    await context.close();
  });

  test("every request any page made went to this server (no CDN, font or other origin)", () => {
    assert.ok(requested.length > 20, `${requested.length} requests seen`);
    const origin = new URL(h.api.url).origin;
    const elsewhere = requested.filter(
      (u) => !u.startsWith(`${origin}/`) && !u.startsWith("blob:"),
    );
    assert.deepEqual(elsewhere, []);
  });
});

describe(
  "console playground on the microVM backend",
  { skip: !TEST_BACKENDS.includes("microvm") },
  () => {
    let h: ServiceHarness;
    let browser: Browser;

    before(async () => {
      h = await startService({}, {}, { SCRATCHRUN_ISOLATION: "microvm" });
      browser = await launchChromium();
    });

    after(async () => {
      await browser?.close();
      await h?.close();
    });

    test("the product page's example runs in a microVM from the playground and its PNG shows", async () => {
      const users = new UserStore(h.db);
      const vic = await makeUser(users, "vic");
      const key = await h.keys.create("vic-vm", null, Date.now(), vic.id);
      const context = await browser.newContext({ viewport: { width: 1000, height: 700 } });
      const page = await context.newPage();
      await page.goto(`${h.api.url}/console/signin`);
      await page.fill("#name", vic.name);
      await page.fill("#password", vic.password);
      await Promise.all([page.waitForURL(/\/console$/), page.click("button[type=submit]")]);
      // The console has shown its first view (its start read the session and the health of a
      // server busy building templates under TCG) before the hash moves it to the playground.
      await page.waitForSelector("body[data-view]", { state: "attached", timeout: 120_000 });
      await inPage(page, `location.hash = "playground"`);
      await page.waitForSelector("body[data-view=playground]");
      await page.selectOption("#play-key", key.id);
      await page.selectOption("#play-runtime", "python3.12");
      // A fresh microVM server first boots its templates (seconds of TCG, and the pre-imported
      // python3.12's imports): a call before they are pooled meets the 10 s default in a cold
      // boot. Wait for the pools, as the e2e suites do; what the first calls cost is the bench's.
      const pooled = (h.engine.backend as { pool?: { whenFull(): Promise<void> } }).pool;
      assert.ok(pooled, "the microVM backend has a pool");
      await pooled.whenFull();
      await page.click("#play-run");
      // The run ends one way or another within its timeout: say how, not a selector's timeout.
      await page.waitForSelector("#play-status[data-exit], #flash:not([hidden])", {
        timeout: 120_000,
      });
      const status = await page.textContent("#play-status");
      const why = `${status} | stderr: ${await page.textContent("#play-stderr")} | ${await page.textContent("#flash")}`;
      assert.equal(await page.getAttribute("#play-status", "data-exit"), "ok", why);
      await page.waitForSelector("#play-files-out img", { timeout: 10_000 });
      assert.match((await page.textContent("#play-status"))!, /isolation microvm-(kvm|tcg)/);
      const size = await inPage<number[]>(
        page,
        `(async () => {
        const i = document.querySelector("#play-files-out img");
        await i.decode();
        return [i.naturalWidth, i.naturalHeight];
      })()`,
      );
      assert.ok(size[0]! > 100 && size[1]! > 100, `the PNG decoded: ${size.join("x")}`);
      await context.close();
    });
  },
);
