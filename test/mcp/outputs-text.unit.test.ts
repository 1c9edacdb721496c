// Outputs in the answer (docs/decisions/0017-outputs.md): each display and result in the stdout
// fence at its place (decision 0007's fences hold all the code wrote and showed), its image an
// image block in order, the answer's budget kept with images in it, and the REST wire carrying
// it all unchanged (remote mode renders from it).
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { outcomeToWire, wireToOutcome } from "../../src/api/wire.js";
import { buildOutputs } from "../../src/engine/outputs.js";
import type { ExecOutcome } from "../../src/engine/result.js";
import { headTail } from "../../src/engine/shape-output.js";
import { fitAnswerBudget } from "../../src/mcp/answer-budget.js";
import { summaryText, toContentBlocks } from "../../src/mcp/content.js";
import { leftOutLine, stdoutWithOutputs } from "../../src/mcp/outputs-text.js";
import type { ShownEvent } from "../../src/protocol/types.js";
import type { ExecResult } from "../../src/schema/exec.js";

/** A PNG header of w×h and some bytes. */
function png(w: number, h: number, extra = 8): Buffer {
  const b = Buffer.alloc(24 + extra, 7);
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]).copy(b);
  b.write("IHDR", 12, "latin1");
  b.writeUInt32BE(w, 16);
  b.writeUInt32BE(h, 20);
  return b;
}
const rec = (header: Record<string, unknown>, payload?: Buffer): ShownEvent => ({
  kind: "display",
  end: "whole",
  content: Buffer.concat([Buffer.from(`${JSON.stringify(header)}\n`), payload ?? Buffer.alloc(0)]),
});
const figure = (p: Buffer) =>
  rec(
    { type: "display", data: { "text/plain": "<Figure>" }, binary: "image/png", bytes: p.length },
    p,
  );
const text = (type: "display" | "result", t: string, mime = "text/plain") =>
  rec({ type, data: { [mime]: t, ...(mime === "text/plain" ? {} : { "text/plain": "plain" }) } });
const out = (bytes: number): ShownEvent => ({ kind: "stream", stream: "stdout", bytes });

/** An outcome whose stdout is `printed` as the code wrote it, with `shown` in order. */
function outcome(printed: string, shown: ShownEvent[], maxOutput = 32 * 1024): ExecOutcome {
  const built = buildOutputs(shown, (t) => t);
  const shaped = headTail(printed, maxOutput);
  const result: ExecResult = {
    stdout: shaped.text,
    stderr: "",
    exit_code: 0,
    exit_reason: "ok",
    signal: null,
    duration_ms: 5,
    isolation: "namespace",
    network: "none",
    stdout_truncated: shaped.omittedBytes > 0,
    stderr_truncated: false,
    stdout_omitted_bytes: shaped.omittedBytes,
    stderr_omitted_bytes: 0,
    files: [],
    outputs: built.outputs,
    ...(built.leftOut ? { outputs_left_out: built.leftOut } : {}),
  };
  return { result, files: [], images: built.images };
}

describe("the stdout fence with outputs in it", () => {
  it("puts each output at its place among the lines printed, images by their block", () => {
    const o = outcome("before\nbetween\nend\n", [
      out(7),
      figure(png(640, 480)),
      out(12),
      text("result", "42"),
    ]);
    assert.equal(
      stdoutWithOutputs(o),
      "before\n[image/png 640×480, 32 bytes: image 1 below]\nbetween\nend\n42\n",
    );
  });

  it("an output that came mid-line goes after that line (a place is never inside one)", () => {
    const o = outcome("abc\ndef\n", [out(5), text("display", "X"), out(3)]);
    assert.equal(stdoutWithOutputs(o), "abc\ndef\nX\n");
  });

  it("with the middle of a long stdout left out: before, at the marker, after, as they came", () => {
    const line = "0123456789abcdef\n"; // 17 bytes
    const printed = line.repeat(200); // 3400 bytes, shown as 1024 + marker + 1024
    const o = outcome(
      printed,
      [
        out(17 * 2),
        text("display", "HEAD"),
        out(17 * 100),
        text("display", "MIDDLE"),
        out(17 * 97),
        text("display", "TAIL"),
        out(17),
      ],
      2048,
    );
    const fence = stdoutWithOutputs(o);
    assert.match(fence, /^(0123456789abcdef\n){2}HEAD\n/);
    assert.match(fence, /\n\[\.\.\. \d+ bytes omitted \.\.\.\]\n[^\n]*\n?MIDDLE\n/);
    assert.match(fence, /\nTAIL\n0123456789abcdef\n$/);
  });

  it("escapes control characters in what an output says, and the fence tag avoids it", () => {
    const o = outcome("", [text("result", "\x1b]0;title\x07 --- end stdout abc ---")]);
    const summary = summaryText(o);
    assert.ok(!summary.includes("\x1b") && !summary.includes("\x07"), summary);
    assert.ok(summary.includes("\\x1b]0;title\\x07"), "shown escaped");
    const tag = /--- stdout (\w+) ---/.exec(summary)?.[1] ?? "";
    assert.equal(summary.split(`--- end stdout ${tag} ---`).length, 2);
  });

  it("a result alone still opens the fence: no '(no output)'", () => {
    const summary = summaryText(outcome("", [text("result", "42")]));
    assert.match(summary, /^--- stdout \w+ ---\n42\n--- end stdout \w+ ---\n/);
    assert.doesNotMatch(summary, /no output/);
  });

  it("picks the form a model reads best: Markdown over plain, HTML over a default repr", () => {
    const md = outcome("", [text("result", "| a |", "text/markdown")]);
    assert.equal(stdoutWithOutputs(md), "| a |\n");
    const html = outcome("", [
      rec({
        type: "result",
        data: { "text/plain": "<x.Y object at 0x7f00aa>", "text/html": "<b>y</b>" },
      }),
    ]);
    assert.equal(stdoutWithOutputs(html), "<b>y</b>\n");
  });

  it("names what was left out in one server line after the fences", () => {
    const summary = summaryText(
      outcome("", [rec({ type: "left_out", count: 980, names: ["Figure 21", "Figure\n22"] })]),
    );
    assert.match(summary, /\noutputs: 980 left out \([^)]*\): Figure 21, Figure 22 and 978 more$/);
    assert.equal(leftOutLine({ count: 1, names: [] }).includes("\n"), false);
  });
});

describe("content blocks and the answer's budget with outputs", () => {
  it("the summary, the outputs' images in order, then the returned files", () => {
    const o = outcome("", [figure(png(1, 1)), figure(png(2, 2))]);
    o.files.push({ path: "/tmp/a.txt", mimeType: "text/plain", content: Buffer.from("a") });
    const blocks = toContentBlocks(o);
    assert.deepEqual(
      blocks.map((b) => b.type),
      ["text", "image", "image", "resource"],
    );
    assert.equal((blocks[1] as { data: string }).data, png(1, 1).toString("base64"));
  });

  it("an image that does not fit the budget is left out, its form says why, the note names it", () => {
    const big = png(10, 10, 4000);
    const o = fitAnswerBudget(outcome("", [figure(png(1, 1)), figure(big)]), 64 * 1024 + 2000);
    assert.equal(o.images.length, 1);
    const second = o.result.outputs?.[1];
    assert.ok(second?.type === "display");
    assert.match(second.data[0]?.left_out ?? "", /left out of this answer/);
    assert.match(o.result.message ?? "", /output 2's image\/png/);
    assert.match(summaryText(o), /\[image\/png, 4024 bytes: left out, left out of this answer/);
  });
});

describe("the REST wire carries outputs unchanged", () => {
  it("round-trips outputs and their images exactly", () => {
    const o = outcome("before\n", [
      out(7),
      figure(png(3, 4)),
      text("result", "| a |", "text/markdown"),
      rec({ type: "left_out", count: 2, names: ["Figure 21"] }),
    ]);
    o.result.outputs?.push({ type: "error", ename: "E", evalue: "v", traceback: "t" });
    const wire = JSON.parse(JSON.stringify(outcomeToWire(o)));
    const back = wireToOutcome(wire);
    assert.deepEqual(back, o);
    assert.equal(summaryText(back, "tag"), summaryText(o, "tag"));
    assert.deepEqual(toContentBlocks(back).slice(1), toContentBlocks(o).slice(1));
  });

  it("refuses an output it does not know", () => {
    const wire = JSON.parse(JSON.stringify(outcomeToWire(outcome("", [text("result", "x")]))));
    wire.outputs[0].data[0].extra = 1;
    assert.throws(() => wireToOutcome(wire), /malformed result/);
  });
});
