/**
 * People in the console (issue 55), in Debian's Chromium at 1280 and 390 px on one server: an
 * admin invites someone (a one-time link to copy), the invitee opens it, chooses a password and is
 * signed in as the role given; a password-reset link does the same for a user who exists and
 * signs them out everywhere else; an admin changes a role and removes a person (their keys
 * revoked); each change and each sign-in (refused ones too, with where from) is in the audit log.
 * The links' security: a used one, an expired one, a cancelled one and a forged one open nothing,
 * a member makes none, and the store keeps only their hashes. And the keys page's policy form, with
 * the server's settings and a member's most beside each field.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { Browser, Page } from "playwright-core";
import { INVITE_MS } from "../../src/store/invites.js";
import { UserStore } from "../../src/store/users.js";
import { makeUser } from "../api/oauth-browser.js";
import { startService, type ServiceHarness } from "../api/harness.js";
import { REPO_ROOT } from "../helpers/mcp-client.js";
import { inPage, launchChromium, overflow, signIn, until } from "./chromium.js";

const SHOTS =
  process.env.SCRATCHRUN_SCREENSHOTS === "1"
    ? join(REPO_ROOT, "docs/console")
    : mkdtempSync(join(tmpdir(), "console-people-shots-"));

describe("console people: invites, reset links, roles, removal, sign-ins audited (namespace backend)", () => {
  let h: ServiceHarness;
  let browser: Browser;
  let users: UserStore;
  let ada: { name: string; password: string; id: string };
  let mia: { name: string; password: string; id: string };

  before(async () => {
    mkdirSync(SHOTS, { recursive: true });
    // No sandbox runs here: no pools, no networking.
    h = await startService({}, {}, { SCRATCHRUN_POOL_SIZE: "0", SCRATCHRUN_NETWORK: "none" });
    users = new UserStore(h.db);
    ada = await makeUser(users, "ada", "admin");
    mia = await makeUser(users, "mia");
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
    await h?.close();
    if (process.env.SCRATCHRUN_SCREENSHOTS !== "1") rmSync(SHOTS, { recursive: true, force: true });
  });

  const signedIn = (user: { name: string; password: string }, width = 1280) =>
    signIn(browser, h.api.url, user, width);

  /** A console JSON call from the signed-in page (its cookie and CSRF token). */
  const call = (page: Page, method: string, path: string, body?: unknown) =>
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

  /** Opens a link in a fresh browser and chooses `password`: where it ends, and the page's text. */
  async function accept(link: string, password: string, again = password) {
    const context = await browser.newContext({ viewport: { width: 390, height: 800 } });
    const page = await context.newPage();
    const opened = await page.goto(link);
    if (opened!.status() !== 200)
      return { context, page, status: opened!.status(), text: await page.innerText("body") };
    await page.fill("#password", password);
    await page.fill("#password2", again);
    const [answer] = await Promise.all([
      page.waitForNavigation(),
      page.click("button[type=submit]"),
    ]);
    return { context, page, status: answer!.status(), text: await page.innerText("body") };
  }

  const auditRows = (action: string) =>
    h.db.prepare("SELECT * FROM audit_log WHERE action = ? ORDER BY at").all(action) as {
      actor: string;
      actor_id: string | null;
      address: string | null;
      target: string | null;
      detail: string | null;
    }[];

  test("an admin invites from the People page and copies the link; the invitee chooses a password, is signed in with the role given, and the link works only once", async () => {
    const { context, page } = await signedIn(ada);
    await page.click("#nav-people");
    await page.waitForSelector("body[data-view=people]");
    await page.fill("#invite-name", "zoe");
    await page.selectOption("#invite-role", "member");
    await page.click("#invite-create button[type=submit]");
    await page.waitForSelector("#invite-box:not([hidden])");
    const link = (await page.textContent("#invite-link"))!;
    assert.match(link, new RegExp(`^${h.api.url}/console/invite\\?token=sri_[A-Za-z0-9_-]{43}$`));
    await page.click('[data-copy="invite-link"]');
    assert.equal(await inPage(page, "navigator.clipboard.readText()"), link);
    // Listed as open; the store holds its hash, never the token.
    await until(page, `document.querySelector("#invite-table").textContent.includes("zoe")`);
    const token = new URL(link).searchParams.get("token")!;
    const row = h.db.prepare("SELECT * FROM invites WHERE name = 'zoe'").get() as Record<
      string,
      unknown
    >;
    assert.equal(row.token_sha256, createHash("sha256").update(token).digest("hex"));
    assert.ok(!JSON.stringify(h.db.prepare("SELECT * FROM invites").all()).includes(token));
    assert.ok(!JSON.stringify(h.db.prepare("SELECT * FROM audit_log").all()).includes(token));
    assert.equal(Number(row.expires_at) - Number(row.created_at), INVITE_MS);

    // 1280 and 390 px: the page's boxes stay in its card, nothing scrolls sideways on a phone.
    const wide = await overflow(page, "#people");
    assert.deepEqual(wide.out, []);
    await page.screenshot({ path: join(SHOTS, "people.png"), fullPage: true });
    await page.setViewportSize({ width: 390, height: 800 });
    const phone = await overflow(page, "#people");
    assert.deepEqual(phone.out, []);
    assert.ok(phone.scroll <= 390, `scrollWidth ${phone.scroll} on a 390 px screen`);
    await page.setViewportSize({ width: 1280, height: 800 });

    // Two different passwords: refused, the link still good.
    const differ = await accept(link, "zoe-chosen-password", "zoe-other-password");
    assert.equal(differ.status, 400);
    assert.match(differ.text, /differ/);
    await differ.context.close();
    // The invitee joins at 390 px and lands in the console, signed in as a member.
    const joined = await accept(link, "zoe-chosen-password");
    assert.equal(joined.status, 200, joined.text);
    assert.match(joined.page.url(), /\/console$/);
    await joined.page.waitForSelector("body[data-view=keys]");
    assert.equal(await joined.page.textContent("#who"), "zoe (member)");
    assert.equal(await joined.page.isVisible("#nav-people"), false);
    await joined.context.close();
    assert.equal((await users.signIn("zoe", "zoe-chosen-password")).ok, true);

    // SEC-INVITE-ONCE: used, it opens nothing (the page and the form both), and changes nothing.
    const again = await accept(link, "someone-elses-password");
    assert.equal(again.status, 410);
    assert.match(again.text, /does not work/);
    await again.context.close();
    const replay = await fetch(`${h.api.url}/console/invite`, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        token,
        password: "someone-elses-pw",
        password2: "someone-elses-pw",
      }),
    });
    assert.equal(replay.status, 410);
    assert.equal((await users.signIn("zoe", "someone-elses-pw")).ok, false);
    await context.close();

    const invited = auditRows("user.invite");
    assert.equal(invited.length, 1);
    assert.equal(invited[0]!.actor, "ada");
    assert.equal(invited[0]!.address, "127.0.0.1");
    const joins = auditRows("user.join");
    assert.equal(joins.length, 1);
    assert.equal(joins[0]!.actor, "zoe");
    assert.equal(joins[0]!.address, "127.0.0.1");
  });

  test("SEC-INVITE-REFUSED: an expired, a cancelled and a forged link open nothing; a member makes no invite or reset link and manages nobody", async () => {
    // Expired: a link made 24 h and a moment ago (the store's own clock argument).
    const old = await users.invite("late", "member", ada.id, Date.now() - INVITE_MS - 1000);
    const expired = await accept(
      `${h.api.url}/console/invite?token=${old.token}`,
      "late-chosen-password",
    );
    assert.equal(expired.status, 410);
    await expired.context.close();
    assert.equal(await users.byName("late"), undefined);

    // Cancelled by an admin: gone from the list, opens nothing.
    const { context, page } = await signedIn(ada);
    const made = await call(page, "POST", "/v1/console/invites", { name: "cat", role: "admin" });
    assert.equal(made.status, 201);
    assert.equal((await call(page, "DELETE", `/v1/console/invites/${made.body.id}`)).status, 200);
    const cancelled = await accept(made.body.link as string, "cat-chosen-password");
    assert.equal(cancelled.status, 410);
    await cancelled.context.close();
    assert.equal(await users.byName("cat"), undefined);
    await context.close();

    // Forged: the right shape, not a link anyone made; and not even the shape. A link is open
    // meanwhile, which a forged token must not reach either.
    const open = await users.invite("dan", "admin", ada.id);
    for (const forged of [`sri_${"A".repeat(43)}`, "sri_short", ""]) {
      const r = await fetch(`${h.api.url}/console/invite`, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({
          token: forged,
          password: "forged-password",
          password2: "forged-password",
        }),
      });
      assert.equal(r.status, 410, forged);
    }
    assert.equal(await users.byName("dan"), undefined);
    assert.ok(await users.invites.peek(open.token), "the open link is still good");

    // A member: refused every admin route, nothing made or changed.
    const member = await signedIn(mia);
    const before = (h.db.prepare("SELECT COUNT(*) AS n FROM invites").get() as { n: number }).n;
    const refused = [
      await call(member.page, "POST", "/v1/console/invites", { name: "sneak", role: "admin" }),
      await call(member.page, "GET", "/v1/console/invites"),
      await call(member.page, "POST", `/v1/console/users/${ada.id}/reset-link`),
      await call(member.page, "PUT", `/v1/console/users/${mia.id}/role`, { role: "admin" }),
      await call(member.page, "DELETE", `/v1/console/users/${ada.id}`),
    ];
    assert.deepEqual(
      refused.map((r) => r.status),
      [403, 403, 403, 403, 403],
    );
    assert.equal(
      (h.db.prepare("SELECT COUNT(*) AS n FROM invites").get() as { n: number }).n,
      before,
    );
    assert.equal((await users.byName("mia"))?.role, "member");
    assert.ok(await users.byName("ada"));
    assert.equal(await member.page.isVisible("#nav-people"), false);
    await member.context.close();
  });

  test("an admin resets a password by link (the user is signed out everywhere, then in with the new one), changes a role and removes a person (their keys revoked); not themselves; each is audited", async () => {
    const kim = await makeUser(users, "kim");
    const kimKey = await h.keys.create("kim-laptop", null, Date.now(), kim.id);
    const kimOld = await signedIn(kim);
    const { context, page } = await signedIn(ada);
    await page.click("#nav-people");
    await page.waitForSelector("body[data-view=people]");
    await until(page, `!!document.querySelector('[data-reset="${kim.id}"]')`);
    await page.click(`[data-reset="${kim.id}"]`);
    await until(page, `document.querySelector("#invite-what").textContent.includes("kim")`);
    const link = (await page.textContent("#invite-link"))!;
    const reset = await accept(link, "kim-new-password-1");
    assert.equal(reset.status, 200, reset.text);
    await reset.page.waitForSelector("body[data-view=keys]");
    assert.equal(await reset.page.textContent("#who"), "kim (member)");
    await reset.context.close();
    // The old session is over; only the new password signs in.
    assert.equal((await kimOld.page.request.get(`${h.api.url}/v1/console/session`)).status(), 401);
    await kimOld.context.close();
    assert.equal((await users.signIn("kim", kim.password)).ok, false);
    assert.equal((await users.signIn("kim", "kim-new-password-1")).ok, true);

    // Role: made admin, then member again, from the page.
    await page.reload();
    await page.waitForSelector("body[data-view=people]");
    await until(page, `!!document.querySelector('[data-role="${kim.id}"]')`);
    await page.click(`[data-role="${kim.id}"]`);
    await until(
      page,
      `document.querySelector('[data-role="${kim.id}"]').textContent === "Make member"`,
    );
    assert.equal((await users.byName("kim"))?.role, "admin");
    // Not on oneself: the page offers nothing, the route refuses.
    assert.equal(await page.locator(`[data-role="${ada.id}"]`).count(), 0);
    assert.equal(
      (await call(page, "PUT", `/v1/console/users/${ada.id}/role`, { role: "member" })).status,
      400,
    );
    assert.equal((await call(page, "DELETE", `/v1/console/users/${ada.id}`)).status, 400);
    assert.equal((await users.byName("ada"))?.role, "admin");

    // Remove: their keys stop working.
    page.once("dialog", (d) => void d.accept());
    await page.click(`[data-remove="${kim.id}"]`);
    await page.waitForSelector(`[data-remove="${kim.id}"]`, { state: "detached" });
    assert.equal(await users.byName("kim"), undefined);
    assert.equal(
      (await h.post("/v1/exec", { runtime: "bash", code: "true" }, kimKey.key)).status,
      401,
    );
    await context.close();

    assert.equal(auditRows("user.reset")[0]?.target, kim.id);
    assert.equal(auditRows("user.password")[0]?.actor, "kim");
    assert.equal(auditRows("user.role").length, 1);
    assert.deepEqual(JSON.parse(auditRows("user.role")[0]!.detail!), {
      name: "kim",
      from: "member",
      role: "admin",
    });
    assert.deepEqual(JSON.parse(auditRows("user.remove")[0]!.detail!), {
      name: "kim",
      revoked_keys: [kimKey.id],
    });
  });

  test("SEC-AUDIT-SIGNIN: sign-ins are in the audit log, refused ones too, with where from and never the password; the audit page shows them", async () => {
    const wrong = await fetch(`${h.api.url}/v1/console/session`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ name: "mia", password: "not-mias-password" }),
    });
    assert.equal(wrong.status, 401);
    const failed = auditRows("signin.failed");
    assert.ok(
      failed.some((r) => r.actor === "mia" && r.address === "127.0.0.1" && r.actor_id === null),
    );
    const ok = auditRows("signin");
    assert.ok(
      ok.some((r) => r.actor === "ada" && r.actor_id === ada.id && r.address === "127.0.0.1"),
    );
    const all = JSON.stringify(h.db.prepare("SELECT * FROM audit_log").all());
    for (const secret of ["not-mias-password", ada.password, mia.password, "zoe-chosen-password"])
      assert.ok(!all.includes(secret), secret);

    const { context, page } = await signedIn(ada);
    await page.click("#nav-audit");
    await page.waitForSelector("body[data-view=audit]");
    await until(
      page,
      `document.querySelector("#audit-table").textContent.includes("signin.failed")`,
    );
    const text = (await page.textContent("#audit-table"))!;
    for (const action of ["user.invite", "user.join", "user.remove", "signin"])
      assert.ok(text.includes(action), action);
    await context.close();
  });

  test("SVC-CONSOLE-POLICY-FORM: the policy form shows the server's settings and a member's most, writes the policy it sends, and a change beyond the member's ceiling is refused with its field named", async () => {
    const admin = await signedIn(ada);
    assert.equal(
      (
        await call(admin.page, "PUT", `/v1/console/users/${mia.id}/key-ceiling`, {
          max_memory_mb: 256,
        })
      ).status,
      200,
    );
    await admin.context.close();
    const { context, page } = await signedIn(mia);
    const server = (
      (await call(page, "GET", "/v1/console/session")).body.limits as {
        server: Record<string, unknown>;
      }
    ).server;
    const hintOf = (id: string) =>
      inPage<string>(
        page,
        `document.getElementById(${JSON.stringify(id)}).parentElement.querySelector(".hint").textContent`,
      );
    assert.equal(
      await hintOf("key-policy-fields-max_memory_mb"),
      `server: ${server.max_memory_mb} · your most: 256`,
    );
    assert.equal(
      await hintOf("key-policy-fields-max_timeout_ms"),
      `server: ${server.max_timeout_ms} · your most: ${server.max_timeout_ms}`,
    );
    await page.fill("#key-name", "mia-form");
    await page.check("#key-policy-fields-runtime-bash");
    await page.selectOption("#key-policy-fields-network", "none");
    await page.fill("#key-policy-fields-max_timeout_ms", "5000");
    await page.fill("#key-policy-fields-max_memory_mb", "128");
    const wanted = {
      runtimes: ["bash"],
      network: "none",
      max_timeout_ms: 5000,
      max_memory_mb: 128,
    };
    assert.deepEqual(JSON.parse(await page.inputValue("#key-policy")), wanted);
    // 1280 and 390 px: the form's boxes stay in the card; nothing scrolls sideways.
    assert.deepEqual((await overflow(page, "#keys")).out, []);
    await page.setViewportSize({ width: 390, height: 800 });
    const phone = await overflow(page, "#keys");
    assert.deepEqual(phone.out, []);
    assert.ok(phone.scroll <= 390, `scrollWidth ${phone.scroll} on a 390 px screen`);
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.click("#key-create button[type=submit]");
    await page.waitForSelector("#key-secret:not([hidden])");
    const key = (await h.keys.list()).find((k) => k.name === "mia-form")!;
    assert.deepEqual(key.policy, wanted);

    // The key's own form starts from its policy; a change names only what changed.
    await page.click(`button[data-key="${key.id}"]`);
    await until(
      page,
      `document.getElementById("key-policy-edit-fields-max_memory_mb").value === "128"`,
    );
    // Within the server's most, beyond hers.
    assert.ok(Number(server.max_memory_mb) >= 384, String(server.max_memory_mb));
    await page.fill("#key-policy-edit-fields-max_memory_mb", "384");
    assert.deepEqual(JSON.parse(await page.inputValue("#key-policy-edit")), {
      max_memory_mb: 384,
    });
    await page.click("#key-policy-form button[type=submit]");
    await until(page, `!document.getElementById("flash").hidden`);
    assert.match((await page.textContent("#flash"))!, /max_memory_mb: 384 \(the ceiling is 256\)/);
    assert.deepEqual((await h.keys.list()).find((k) => k.id === key.id)!.policy, wanted);
    // Emptied: back to the server's setting (null), within her ceiling.
    await page.fill("#key-policy-edit-fields-max_memory_mb", "128");
    await page.fill("#key-policy-edit-fields-max_timeout_ms", "");
    assert.deepEqual(JSON.parse(await page.inputValue("#key-policy-edit")), {
      max_timeout_ms: null,
    });
    await page.click("#key-policy-form button[type=submit]");
    await until(
      page,
      `!document.querySelector("#key-table").textContent.includes("max_timeout_ms")`,
    );
    const { max_timeout_ms: _dropped, ...rest } = wanted;
    assert.deepEqual((await h.keys.list()).find((k) => k.id === key.id)!.policy, rest);
    await context.close();
  });
});
