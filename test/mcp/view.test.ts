/**
 * The result view (MCP Apps) in Debian's Chromium, driven by playwright-core, against a host page
 * of ours that speaks the extension's messages through a sandbox proxy on another origin
 * (view-host.ts). The results are a real server's (namespace backend: the view renders what any
 * backend answers): a session's two python cells, the second with a figure, a DataFrame, stderr,
 * a returned HTML file and markup aimed at the page (`<script>`, `onerror=`, `javascript:`), and
 * the session's end; and one hand-made result for what a test server does not produce (an egress
 * allowlist's refusals, a timeout, cut streams, long unbroken lines). VIEW-SAFE: nothing the
 * sandbox made runs: a flag each payload would set stays unset in the view, the proxy and the
 * host, the host gets no tools/call, and the view's DOM holds no element with an event handler
 * attribute, no script but its own and no javascript: link. VIEW-LAYOUT: each view is
 * screenshotted (SCRATCHRUN_SCREENSHOTS=1 keeps them in docs/view/) and no element sits outside
 * its container. VIEW-META: tools/list names the view and resources/read serves it.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { Browser, Frame, Page } from "playwright-core";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { launchChromium, until } from "../console/chromium.js";
import { REPO_ROOT } from "../helpers/mcp-client.js";
import { serverForSuite } from "../helpers/suite.js";
import { startViewHost, type ViewHost } from "./view-host.js";

const SHOTS =
  process.env.SCRATCHRUN_SCREENSHOTS === "1"
    ? join(REPO_ROOT, "docs/view")
    : mkdtempSync(join(tmpdir(), "view-shots-"));

const VIEW_URI = "ui://scratchrun/result.html";
const MIME = "text/html;profile=mcp-app";

/** Markup a program prints or shows, each piece setting a flag if it ever ran. */
const CALL_TOOL = `parent.postMessage({jsonrpc:'2.0',id:77,method:'tools/call',params:{name:'scratchrun_exec',arguments:{runtime:'bash',code:'id'}}},'*')`;
const EVIL_HTML = `<img src=x onerror="window.__pwned=1;${CALL_TOOL}"><script>window.__pwned=2</script><a href="javascript:window.__pwned=3">a link</a>`;
const EVIL_STDOUT = `<script>window.__pwned=4</script><a id=evil href="javascript:window.__pwned=5">click</a>`;
const EVIL_STDERR = `warning: <img src=x onerror="window.__pwned=6;${CALL_TOOL}">`;
const EVIL_FILE = `<!doctype html><script>window.__pwned=7</script><p>a report</p>`;

const CELL_ONE = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nprint('cell one')";
const CELL_TWO = [
  "import sys, json",
  "import pandas as pd",
  "import matplotlib.pyplot as plt",
  "class Evil:",
  `    def _repr_html_(self):\n        return ${JSON.stringify(EVIL_HTML)}`,
  `print(${JSON.stringify(EVIL_STDOUT)})`,
  `print(${JSON.stringify(EVIL_STDERR)}, file=sys.stderr)`,
  "display(Evil())",
  `open('/tmp/report.html', 'w').write(${JSON.stringify(EVIL_FILE)})`,
  "plt.figure()",
  "plt.bar(['a', 'b', 'c'], [3, 1, 2])",
  `df = pd.DataFrame({'name': [${JSON.stringify('<img src=x onerror="window.__pwned=8">')}, 'javascript:window.__pwned=9'], 'n': [1, 2]})`,
  "df",
].join("\n");

/** A result a test server cannot make: refusals, a timeout, streams cut, lines with no breaks. */
function handMade(): CallToolResult {
  const long = "x".repeat(3000);
  const structured = {
    stdout: `start\n${long}\n[... 123456 bytes omitted ...]\nend\n`,
    stderr: `Traceback: ${"y".repeat(2000)}\n`,
    exit_code: null,
    exit_reason: "timeout",
    signal: null,
    duration_ms: 10012,
    isolation: "namespace",
    network: "public",
    stdout_truncated: true,
    stderr_truncated: false,
    stdout_omitted_bytes: 123456,
    stderr_omitted_bytes: 0,
    files: [
      {
        path: `/tmp/${"deep/".repeat(30)}out.bin`,
        status: "too_large",
        size_bytes: 9_000_000,
        mime_type: "application/octet-stream",
      },
    ],
    message: `The code ran past timeout_ms=10000 and was stopped. ${"z".repeat(400)}`,
    network_refused: [
      { host: "pypi.org", port: 443, reason: "not_allowed", count: 3 },
      { host: null, port: 80, reason: "no_name", count: 1 },
    ],
    network_refused_omitted: 2,
  };
  return {
    content: [{ type: "text", text: "(the text block)" }],
    structuredContent: structured,
    isError: false,
  };
}

describe("VIEW: the MCP Apps result view in Chromium (namespace)", () => {
  const h = serverForSuite("namespace");
  let browser: Browser;
  let host: ViewHost;
  let page: Page;
  let html = "";
  let tools: { name: string; _meta?: Record<string, unknown> }[] = [];
  const requested: string[] = [];

  before(async () => {
    mkdirSync(SHOTS, { recursive: true });
    host = await startViewHost();
    browser = await launchChromium();
    page = await browser.newPage({ viewport: { width: 760, height: 900 } });
    page.on("request", (r) => requested.push(r.url()));
    await page.goto(host.url);
  });

  after(async () => {
    await browser?.close();
    await host?.close();
  });

  /** Shows one result in a new view and waits until it has rendered and sized itself. */
  async function show(
    id: string,
    tool: string,
    args: Record<string, unknown>,
    result: CallToolResult,
  ): Promise<Frame> {
    const definition = tools.find((t) => t.name === tool);
    await page.evaluate(
      ([id, html, definition, args, result]) =>
        (globalThis as unknown as { __show: (...a: unknown[]) => void }).__show(
          id,
          html,
          definition,
          args,
          result,
        ),
      [id, html, definition, args, result] as const,
    );
    const outer = await (await page.$(`#${id}`))?.contentFrame();
    assert.ok(outer, "the proxy's frame");
    await until(page, `window.__host.initialized[${JSON.stringify(id)}] === true`);
    let view: Frame | undefined;
    const deadline = Date.now() + 30_000;
    while (!(view = outer.childFrames()[0]) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    assert.ok(view, "the view's frame");
    const rendered = async () =>
      (await view.evaluate("document.querySelector('#root .verdict') !== null")) as boolean;
    while (!(await rendered())) {
      if (Date.now() > deadline) throw new Error(`view ${id} never rendered`);
      await new Promise((r) => setTimeout(r, 50));
    }
    await until(
      page,
      `(window.__host.sized[${JSON.stringify(id)}]?.height ?? 0) > 60 && Math.abs(document.getElementById(${JSON.stringify(id)}).getBoundingClientRect().height - 2 - window.__host.sized[${JSON.stringify(id)}].height) < 2`,
    );
    return view;
  }

  /** What must hold in every view: nothing the sandbox made is markup, nothing ran. */
  async function assertInert(view: Frame, id: string): Promise<void> {
    const dom = (await view.evaluate(`(() => {
      const all = [...document.querySelectorAll("*")];
      return {
        handlers: all.flatMap((e) => [...e.attributes].filter((a) => /^on/i.test(a.name)).map((a) => e.tagName + " " + a.name)),
        scripts: document.scripts.length,
        jsLinks: [...document.querySelectorAll("a[href], [src], [href]")].filter((e) => /^\\s*javascript:/i.test(e.getAttribute("href") ?? e.getAttribute("src") ?? "")).length,
        links: document.querySelectorAll("a").length,
        frames: document.querySelectorAll("iframe, object, embed").length,
        pwned: window.__pwned ?? null,
      };
    })()`)) as {
      handlers: string[];
      scripts: number;
      jsLinks: number;
      links: number;
      frames: number;
      pwned: unknown;
    };
    assert.deepEqual(dom.handlers, [], `${id}: no element carries an event handler attribute`);
    assert.equal(dom.scripts, 1, `${id}: the view's own script only`);
    assert.equal(dom.jsLinks, 0, `${id}: no javascript: URL`);
    assert.equal(dom.links, 0, `${id}: the view makes no links of what it shows`);
    assert.equal(dom.frames, 0, `${id}: no frame or plugin`);
    assert.equal(dom.pwned, null, `${id}: no payload ran in the view`);
    const proxy = view.parentFrame();
    assert.equal(await proxy?.evaluate("window.__pwned ?? null"), null, `${id}: nor in the proxy`);
    assert.equal(await page.evaluate("window.__pwned ?? null"), null, `${id}: nor in the host`);
    assert.deepEqual(
      await page.evaluate("window.__host.toolCalls"),
      [],
      `${id}: the view called no tool`,
    );
  }

  /** Every element inside its container (scroll boxes hold theirs), and no sideways page. */
  async function assertLaidOut(view: Frame, id: string): Promise<void> {
    // Every collapsed part open (the code, a file's contents, earlier cells): all of it is checked.
    await view.evaluate(`document.querySelectorAll("details").forEach((d) => { d.open = true; })`);
    await new Promise((r) => setTimeout(r, 300));
    const problems = (await view.evaluate(`(() => {
      const out = [];
      const root = document.documentElement;
      if (root.scrollWidth > root.clientWidth + 1) out.push("the page scrolls sideways: " + root.scrollWidth + " > " + root.clientWidth);
      const clips = (e) => { const s = getComputedStyle(e); return s.overflowX !== "visible" || s.overflowY !== "visible"; };
      const name = (e) => e.tagName.toLowerCase() + (e.className ? "." + String(e.className).replace(/ /g, ".") : "");
      for (const e of document.body.querySelectorAll("*")) {
        const r = e.getBoundingClientRect();
        if (e.tagName === "SCRIPT" || r.width === 0 || r.height === 0) continue;
        // A closed details lays out what it hides (content-visibility), and shows only its summary.
        const closed = e.closest("details:not([open])");
        if (closed && !e.closest("summary")) continue;
        let inScroller = false;
        for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) if (clips(a)) inScroller = true;
        if (inScroller) continue;
        if (r.left < -0.5 || r.right > root.clientWidth + 0.5) out.push(name(e) + " leaves the page: " + r.left + ".." + r.right);
        const p = e.parentElement;
        if (!p || p === document.body || getComputedStyle(p).display === "inline") continue;
        const q = p.getBoundingClientRect();
        if (r.left < q.left - 1 || r.right > q.right + 1 || r.top < q.top - 1 || r.bottom > q.bottom + 1)
          out.push(name(e) + " outside " + name(p) + ": " + [r.left, r.top, r.right, r.bottom].map(Math.round) + " in " + [q.left, q.top, q.right, q.bottom].map(Math.round));
      }
      return out;
    })()`)) as string[];
    assert.deepEqual(problems, [], `${id}: every element inside its container`);
    await (await page.$(`#${id}`))?.screenshot({ path: join(SHOTS, `${id}.png`) });
  }

  let sessionId = "";
  const results: Record<string, { args: Record<string, unknown>; result: CallToolResult }> = {};

  test("VIEW-META: the tools name the view (model-only), the size is declared, resources/read serves it", async () => {
    ({ tools } = (await h.client.listTools()) as unknown as { tools: typeof tools });
    const byName = Object.fromEntries(tools.map((t) => [t.name, t._meta]));
    for (const name of ["scratchrun_exec", "scratchrun_session_start", "scratchrun_session_end"])
      assert.deepEqual(
        byName[name]?.ui,
        { resourceUri: VIEW_URI, visibility: ["model"] },
        `${name} names the view`,
      );
    assert.equal(byName.scratchrun_exec?.["anthropic/maxResultSizeChars"], 500_000);
    const listed = await h.client.listResources();
    assert.deepEqual(
      listed.resources.map((r) => [r.uri, r.mimeType]),
      [[VIEW_URI, MIME]],
    );
    const read = await h.client.readResource({ uri: VIEW_URI });
    const content = read.contents[0] as { uri: string; mimeType: string; text: string };
    assert.equal(content.mimeType, MIME);
    html = content.text;
    const csp =
      /<meta http-equiv="Content-Security-Policy" content="([^"]+)"/.exec(html)?.[1] ?? "";
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'sha256-[A-Za-z0-9+/=]+';/, "its one script, by hash");
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|https?:|\*/, "no origin, nothing inline");
    assert.doesNotMatch(
      html,
      /<script[^>]+src=|<link|@import|https?:\/\//i,
      "nothing loaded from anywhere",
    );
    await assert.rejects(h.client.readResource({ uri: "ui://scratchrun/other.html" }), /not found/);
  });

  test("a session's cells run for real: a figure; then a figure, a table, stderr, a file and markup", async () => {
    const start = await h.client.callTool({
      name: "scratchrun_session_start",
      arguments: { runtime: "python3.12" },
    });
    sessionId = (start.structuredContent as { session_id: string }).session_id;
    results.start = { args: { runtime: "python3.12" }, result: start as CallToolResult };
    const one = { runtime: "python3.12", session_id: sessionId, code: CELL_ONE };
    results.one = { args: one, result: await h.call(one) };
    const two = {
      runtime: "python3.12",
      session_id: sessionId,
      code: CELL_TWO,
      return_files: ["/tmp/report.html"],
    };
    results.two = { args: two, result: await h.call(two) };
    const s = results.two.result.structuredContent as {
      stderr: string;
      outputs: { type: string; data?: { mime_type: string }[] }[];
    };
    assert.match(s.stderr, /onerror/);
    const shown = s.outputs.filter((o) => o.type !== "stream");
    assert.deepEqual(
      shown.map((o) => o.type),
      ["display", "result", "display"],
    );
    assert.ok(
      shown[0]?.data?.some((f) => f.mime_type === "text/html"),
      "the HTML form",
    );
    assert.equal(shown[1]?.data?.[0]?.mime_type, "text/markdown", "the DataFrame's table");
    assert.equal(shown[2]?.data?.[0]?.mime_type, "image/png", "the figure left open");
    const end = await h.client.callTool({
      name: "scratchrun_session_end",
      arguments: { session_id: sessionId },
    });
    results.end = { args: { session_id: sessionId }, result: end as CallToolResult };
  });

  test("VIEW-RENDER: the first cell: its verdict, stdout and figure", async () => {
    const view = await show("cell1", "scratchrun_exec", results.one!.args, results.one!.result);
    const seen = (await view.evaluate(`({
      badge: document.querySelector(".badge").textContent,
      stdout: document.querySelector("pre.stdout")?.textContent,
      images: [...document.querySelectorAll(".output img")].map((i) => [i.src.slice(0, 22), i.naturalWidth > 100]),
      meta: document.querySelector(".verdict .meta").textContent,
    })`)) as { badge: string; stdout: string; images: [string, boolean][]; meta: string };
    assert.equal(seen.badge, "exit 0");
    assert.equal(seen.stdout, "cell one\n");
    assert.deepEqual(seen.images, [["data:image/png;base64,", true]]);
    assert.match(seen.meta, /session cell 1, interpreter fresh/);
    await assertInert(view, "cell1");
    await assertLaidOut(view, "cell1");
  });

  test("VIEW-RENDER, VIEW-SAFE: the second cell: image, table, stderr and file as text; no markup runs; earlier cell shown", async () => {
    const view = await show("cell2", "scratchrun_exec", results.two!.args, results.two!.result);
    const seen = (await view.evaluate(`({
      stdout: document.querySelector(".current pre.stdout").textContent,
      stderr: document.querySelector(".current pre.stderr").textContent,
      head: [...document.querySelectorAll(".current table th")].map((e) => e.textContent),
      cells: [...document.querySelectorAll(".current table td")].map((e) => e.textContent),
      images: document.querySelectorAll(".current .output img").length,
      html: [...document.querySelectorAll(".current .output pre")].map((e) => e.textContent),
      file: document.querySelector(".current .file .name").textContent,
      fileText: document.querySelector(".current .file details pre").textContent,
      earlier: [...document.querySelectorAll("details > summary")].map((e) => e.textContent),
    })`)) as {
      stdout: string;
      stderr: string;
      head: string[];
      cells: string[];
      images: number;
      html: string[];
      file: string;
      fileText: string;
      earlier: string[];
    };
    assert.equal(seen.stdout, `${EVIL_STDOUT}\n`, "stdout is its text, markup and all");
    assert.equal(seen.stderr, `${EVIL_STDERR}\n`);
    assert.deepEqual(seen.head, ["", "name", "n"]);
    assert.deepEqual(seen.cells, [
      "0",
      '<img src=x onerror="window.__pwned=8">',
      "1",
      "1",
      "javascript:window.__pwned=9",
      "2",
    ]);
    assert.equal(seen.images, 1, "the figure");
    assert.ok(
      seen.html.includes(EVIL_HTML),
      "the HTML form is shown as its source (its repr is the default one)",
    );
    assert.equal(seen.file, "/tmp/report.html");
    assert.equal(seen.fileText, EVIL_FILE);
    assert.ok(
      seen.earlier.some((s) => /^cell 1 \(python3\.12, exit 0\)$/.test(s)),
      `the first cell, as this client holds it: ${seen.earlier}`,
    );
    // Links the page would have made of javascript: URLs are clicked: none exist, nothing runs.
    for (const a of await view.$$("a")) await a.click();
    // The file downloads through the host (ui/download-file), its bytes as they came.
    await (await view.$(".current .file button"))?.click();
    await until(page, "window.__host.downloads.length === 1");
    const [download] = (await page.evaluate("window.__host.downloads")) as {
      contents: { type: string; resource: { uri: string; text: string } }[];
    }[];
    assert.equal(download?.contents[0]?.resource.uri, "file:///tmp/report.html");
    assert.equal(download?.contents[0]?.resource.text, EVIL_FILE);
    // Earlier cells open: their outputs are text too.
    for (const d of await view.$$("details > summary")) await d.click();
    await new Promise((r) => setTimeout(r, 300));
    await assertInert(view, "cell2");
    await assertLaidOut(view, "cell2");
  });

  test("VIEW-RENDER: the session's end shows the cells this client holds", async () => {
    const view = await show(
      "end",
      "scratchrun_session_end",
      results.end!.args,
      results.end!.result,
    );
    const seen = (await view.evaluate(`({
      badge: document.querySelector(".badge").textContent,
      cells: [...document.querySelectorAll("details > summary")].map((e) => e.textContent),
    })`)) as { badge: string; cells: string[] };
    assert.equal(seen.badge, "session ended");
    assert.deepEqual(seen.cells, ["cell 1 (python3.12, exit 0)", "cell 2 (python3.12, exit 0)"]);
    for (const d of await view.$$("details > summary")) await d.click();
    await new Promise((r) => setTimeout(r, 300));
    await assertInert(view, "end");
    await assertLaidOut(view, "end");
  });

  test("VIEW-RENDER: a timeout with refusals, cut streams and long lines stays inside its page", async () => {
    const view = await show(
      "refused",
      "scratchrun_exec",
      { runtime: "python3.12", code: "import urllib.request" },
      handMade(),
    );
    const seen = (await view.evaluate(`({
      badge: document.querySelector(".badge").textContent,
      refused: [...document.querySelectorAll(".refused li")].map((e) => e.textContent),
      file: document.querySelector(".file .meta").textContent,
    })`)) as { badge: string; refused: string[]; file: string };
    assert.equal(seen.badge, "timeout");
    assert.deepEqual(seen.refused, [
      "pypi.org:443 · not allowed · 3×",
      "(no name):80 · no name",
      "and 2 more",
    ]);
    assert.match(seen.file, /not returned: too_large/);
    await assertInert(view, "refused");
    await assertLaidOut(view, "refused");
  });

  test("the views asked for nothing: every request was the host's or the proxy's page", () => {
    const ours = requested.filter((u) => !u.startsWith("data:"));
    for (const u of ours) assert.match(u, /^http:\/\/127\.0\.0\.1:\d+\/(host|proxy)\.html$/, u);
    assert.deepEqual(
      host.requested.filter((p) => !/\/(host|proxy)\.html$/.test(p)),
      [],
    );
  });
});
