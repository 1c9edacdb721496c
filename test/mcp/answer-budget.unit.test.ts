import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { ExecOutcome } from "../../src/engine/result.js";
import { fitAnswerBudget } from "../../src/mcp/answer-budget.js";
import { toContentBlocks } from "../../src/mcp/content.js";

function outcome(files: [string, number][], stdout = ""): ExecOutcome {
  return {
    result: {
      stdout,
      stderr: "",
      exit_code: 0,
      exit_reason: "ok",
      signal: null,
      duration_ms: 1,
      isolation: "namespace",
      network: "none",
      stdout_truncated: false,
      stderr_truncated: false,
      stdout_omitted_bytes: 0,
      stderr_omitted_bytes: 0,
      files: files.map(([path, size]) => ({
        path,
        status: "ok",
        size_bytes: size,
        mime_type: "application/octet-stream",
      })),
    },
    files: files.map(([path, size]) => ({
      path,
      mimeType: "application/octet-stream",
      content: Buffer.alloc(size, 1),
    })),
    images: [],
  };
}

const answerSize = (o: ExecOutcome) =>
  Buffer.byteLength(JSON.stringify({ content: toContentBlocks(o), structuredContent: o.result }));

describe("fitAnswerBudget", () => {
  test("an answer within budget is untouched", () => {
    const o = outcome([["/tmp/a", 1000]]);
    assert.equal(fitAnswerBudget(o, 1 << 20), o);
  });

  test("files that would pass the budget are left out, marked and named; the answer fits", () => {
    const o = outcome(
      [
        ["/tmp/small", 100_000],
        ["/tmp/big1", 3_000_000],
        ["/tmp/big2", 3_000_000],
      ],
      "x".repeat(200_000),
    );
    assert.ok(answerSize(o) > 4 << 20);
    const fitted = fitAnswerBudget(o, 4 << 20);
    assert.ok(answerSize(fitted) <= 4 << 20, `${answerSize(fitted)}`);
    assert.ok(
      fitted.files.some((f) => f.path === "/tmp/small"),
      "the small file is kept",
    );
    const statuses = Object.fromEntries(fitted.result.files.map((f) => [f.path, f.status]));
    assert.equal(statuses["/tmp/small"], "ok");
    const left = fitted.result.files.filter((f) => f.status === "total_limit").map((f) => f.path);
    assert.ok(left.length >= 1);
    for (const p of left) assert.match(fitted.result.message ?? "", new RegExp(p));
  });

  test("control-character output counts at its escaped size", () => {
    const o = outcome([["/tmp/f", 2_000_000]], "\u0001".repeat(262_144));
    const fitted = fitAnswerBudget(o, 4 << 20);
    assert.ok(answerSize(fitted) <= 4 << 20, `${answerSize(fitted)}`);
  });
});
