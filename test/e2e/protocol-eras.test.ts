import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import {
  assertIcon,
  startModernServer,
  textOf,
  type ExecStructured,
  type ModernHarness,
} from "../helpers/mcp-client.js";

/**
 * The 2026-07-28 revision over stdio, through the v2 SDK's own Client pinned to it (PROTO-ERAS in
 * docs/SPECIFICATION.md). Every other e2e suite drives the 2025-11-25 era with the v1 SDK's
 * Client against the same build, so together they hold both eras on both backends.
 */
const PRODUCT_PAGE_EXAMPLE = [
  "import numpy as np, matplotlib",
  "matplotlib.use('Agg')",
  "import matplotlib.pyplot as plt",
  "x = np.linspace(0, 2 * np.pi, 200)",
  "plt.plot(x, np.sin(x))",
  "plt.savefig('/tmp/plot.png')",
  "print(np.__version__)",
].join("\n");

const SECRET_ENV = { TOKEN: "sk-live-2026-0123456789" };

for (const backend of TEST_BACKENDS) {
  describe(`MCP 2026-07-28 over stdio [${backend}]`, () => {
    let h: ModernHarness;
    let base: HostSnapshot;
    before(async () => {
      base = snapshot();
      h = await startModernServer({ SCRATCHRUN_ISOLATION: backend });
    });
    after(async () => {
      await h?.close();
      await assertNoLeaks(base);
    });

    test("discover, then the same tools; no initialize ran", async () => {
      assert.equal(h.client.getProtocolEra(), "modern");
      assert.equal(h.client.getServerVersion()?.name, "scratchrun");
      assertIcon(h.client.getServerVersion()?.icons);
      const { tools } = await h.client.listTools();
      assert.deepEqual(
        tools.map((t) => t.name),
        [
          "scratchrun_exec",
          "scratchrun_runtimes",
          "scratchrun_session_start",
          "scratchrun_session_end",
        ],
      );
      const exec = tools[0]!;
      assert.equal(exec.annotations?.readOnlyHint, false);
      assert.equal(exec.annotations?.openWorldHint, true);
      assert.ok(exec.outputSchema, "structured results are declared");
    });

    test("the product page's example returns its plot as an image block", async () => {
      const r = await h.call({
        runtime: "python3.12",
        code: PRODUCT_PAGE_EXAMPLE,
        return_files: ["/tmp/plot.png"],
        timeout_ms: 30_000,
      });
      const s = r.structuredContent as unknown as ExecStructured;
      assert.equal(s.exit_code, 0, s.stderr);
      assert.match(s.stdout, /^2\./, "numpy 2.x");
      const image = r.content.find((b) => b.type === "image");
      assert.ok(image && image.type === "image", textOf(r));
      assert.equal(image.mimeType, "image/png");
      assert.equal(Buffer.from(image.data, "base64").subarray(1, 4).toString(), "PNG");
    });

    test("output streams when the request's _meta asks for info, with secrets redacted", async () => {
      const lines: { logger?: string; data: unknown }[] = [];
      h.client.setNotificationHandler("notifications/message", (n) => {
        const { params } = n as { params: { logger?: string; data: unknown } };
        lines.push({ logger: params.logger, data: params.data });
      });
      const code = 'echo "line one"; echo "token=$TOKEN" >&2';
      const env = SECRET_ENV;
      await h.call({ runtime: "bash", code, env });
      assert.equal(lines.length, 0, "nothing streams to a request that did not ask");
      await h.call(
        { runtime: "bash", code, env },
        { _meta: { "io.modelcontextprotocol/logLevel": "info" } },
      );
      const of = (stream: string) =>
        lines
          .filter((l) => l.logger === stream)
          .map((l) => l.data)
          .join("");
      assert.equal(of("stdout"), "line one\n");
      assert.equal(of("stderr"), "token=[redacted:TOKEN]\n");
      assert.doesNotMatch(JSON.stringify(lines), /sk-live-2026/);
    });

    test("without Logging, output comes inside progress messages when _meta asks, redacted", async () => {
      const messages: string[] = [];
      const progress: number[] = [];
      const r = await h.call(
        { runtime: "bash", code: 'echo "line one"; echo "token=$TOKEN" >&2', env: SECRET_ENV },
        {
          _meta: { "dev.scratchrun/output": "progress" },
          onprogress: (p) => {
            messages.push(p.message ?? "");
            progress.push(p.progress);
          },
        },
      );
      assert.equal((r.structuredContent as unknown as ExecStructured).exit_code, 0);
      assert.ok(messages.includes("stdout: line one\n"), messages.join("|"));
      assert.ok(messages.includes("stderr: token=[redacted:TOKEN]\n"), messages.join("|"));
      assert.ok(messages.includes("running"), "the stages still come");
      assert.doesNotMatch(messages.join("|"), /sk-live-2026/);
      for (let i = 1; i < progress.length; i++)
        assert.ok(progress[i]! > progress[i - 1]!, "progress only ever increases");
      const plain: string[] = [];
      await h.call(
        { runtime: "bash", code: 'echo "line one"' },
        { onprogress: (p) => plain.push(p.message ?? "") },
      );
      assert.ok(!plain.some((m) => m.startsWith("stdout:")), "only when asked");
    });

    test("bad input and an own __proto__ key are refused before any sandbox", async () => {
      for (const args of [
        { runtime: "cobol", code: "x" },
        JSON.parse('{"runtime":"bash","code":"echo ran","__proto__":{"network":"none"}}') as object,
      ]) {
        const r = await h.call(args as Record<string, unknown>);
        assert.equal(r.isError, true, JSON.stringify(r.structuredContent));
        assert.match(textOf(r), /^INVALID_INPUT: /);
      }
      await assertNoLeaks(base, 5000, { whileServing: true });
    });

    test("cancelling a call ends its sandbox at once; the server keeps serving", async () => {
      const controller = new AbortController();
      const started = Date.now();
      const call = h.call(
        { runtime: "bash", code: "echo started; sleep 25", timeout_ms: 30_000 },
        { signal: controller.signal },
      );
      setTimeout(() => controller.abort(), 700);
      await assert.rejects(call);
      await assertNoLeaks(base, 5000, { whileServing: true });
      assert.ok(Date.now() - started < 20_000, "the sandbox did not run to its timeout");
      const next = await h.call({ runtime: "bash", code: "echo next" });
      assert.equal((next.structuredContent as unknown as ExecStructured).stdout, "next\n");
    });
  });
}
