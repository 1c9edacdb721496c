// OUT-*: results the way a code interpreter shows them (docs/decisions/0017-outputs.md), through a
// real MCP client over stdio, on each backend, in fresh calls and sessions, on python3.11 and the
// product page's python3.12: plt.show() and the figures a call leaves open come back as image
// blocks in order with what was printed around them; a session cell's last expression and
// display() mid-cell, in order; a Python exception as an `error` output; a figure bomb bounded and
// what it left out named; the product page's example unchanged. One server per backend.
import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { textOf } from "../helpers/mcp-client.js";
import { PY } from "../helpers/pythons.js";
import { serverForSuite } from "../helpers/suite.js";

interface Form {
  mime_type: string;
  size_bytes: number;
  text?: string;
}
type Output =
  | { type: "stream"; name: string; size_bytes: number }
  | { type: "display" | "result"; data: Form[] }
  | { type: "error"; ename: string; evalue: string; traceback: string };
interface Result {
  stdout: string;
  stderr: string;
  exit_reason: string;
  outputs: Output[];
  outputs_left_out?: { count: number; names: string[] };
  files: { path: string; status: string }[];
}

/** The outputs as short words: "stdout 2", "display image/png", "result text/markdown", "error X". */
const shape = (r: Result) =>
  r.outputs.map((o) =>
    o.type === "stream"
      ? `${o.name} ${o.size_bytes}`
      : o.type === "error"
        ? `error ${o.ename}`
        : `${o.type} ${o.data[0]?.mime_type}`,
  );
const images = (r: CallToolResult) => r.content.filter((b) => b.type === "image");
const PNG = /^iVBORw0KGgo/; // base64 of the PNG signature

/** The product page's runtime always, and the matrix's Python when it differs. */
const PYTHONS = [...new Set([PY, "python3.12"])];

// Small figures: under TCG a figure costs its pixels (docs/decisions/0017-outputs.md).
const SHOW_TWO = [
  "import matplotlib.pyplot as plt",
  "print('before')",
  "plt.figure(figsize=(2, 1.5)); plt.plot([1, 2, 3]); plt.show()",
  "print('between')",
  "plt.figure(figsize=(2, 1.5)); plt.plot([3, 2, 1])",
  "print('end')",
].join("\n");

for (const backend of TEST_BACKENDS) {
  describe(`outputs as a code interpreter shows them [${backend}]`, () => {
    const mcp = serverForSuite(backend);
    // On a settled server: a microVM server still restoring and warming its pools under TCG
    // shares the host's two cores with the calls (OUT-BOMB's 10 s are the call's own work).
    before(async () => {
      for (let i = 0; i < 600 && !/every warm pool full/.test(mcp.stderr()); i++) await sleep(500);
    });
    const run = async (args: Record<string, unknown>) => {
      const result = await mcp.call({ timeout_ms: 30_000, ...args });
      assert.ok(!result.isError, textOf(result));
      return { result, s: result.structuredContent as unknown as Result };
    };
    const tool = async (name: string, args: Record<string, unknown>) => {
      const r = (await mcp.client.callTool({ name, arguments: args })) as CallToolResult;
      assert.ok(!r.isError, textOf(r));
      return r.structuredContent as { session_id: string };
    };

    for (const runtime of PYTHONS)
      test(`OUT-FIGURES ${runtime}: plt.show() gives one image, the figure left open a second, in order with the prints`, async () => {
        const { result, s } = await run({ runtime, code: SHOW_TWO });
        assert.equal(s.exit_reason, "ok", s.stderr);
        assert.deepEqual(shape(s), [
          "stdout 7",
          "display image/png",
          "stdout 12",
          "display image/png",
        ]);
        assert.equal(s.stdout, "before\nbetween\nend\n", "stdout itself is what was printed");
        const blocks = images(result);
        assert.equal(blocks.length, 2);
        for (const b of blocks) assert.match((b as { data: string }).data, PNG);
        // The text: each figure at its place inside the stdout fence, the images after the text.
        const text = textOf(result);
        const fence = /--- stdout \w+ ---\n([\s\S]*?)\n--- end stdout \w+ ---/.exec(text)?.[1];
        assert.match(
          fence ?? "",
          /^before\n\[image\/png \d+×\d+, \d+ bytes: image 1 below\]\nbetween\nend\n\[image\/png \d+×\d+, \d+ bytes: image 2 below\]$/,
          text,
        );
      });

    test("OUT-PRODUCT the product page's example is unchanged: its saved figure comes back once, as the file", async () => {
      const { result, s } = await run({
        runtime: "python3.12",
        code: "import matplotlib.pyplot as plt\nimport numpy as np\nx = np.linspace(0, 10, 100)\nplt.plot(x, np.sin(x))\nplt.savefig('/tmp/plot.png')",
        return_files: ["/tmp/plot.png"],
      });
      assert.equal(s.exit_reason, "ok", s.stderr);
      assert.deepEqual(shape(s), [], "nothing displayed: the figure was saved");
      assert.equal(images(result).length, 1, "one image: the returned file");
      assert.match(textOf(result), /^\(no output\)\n/);
      assert.match(textOf(result), /file \/tmp\/plot\.png: \d+ bytes, image\/png$/);
    });

    test(`OUT-BOMB ${PY}: 1,000 open figures end within the call's 10 s, 20 shown, the rest named`, async () => {
      const { result, s } = await run({
        runtime: PY,
        timeout_ms: 10_000,
        code: "import matplotlib.pyplot as plt\nfor i in range(1000):\n    plt.figure()\nprint('made')",
      });
      assert.equal(s.exit_reason, "ok", `${s.stderr}\n${textOf(result)}`);
      // Empty figures are their text, as in a notebook (no blank image is drawn).
      const shown = s.outputs.filter((o) => o.type === "display");
      assert.equal(shown.length, 20);
      assert.equal(images(result).length, 0);
      assert.equal(s.outputs_left_out?.count, 980);
      assert.deepEqual(s.outputs_left_out?.names.slice(0, 2), ["Figure 21", "Figure 22"]);
      assert.match(textOf(result), /\noutputs: 980 left out \(.*\): Figure 21, Figure 22, /);
    });

    test(`OUT-BOUND ${PY}: of 25 figures 20 are drawn and shown, the other 5 named and never drawn`, async () => {
      const { result, s } = await run({
        runtime: PY,
        code: [
          "import matplotlib.pyplot as plt",
          "def note(event):",
          "    with open('/tmp/drawn.txt', 'a') as f:",
          "        f.write(f'{event.canvas.figure.number} ')",
          "for i in range(25):",
          "    fig = plt.figure(figsize=(2, 1))",
          "    fig.text(0.5, 0.5, str(i))",
          "    fig.canvas.mpl_connect('draw_event', note)",
        ].join("\n"),
        return_files: ["/tmp/drawn.txt"],
      });
      assert.equal(s.exit_reason, "ok", s.stderr);
      assert.equal(images(result).length, 20);
      assert.deepEqual(
        s.outputs_left_out?.names,
        [21, 22, 23, 24, 25].map((n) => `Figure ${n}`),
      );
      const drawn = result.content.find(
        (b) => b.type === "resource" && b.resource.uri === "file:///tmp/drawn.txt",
      ) as { resource: { text: string } } | undefined;
      const numbers = Array.from({ length: 20 }, (_, i) => i + 1);
      assert.deepEqual(drawn?.resource.text.trim().split(" ").map(Number), numbers);
    });

    test(`OUT-ERROR ${PY}: an uncaught exception is an error output: type, message, the code's frames`, async () => {
      const { s } = await run({
        runtime: PY,
        code: "def f(x):\n    return 1 / x\nprint('hi')\nf(0)",
      });
      assert.equal(s.exit_reason, "error");
      const error = s.outputs.at(-1);
      assert.equal(error?.type, "error");
      if (error?.type !== "error") return;
      assert.equal(error.ename, "ZeroDivisionError");
      assert.equal(error.evalue, "division by zero");
      assert.match(error.traceback, /^Traceback \(most recent call last\):\n/);
      assert.match(error.traceback, /File "\/run\/scratchrun\/main\.py", line 2, in f\n/);
      assert.doesNotMatch(error.traceback, /prestart|scratchrun_display/);
    });

    for (const runtime of PYTHONS)
      test(`OUT-CELL ${runtime}: a session cell's last expression, display() mid-cell and its figures come back in order`, async () => {
        const { session_id } = await tool("scratchrun_session_start", { runtime });
        try {
          const cell = async (code: string) => run({ runtime, code, session_id });
          // A DataFrame as the last expression: a bounded Markdown table, text/plain beside it.
          const first = await cell(
            "import pandas as pd\ndf = pd.DataFrame({'name': ['a', 'b'], 'n': [1, 2]})\ndf",
          );
          assert.deepEqual(shape(first.s), ["result text/markdown"]);
          assert.match(
            textOf(first.result),
            /\| {2}\| name \| n \|\n\|---\|---\|---\|\n\| 0 \| a \| 1 \|/,
          );
          // display() mid-cell keeps its place between the prints; the last expression last.
          const second = await cell("print('a')\ndisplay(df.head(1))\nprint('b')\n6 * 7");
          assert.deepEqual(shape(second.s), [
            "stdout 2",
            "display text/markdown",
            "stdout 2",
            "result text/plain",
          ]);
          const fence = /--- stdout \w+ ---\n([\s\S]*?)\n--- end stdout \w+ ---/.exec(
            textOf(second.result),
          )?.[1];
          assert.match(fence ?? "", /^a\n\| {2}\| name \| n \|[\s\S]*\| 0 \| a \| 1 \|\nb\n42$/);
          // A figure the cell leaves open comes at its end, after its result, and is closed.
          const third = await cell(
            "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nprint('drawn')\nlen(plt.get_fignums())",
          );
          assert.deepEqual(shape(third.s), ["stdout 6", "result text/plain", "display image/png"]);
          assert.equal(images(third.result).length, 1);
          const fourth = await cell("plt.get_fignums()");
          assert.equal(
            (fourth.s.outputs[0] as { data: Form[] }).data[0]?.text,
            "[]",
            "closed at the cell's end",
          );
          // A `_repr_html_` that raises leaves the result its text; `;` shows nothing.
          const fifth = await cell(
            "class B:\n    def _repr_html_(self):\n        raise ValueError('no html')\n    def __repr__(self):\n        return 'B!'\nB()",
          );
          assert.equal(fifth.s.exit_reason, "ok");
          assert.deepEqual(shape(fifth.s).slice(-1), ["result text/plain"]);
          const result = fifth.s.outputs.find((o) => o.type === "result") as { data: Form[] };
          assert.deepEqual(
            result.data.map((f) => [f.mime_type, f.text]),
            [["text/plain", "B!"]],
          );
          assert.match(fifth.s.stderr, /_repr_html_ of B raised ValueError: no html/);
          const sixth = await cell("6 * 7;");
          assert.deepEqual(shape(sixth.s), []);
        } finally {
          await tool("scratchrun_session_end", { session_id });
        }
      });

    test("OUT-NODE-CELL a node session cell's completion value is its result", async () => {
      const { session_id } = await tool("scratchrun_session_start", { runtime: "node20" });
      try {
        const { result, s } = await run({
          runtime: "node20",
          session_id,
          code: "const x = { answer: 2 * 21 };\nconsole.log('hi');\nx",
        });
        assert.deepEqual(shape(s), ["stdout 3", "result text/plain"]);
        const fence = /--- stdout \w+ ---\n([\s\S]*?)\n--- end stdout \w+ ---/.exec(
          textOf(result),
        )?.[1];
        assert.equal(fence, "hi\n{ answer: 42 }");
        const quiet = await run({ runtime: "node20", session_id, code: "let y = 1;" });
        assert.deepEqual(shape(quiet.s), [], "undefined shows nothing");
      } finally {
        await tool("scratchrun_session_end", { session_id });
      }
    });
  });
}
