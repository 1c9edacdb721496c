// INPUTS-*: one call over many inputs (issue 53) through a real MCP client over stdio, on each
// backend: one result per input in the inputs' order though they run at once and end in another
// order, a failing and a timing-out input among passing ones, each input's env and files laid over
// the call's, the summary in the text and in structuredContent; a bad input and inputs with a
// session are refused before any sandbox starts. One server per backend; the microVM slice is the
// first test alone (it boots one VM per input).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { TEST_BACKENDS, type TestBackend } from "../helpers/backends.js";
import { assertNoCallSandbox, snapshot } from "../helpers/leaks.js";
import { textOf, type ExecStructured } from "../helpers/mcp-client.js";
import { serverForSuite } from "../helpers/suite.js";

interface Batch {
  results: (ExecStructured & { files: { path: string; status: string }[] })[];
  summary: {
    count: number;
    passed: number;
    failed: number;
    exit_reasons: Record<string, number>;
    duration_p50_ms: number;
    duration_max_ms: number;
    wall_ms: number;
    concurrency: number;
  };
}

const batchOf = (r: CallToolResult) => r.structuredContent as unknown as Batch;

// Input 0 sleeps longest, so the inputs end in another order than they were given.
const MIXED = [
  'case "$CASE" in',
  "  fail) echo failing >&2; exit 3 ;;",
  "  hang) echo hanging; sleep 600 ;;",
  '  *) sleep "$NAP"; echo "case $CASE: $(cat data.txt)" ;;',
  "esac",
].join("\n");

/** The mixed call: passing inputs around one that fails and one that runs past timeout_ms. */
function mixedCall(timeoutMs: number) {
  return {
    runtime: "bash",
    code: MIXED,
    timeout_ms: timeoutMs,
    env: { NAP: "0" },
    files: { "data.txt": "from the call" },
    inputs: [
      { env: { CASE: "a", NAP: "1.5" } },
      { env: { CASE: "fail" } },
      { env: { CASE: "b" }, files: { "/home/user/data.txt": "from input 2" } },
      { env: { CASE: "hang" } },
      { env: { CASE: "c" } },
    ],
  };
}

function assertMixed(r: CallToolResult, backend: TestBackend, timeoutMs: number) {
  assert.equal(r.isError, false, JSON.stringify(r.content).slice(0, 500));
  const { results, summary } = batchOf(r);
  assert.equal(results.length, 5);
  const [a, fail, b, hang, c] = results;
  assert.equal(a?.stdout, "case a: from the call\n");
  assert.equal(a?.exit_reason, "ok");
  assert.equal(fail?.exit_reason, "error");
  assert.equal(fail?.exit_code, 3);
  assert.equal(fail?.stderr, "failing\n");
  assert.equal(b?.stdout, "case b: from input 2\n", "an input's file wins over the call's");
  assert.equal(hang?.exit_reason, "timeout");
  assert.equal(hang?.stdout, "hanging\n");
  assert.equal(c?.stdout, "case c: from the call\n");
  for (const x of results)
    assert.match(x.isolation, backend === "namespace" ? /^namespace$/ : /^microvm/);
  assert.equal(summary.count, 5);
  assert.equal(summary.passed, 3);
  assert.equal(summary.failed, 2);
  assert.deepEqual(summary.exit_reasons, { ok: 3, error: 1, timeout: 1 });
  assert.ok(summary.duration_max_ms >= timeoutMs, `max ${summary.duration_max_ms}`);
  assert.ok(summary.duration_p50_ms < timeoutMs, `p50 ${summary.duration_p50_ms}`);
  // Timeout per input, and the inputs ran at once: not five timeouts' worth one after another.
  assert.ok(summary.wall_ms < 2 * timeoutMs + 15_000, `wall ${summary.wall_ms}`);
  const text = textOf(r);
  assert.match(
    text,
    /^inputs: 5, \d at once · passed 3 · failed 2 \((error 1, timeout 1|timeout 1, error 1)\) · duration p50 \d+ ms, max \d+ ms · \d+ ms in all/,
  );
  // Each input's section in order, each with its own verdict.
  const headings = [...text.matchAll(/^=== inputs\[(\d)\] \((\d) of 5\) ===$/gm)].map((m) => m[1]);
  assert.deepEqual(headings, ["0", "1", "2", "3", "4"]);
  assert.match(
    text,
    /case a: from the call[\s\S]*exit_code: 3 \(error\)[\s\S]*case b: from input 2[\s\S]*exit_reason: timeout[\s\S]*case c/,
  );
  // One fence tag for every input.
  const tags = new Set(
    [...text.matchAll(/^--- (?:end )?std(?:out|err) ([0-9a-f]{12}) ---$/gm)].map((m) => m[1]),
  );
  assert.equal(tags.size, 1, text);
}

for (const backend of TEST_BACKENDS) {
  describe(`inputs: one call over many inputs [${backend}]`, () => {
    const h = serverForSuite(backend);
    // Under TCG a VM's start is seconds: the passing inputs need room beside the timing-out one.
    const timeoutMs = backend === "namespace" ? 3000 : 8000;

    test("INPUTS-ORDER: in order under concurrency, a failing and a timing-out input among passing ones", async () => {
      const r = await h.call(mixedCall(timeoutMs));
      assertMixed(r, backend, timeoutMs);
    });

    if (backend !== "namespace") return;

    test("INPUTS-REFUSED: a bad input is refused with its index, before any sandbox starts", async () => {
      const before = snapshot().cgroups;
      const cases: [Record<string, unknown>, RegExp][] = [
        [
          { inputs: [{ env: { A: "1" } }, { env: { A: "2" } }, { env: { "1BAD": "x" } }] },
          /^INVALID_INPUT: Invalid request: inputs\[2\]\.env: env name "1BAD"/,
        ],
        [
          { inputs: [{}, { files: { "../x": "y" } }] },
          /inputs\[1\]\.files: files\["\.\.\/x"\]: .*'\.\.'/,
        ],
        [{ inputs: [{ colour: "red" }] }, /inputs\[0\]: Unrecognized key: "colour"/],
        [{ inputs: [] }, /inputs: Too small/],
        [{ inputs: Array.from({ length: 17 }, () => ({})) }, /inputs: Too big: .*16/],
        [{ inputs: [{}], session_id: "AAAAAAAAAAAAAAAAAAAAAA" }, /inputs: not with session_id/],
        [
          {
            files: { "a.bin": "x".repeat(5_000_000) },
            inputs: [{}, { files: { "b.bin": "y".repeat(4_000_000) } }],
          },
          /inputs\[1\]\.files: with the call's files: files total 9000000 bytes; at most 8388608/,
        ],
      ];
      for (const [extra, message] of cases) {
        const r = await h.call({ runtime: "bash", code: "touch /tmp/ran", ...extra });
        assert.equal(r.isError, true, JSON.stringify(extra).slice(0, 200));
        assert.match(textOf(r), message);
        assert.equal(r.structuredContent, undefined);
      }
      await assertNoCallSandbox(before);
    });

    test("INPUTS-BUDGET: streams share the answer, each input's cut named", async () => {
      const inputs = Array.from({ length: 16 }, (_, i) => ({ env: { N: String(i) } }));
      const r = await h.call({
        runtime: "bash",
        code: 'head -c 40000 /dev/zero | tr "\\0" "$((N % 10))"; echo',
        max_output_bytes: 65536,
        inputs,
      });
      assert.equal(r.isError, false);
      const { results, summary } = batchOf(r);
      assert.equal(summary.passed, 16);
      results.forEach((x, i) => {
        // The answer shared by 16 inputs: 6250 bytes per stream each, the rest left out and said so.
        assert.ok(x.stdout.startsWith(String(i % 10).repeat(100)), `input ${i} in its place`);
        assert.equal(x.stdout_omitted_bytes, 40_001 - 6250);
        assert.match(
          x.message ?? "",
          /Each stream shows at most 6250 bytes here, not max_output_bytes=65536: 16 inputs share one answer/,
        );
      });
    });
  });
}
