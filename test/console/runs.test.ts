/**
 * Runs as a person reads them in the console (issue 55), in Debian's Chromium at 1280 and 390 px
 * on one server: each row of the runs table opens the run's page, which shows everything recorded
 * about the call (sizes and SHA-256 of its code and output, never the code or output themselves)
 * and its session's record, from which every call of that session is one filter away; another
 * member's run is not found. Every box stays inside its card, nothing scrolls sideways on a phone.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { Browser, Page } from "playwright-core";
import { UserStore } from "../../src/store/users.js";
import { makeUser } from "../api/oauth-browser.js";
import { startService, type ServiceHarness } from "../api/harness.js";
import { REPO_ROOT } from "../helpers/mcp-client.js";
import { inPage, launchChromium, overflow, signIn, until } from "./chromium.js";

const SHOTS =
  process.env.SCRATCHRUN_SCREENSHOTS === "1"
    ? join(REPO_ROOT, "docs/console")
    : mkdtempSync(join(tmpdir(), "console-runs-shots-"));
const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

/** A console GET from the page, on its session cookie: status and body. */
const get = (page: Page, path: string) =>
  inPage<{ status: number; body: Record<string, unknown> }>(
    page,
    `(async () => {
      const res = await fetch(${JSON.stringify(path)});
      return { status: res.status, body: await res.json() };
    })()`,
  );

describe("console runs: a page per run, the session filter (namespace backend)", () => {
  let h: ServiceHarness;
  let browser: Browser;
  let mia: { name: string; password: string; id: string };
  let max: { name: string; password: string; id: string };
  let miaKey: { id: string; key: string };
  let maxRun: string;
  // The code of the run outside the session, and its output (which no page may show).
  const CODE = 'echo "$((6 * 7))-out-$A"';
  const OUTPUT = "42-out-1\n";

  before(async () => {
    mkdirSync(SHOTS, { recursive: true });
    h = await startService();
    const users = new UserStore(h.db);
    mia = await makeUser(users, "mia");
    max = await makeUser(users, "max");
    miaKey = await h.keys.create("mia-ci", null, Date.now(), mia.id);
    const maxKey = await h.keys.create("max-ci", null, Date.now(), max.id);
    const maxRes = await h.post(
      "/v1/exec",
      { runtime: "bash", code: "echo max", network: "none" },
      maxKey.key,
    );
    assert.equal(maxRes.status, 200);
    maxRun = h.runs.all().at(-1)!.id;

    const ran = await h.post(
      "/v1/exec",
      { runtime: "bash", code: CODE, env: { A: "1" }, network: "none" },
      miaKey.key,
    );
    assert.equal(ran.status, 200);
    const result = (await ran.json()) as { stdout: string; stderr: string };
    assert.equal(result.stdout, OUTPUT, JSON.stringify(result));
    // A session of two calls, then closed.
    const started = await h.post("/v1/sessions", { runtime: "bash", network: "none" }, miaKey.key);
    assert.equal(started.status, 201);
    const { session_id } = (await started.json()) as { session_id: string };
    for (const code of ["echo kept > /tmp/f", "cat /tmp/f"]) {
      const r = await h.post("/v1/exec", { runtime: "bash", code, session_id }, miaKey.key);
      assert.equal(r.status, 200);
    }
    const ended = await fetch(`${h.api.url}/v1/sessions/${session_id}`, {
      method: "DELETE",
      headers: { Authorization: `Bearer ${miaKey.key}` },
    });
    assert.equal(ended.status, 200);
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
    await h?.close();
    if (process.env.SCRATCHRUN_SCREENSHOTS !== "1") rmSync(SHOTS, { recursive: true, force: true });
  });

  const signedIn = (user: { name: string; password: string }, width = 1280) =>
    signIn(browser, h.api.url, user, width);

  const view = async (page: Page, hash: string, name = hash) => {
    await inPage(page, `location.hash = ${JSON.stringify(hash)}`);
    await page.waitForSelector(`body[data-view=${name}]`);
  };

  /** The run page's values by column (each <dd> names its column). */
  const shown = (page: Page) =>
    inPage<Record<string, string>>(
      page,
      `Object.fromEntries([...document.querySelectorAll("#run-detail dd[data-col]")].map((d) => [d.dataset.col, d.textContent]))`,
    );

  test("SVC-CONSOLE-RUN: a row opens its run's page, with everything recorded and no code or output; its session's calls are one click away; at 1280 and 390 px nothing leaves its card", async () => {
    const { context, page } = await signedIn(mia);
    await view(page, "runs");
    await page.waitForSelector("#run-table tbody tr");
    assert.equal(await page.locator("#run-table tbody tr").count(), 3, "mia's three calls only");
    const rows = h.runs.all().filter((r) => r.key_id === miaKey.id);
    const [plain, firstCall, secondCall] = rows;

    // The oldest row (the call outside the session) by its link.
    await Promise.all([
      page.waitForSelector("body[data-view=run]"),
      page.click("#run-table tbody tr:last-child a.run-link"),
    ]);
    assert.equal(await inPage(page, "location.hash"), `#run/${plain!.id}`);
    await until(
      page,
      `document.querySelector("#run-detail dd[data-col=id]")?.textContent === ${JSON.stringify(plain!.id)}`,
    );
    const v = await shown(page);
    assert.equal(v.key_id, `mia-ci (${miaKey.id})`);
    assert.equal(v.runtime, "bash");
    assert.equal(v.status, "finished");
    assert.equal(v.exit_reason, "ok");
    assert.equal(v.exit_code, "0");
    assert.equal(v.env_count, "1");
    assert.equal(v.code_bytes, `${Buffer.byteLength(CODE)} bytes`);
    assert.equal(v.code_sha256, sha256(CODE));
    assert.equal(v.stdout_bytes, `${OUTPUT.length} bytes`);
    assert.equal(v.stdout_sha256, sha256(OUTPUT));
    assert.match(v.received_at!, /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/);
    assert.match(v.duration_ms!, /^\d+ ms$/);
    assert.equal(v.session_record, "–");
    // The times the record does not store, worked out from those it does (decision 0021).
    const derived = await inPage<Record<string, string>>(
      page,
      `Object.fromEntries([...document.querySelectorAll("#run-detail dd[data-derived]")].map((d) => [d.dataset.derived, d.textContent]))`,
    );
    const [rec, st, fin, dur] = (
      ["received_at", "started_at", "finished_at", "duration_ms"] as const
    ).map((c) => Number(plain![c]));
    assert.deepEqual(derived, { queued: `${st! - rec!} ms`, around: `${fin! - st! - dur!} ms` });
    // Every column of the record is on the page, and neither the code nor its output.
    assert.deepEqual(Object.keys(v).sort(), Object.keys(plain!).sort());
    const text = (await page.textContent("#run"))!;
    assert.ok(!text.includes("6 * 7") && !text.includes("42-out"), text);
    assert.equal(await page.locator("#run-session-calls").count(), 0);
    const wide = await overflow(page, "#run");
    assert.deepEqual(wide.out, []);
    await page.screenshot({ path: join(SHOTS, "run.png"), fullPage: true });

    // The newest row (the session's second call), by a click on the row itself.
    await view(page, "runs");
    await page.waitForSelector("#run-table tbody tr");
    await Promise.all([
      page.waitForSelector("body[data-view=run]"),
      page.click("#run-table tbody tr:first-child td:nth-child(3)"),
    ]);
    await until(
      page,
      `document.querySelector("#run-detail dd[data-col=id]")?.textContent === ${JSON.stringify(secondCall!.id)}`,
    );
    const s = await shown(page);
    assert.equal(s.session_record, firstCall!.session_record);
    const session = (await page.textContent("#run-detail"))!;
    assert.match(session, /Session.*Calls2/s);
    assert.match(session, /End reasonended/);

    // Every call of that session: the runs page, filtered to it.
    await Promise.all([
      page.waitForSelector("body[data-view=runs]"),
      page.click("#run-session-calls"),
    ]);
    assert.equal(await page.inputValue("#run-session"), secondCall!.session_record);
    await until(page, `document.querySelectorAll("#run-table tbody tr").length === 2`);

    // At 390 px: the run page and the runs table stay on the screen.
    await page.setViewportSize({ width: 390, height: 800 });
    for (const [hash, name] of [
      [`run/${secondCall!.id}`, "run"],
      ["runs", "runs"],
    ] as const) {
      await view(page, hash, name);
      await page.waitForSelector(name === "run" ? "#run-detail dd" : "#run-table tbody tr");
      const phone = await overflow(page, `#${name}`);
      assert.deepEqual(phone.out, []);
      assert.ok(phone.scroll <= 390, `scrollWidth ${phone.scroll} on a 390 px screen (#${name})`);
    }
    await view(page, `run/${plain!.id}`, "run");
    await page.screenshot({ path: join(SHOTS, "run-phone.png"), fullPage: true });
    await context.close();
  });

  test("SEC-CONSOLE-RUN: another member's run, or no run, is not found (404, the same answer); the session filter finds none of another member's calls", async () => {
    const { context, page } = await signedIn(mia);
    const theirs = await get(page, `/v1/console/runs/${maxRun}`);
    const none = await get(page, "/v1/console/runs/00000000-0000-0000-0000-000000000000");
    assert.equal(theirs.status, 404);
    assert.deepEqual(theirs.body, none.body);
    assert.equal(
      (await get(page, `/v1/console/runs/${encodeURIComponent("' OR 1=1 --")}`)).status,
      404,
    );
    await context.close();
    // Nor does the session filter reach another member's session, nor the page their run.
    const session = h.runs.all().find((r) => r.session_record)!.session_record as string;
    const other = await signedIn(max);
    const filtered = await get(other.page, `/v1/console/runs?session=${session}`);
    assert.deepEqual(filtered.body.runs, []);
    const mine = h.runs.all().find((r) => r.session_record)!.id;
    assert.equal((await get(other.page, `/v1/console/runs/${mine}`)).status, 404);
    await other.context.close();
  });

  test("SVC-CONSOLE-USAGE: per key and in total for a chosen period, calls, sandbox- and GB-seconds, peak concurrency and refusals, and a chart per day labelled to today; at 1280 and 390 px nothing leaves its card", async () => {
    const { context, page } = await signedIn(mia);
    await view(page, "usage");
    const today = new Date().toISOString().slice(0, 10);
    assert.equal(await page.inputValue("#usage-to"), today);
    const rows = () =>
      inPage<string[][]>(
        page,
        `[...document.querySelectorAll("#usage-table tbody tr")].map((tr) => [...tr.cells].map((c) => c.textContent))`,
      );
    const mine = h.runs.all().filter((r) => r.key_id === miaKey.id);
    const seconds = mine.reduce((a, r) => a + Number(r.duration_ms), 0) / 1000;
    const [key, total] = await rows();
    assert.deepEqual(key!.slice(0, 2), ["mia-ci", "3"]);
    assert.equal(Number(key![2]), Math.round(seconds * 1000) / 1000);
    assert.ok(Number(key![3]) > 0, "GB-seconds");
    assert.ok(Number(key![4]) >= 1, "peak");
    assert.equal(key![5], "–");
    assert.deepEqual(total!.slice(0, 2), ["Total", "3"]);
    // Max's key is not mia's: not in her table, nor in her total.
    assert.equal((await rows()).length, 2);
    for (const chart of ["#usage-chart", "#usage-compute"]) {
      assert.ok((await page.locator(`${chart} svg rect`).count()) >= 1);
      const labels = await page.locator(`${chart} svg text`).allTextContents();
      assert.equal(labels.at(-1), today.slice(5), "today's bar is labelled");
    }
    assert.deepEqual((await overflow(page, "#usage")).out, []);

    // Another period: nothing in it.
    await page.fill("#usage-from", "2020-01-01");
    await page.fill("#usage-to", "2020-01-07");
    await page.dispatchEvent("#usage-to", "change");
    await until(
      page,
      `document.querySelector("#usage-table tbody tr")?.textContent.startsWith("Total0")`,
    );
    assert.equal(await page.locator("#usage-chart svg rect").count(), 0);
    assert.equal(await page.locator("#usage-chart svg text").last().textContent(), "01-07");
    // A period the server refuses is said so, not drawn.
    await page.fill("#usage-from", "2020-01-08");
    await page.dispatchEvent("#usage-from", "change");
    await until(page, `!document.querySelector("#flash").hidden`);
    assert.match((await page.textContent("#flash"))!, /from must be on or before to/);

    await context.close();

    // On a phone, from the start: the last 14 days again.
    const phoneView = await signedIn(mia, 390);
    await view(phoneView.page, "usage");
    await phoneView.page.waitForSelector("#usage-table tbody tr");
    const phone = await overflow(phoneView.page, "#usage");
    assert.deepEqual(phone.out, []);
    assert.ok(phone.scroll <= 390, `scrollWidth ${phone.scroll} on a 390 px screen`);
    await phoneView.context.close();
  });

  test("the usage API refuses a bad period (not a date, to before from, past 90 days) and names it", async () => {
    const { context, page } = await signedIn(mia);
    for (const [q, message] of [
      ["from=2026-02-30", /from must be a date/],
      ["to=yesterday", /to must be a date/],
      ["from=2026-01-02&to=2026-01-01", /from must be on or before to/],
      ["from=2026-01-01&to=2026-06-01", /at most 90 days/],
      ["days=0", /days must be a whole number/],
    ] as const) {
      const r = await get(page, `/v1/console/usage?${q}`);
      assert.equal(r.status, 400, q);
      assert.match((r.body.error as { message: string }).message, message);
    }
    const ok = await get(page, "/v1/console/usage?from=2026-01-01&to=2026-01-31");
    assert.equal(ok.status, 200);
    assert.deepEqual(
      [ok.body.since, ok.body.until, ok.body.days],
      ["2026-01-01", "2026-01-31", 31],
    );
    await context.close();
  });
});
