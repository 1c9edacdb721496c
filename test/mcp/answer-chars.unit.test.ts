/**
 * ANSWER-CHARS: an answer never holds more characters than scratchrun_exec declares in tools/list
 * (`anthropic/maxResultSizeChars`), and what is cut to keep it so is named.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import type { ExecOutcome } from "../../src/engine/result.js";
import { headTail } from "../../src/engine/shape-output.js";
import { answerChars, fitAnswerChars, narrowShown } from "../../src/mcp/answer-chars.js";
import { fitAnswerBudget } from "../../src/mcp/answer-budget.js";
import { toContentBlocks } from "../../src/mcp/content.js";
import { LIMITS } from "../../src/schema/limits.js";

const SHOWN = LIMITS.shownOutputBytes.max;

/** A stream as the engine shows it at max_output_bytes `max`. */
const shaped = (original: string, max = SHOWN) => {
  const s = headTail(original, max);
  return { text: s.text, omitted: s.omittedBytes };
};

function outcome(opts: {
  stdout?: string;
  stderr?: string;
  files?: [string, string, Buffer][];
  html?: string;
}): ExecOutcome {
  const out = shaped(opts.stdout ?? "");
  const err = shaped(opts.stderr ?? "");
  const files = opts.files ?? [];
  return {
    result: {
      stdout: out.text,
      stderr: err.text,
      exit_code: 0,
      exit_reason: "ok",
      signal: null,
      duration_ms: 1,
      isolation: "namespace",
      network: "none",
      stdout_truncated: out.omitted > 0,
      stderr_truncated: err.omitted > 0,
      stdout_omitted_bytes: out.omitted,
      stderr_omitted_bytes: err.omitted,
      files: files.map(([path, mime, content]) => ({
        path,
        status: "ok",
        size_bytes: content.length,
        mime_type: mime,
      })),
      ...(opts.html !== undefined
        ? {
            outputs: [
              {
                type: "display" as const,
                data: [
                  { mime_type: "text/plain" as const, size_bytes: 5, text: "<obj>" },
                  {
                    mime_type: "text/html" as const,
                    size_bytes: opts.html.length,
                    text: opts.html,
                  },
                ],
              },
            ],
          }
        : {}),
    },
    files: files.map(([path, mimeType, content]) => ({ path, mimeType, content })),
    images: [],
  };
}

/** Text blocks and text resources, and structuredContent's JSON: what answerChars adds. */
function counted(o: ExecOutcome): number {
  let n = JSON.stringify(o.result).length;
  for (const b of toContentBlocks(o))
    if (b.type === "text") n += b.text.length;
    else if (b.type === "resource" && "text" in b.resource) n += b.resource.text.length;
  return n;
}

describe("ANSWER-CHARS: answers stay under the declared characters", () => {
  test("an answer under the size is returned as it is", () => {
    const o = outcome({ stdout: "hello\n".repeat(1000) });
    assert.equal(fitAnswerChars(o), o);
    assert.equal(answerChars(o), counted(o));
  });

  test("a default call that fills both streams fits (Claude Code's undeclared 50,000 would not)", () => {
    const max = LIMITS.shownOutputBytes.default;
    const o = outcome({ stdout: "o".repeat(max), stderr: "e".repeat(max) });
    assert.ok(answerChars(o) > 50_000, `${answerChars(o)}`);
    assert.ok(answerChars(o) <= LIMITS.answerChars.max);
  });

  test("both streams at max_output_bytes' max are narrowed, each marker counting the original", () => {
    const stdout = Array.from({ length: 40_000 }, (_, i) => `line ${i}`).join("\n");
    const stderr = "\u0001warn\n".repeat(100_000); // control characters: 6 JSON characters each
    const o = outcome({ stdout, stderr });
    assert.ok(answerChars(o) > LIMITS.answerChars.max);
    const fitted = fitAnswerChars(o);
    assert.ok(answerChars(fitted) <= LIMITS.answerChars.max, `${answerChars(fitted)}`);
    for (const [name, original] of [
      ["stdout", stdout],
      ["stderr", stderr],
    ] as const) {
      const shown = fitted.result[name];
      const omitted = fitted.result[`${name}_omitted_bytes`];
      const m = /\n\[\.\.\. (\d+) bytes omitted \.\.\.\]\n/.exec(shown);
      assert.ok(m, `${name} has a marker`);
      assert.equal(Number(m[1]), omitted);
      const head = Buffer.byteLength(shown.slice(0, m.index));
      const tail = Buffer.byteLength(shown.slice(m.index + m[0].length));
      assert.equal(head + omitted + tail, Buffer.byteLength(original), `${name} adds up`);
      assert.ok(original.startsWith(shown.slice(0, m.index)));
      assert.ok(original.endsWith(shown.slice(m.index + m[0].length)));
    }
    assert.match(fitted.result.message ?? "", /under 500000 characters/);
    assert.match(fitted.result.message ?? "", /stderr shown as its first and last \d+ bytes/);
    // The text still fences both streams, the verdict after them.
    assert.match((toContentBlocks(fitted)[0] as { text: string }).text, /exit_code: 0/);
  });

  test("text files are left out, the largest first, marked total_limit and named", () => {
    const o = outcome({
      stdout: "ok\n",
      files: [
        ["/tmp/small.csv", "text/csv", Buffer.from("a,b\n1,2\n")],
        ["/tmp/big.csv", "text/csv", Buffer.alloc(300_000, "x")],
        ["/tmp/bigger.txt", "text/plain", Buffer.alloc(330_000, "y")],
      ],
    });
    const fitted = fitAnswerChars(o);
    assert.ok(answerChars(fitted) <= LIMITS.answerChars.max);
    assert.deepEqual(
      fitted.files.map((f) => f.path),
      ["/tmp/small.csv", "/tmp/big.csv"],
    );
    const status = Object.fromEntries(fitted.result.files.map((f) => [f.path, f.status]));
    assert.deepEqual(status, {
      "/tmp/small.csv": "ok",
      "/tmp/big.csv": "ok",
      "/tmp/bigger.txt": "total_limit",
    });
    assert.match(fitted.result.message ?? "", /\/tmp\/bigger\.txt/);
  });

  test("a binary file is never cut for characters: its base64 is not text a model reads", () => {
    // SEC-FILECAP's and SEC-TRANSPORT's files: what the caller named comes back within the file
    // limits, 4 MiB of base64 or not.
    const o = outcome({
      stdout: "ok\n",
      files: [
        ["/tmp/a.bin", "application/octet-stream", Buffer.alloc(2_621_440, 0)],
        ["/tmp/edge.bin", "application/octet-stream", Buffer.alloc(4 * 1024 * 1024, 9)],
      ],
    });
    assert.ok(answerChars(o) < 10_000, `${answerChars(o)}`);
    const fitted = fitAnswerChars(o);
    assert.equal(fitted, o);
    assert.deepEqual(
      fitted.files.map((f) => f.content.length),
      [2_621_440, 4 * 1024 * 1024],
    );
  });

  test("an output's long HTML form is left out of structuredContent and said so", () => {
    const o = outcome({ stdout: "x\n", html: `<table>${"<tr><td>1</td></tr>".repeat(40_000)}` });
    const fitted = fitAnswerChars(o);
    assert.ok(answerChars(fitted) <= LIMITS.answerChars.max);
    const display = fitted.result.outputs?.[0] as { data: { text?: string; left_out?: string }[] };
    assert.equal(display.data[1]?.text, undefined);
    assert.match(display.data[1]?.left_out ?? "", /500000 characters/);
    assert.equal(display.data[0]?.text, "<obj>", "the short form stays");
    assert.match(fitted.result.message ?? "", /output 1's text\/html/);
  });

  test("narrowShown of a shaped stream is the original shaped smaller", () => {
    const original = "αβγ".repeat(50_000) + "end";
    const s = shaped(original, 64 * 1024);
    const n = narrowShown(s.text, s.omitted, 8 * 1024);
    const m = /\n\[\.\.\. (\d+) bytes omitted \.\.\.\]\n/.exec(n.text);
    assert.ok(m);
    assert.equal(Number(m[1]), n.omitted);
    assert.ok(original.startsWith(n.text.slice(0, m.index)));
    assert.ok(original.endsWith(n.text.slice(m.index + m[0].length)));
    assert.ok(Buffer.byteLength(n.text) <= 8 * 1024 + m[0].length);
    // A look-alike marker printed by the code in the head does not fool it.
    const fake = `[... ${s.omitted} bytes omitted ...]`;
    const tricky = shaped(`\n${fake}\n${"z".repeat(100_000)}`, 64 * 1024);
    const t = narrowShown(tricky.text, tricky.omitted, 4096);
    assert.equal(
      Buffer.byteLength(t.text) -
        Buffer.byteLength(`\n[... ${t.omitted} bytes omitted ...]\n`) +
        t.omitted,
      Buffer.byteLength(`\n${fake}\n${"z".repeat(100_000)}`),
    );
  });

  test("any mix of streams, files and HTML ends under the size after both budgets", () => {
    fc.assert(
      fc.property(
        fc.nat(400_000),
        fc.nat(400_000),
        fc.array(fc.tuple(fc.nat(700_000), fc.boolean()), { maxLength: 5 }),
        fc.nat(900_000),
        fc.constantFrom("x", "\u0007", "é"),
        (outLen, errLen, files, htmlLen, ch) => {
          const o = outcome({
            stdout: ch.repeat(outLen),
            stderr: "e".repeat(errLen),
            files: files.map(([size, text], i) => [
              `/tmp/f${i}`,
              text ? "text/plain" : "application/octet-stream",
              Buffer.alloc(size, text ? "t" : 3),
            ]),
            html: "h".repeat(htmlLen),
          });
          const fitted = fitAnswerChars(fitAnswerBudget(o));
          assert.ok(answerChars(fitted) <= LIMITS.answerChars.max, `${answerChars(fitted)}`);
          assert.equal(answerChars(fitted), counted(fitted));
          if (fitted !== o && answerChars(o) > LIMITS.answerChars.max)
            assert.match(fitted.result.message ?? "", /Cut to keep this answer/);
        },
      ),
      { numRuns: 20 },
    );
  });
});
