/**
 * The MCP answer to a call with `inputs` (src/engine/batch.ts): a summary line, then each input's
 * result as a single call's (its text, then its images and files), in the inputs' order. One
 * fence tag, absent from every input's output, fences them all (decision 0007), so no input's
 * code can close another's fence either. The answer's byte budget, and the characters a client
 * takes (answer-chars.ts), are shared: each input gets an equal share of what is left when its
 * turn comes, and what did not fit is named in its result.
 */
import type { BatchOutcome, BatchSummary } from "../engine/batch.js";
import type { BatchResult } from "../schema/exec.js";
import { LIMITS } from "../schema/limits.js";
import { fitWithin } from "./answer-budget.js";
import { answerChars, fitAnswerChars } from "./answer-chars.js";
import { fenceTag, fencedStreams, toContentBlocks, type Block } from "./content.js";

/** Bytes, and characters, kept for the summary (its line and its JSON) and the framing. */
const SUMMARY_BYTES = 16 * 1024;
const SUMMARY_CHARS = 4 * 1024;

/**
 * Keeps the whole answer under `budget`: input by input, in order, each within an equal share of
 * what the inputs before it left (an input that needs less leaves the rest to those after it).
 */
export function fitBatchBudget(
  batch: BatchOutcome,
  budget: number = LIMITS.answerBytes.max,
  maxChars: number = LIMITS.answerChars.max,
): BatchOutcome {
  const n = batch.entries.length;
  let remaining = budget - SUMMARY_BYTES;
  let chars = maxChars - SUMMARY_CHARS;
  const entries = batch.entries.map((entry, i) => {
    const share = Math.max(0, Math.floor(remaining / (n - i)));
    const fitted = fitWithin(entry, share, `inputs[${i}]'s share of a ${budget}-byte answer`);
    remaining -= fitted.used;
    // The characters a client takes (answer-chars.ts), shared the same way.
    const charShare = Math.max(0, Math.floor(chars / (n - i)));
    const kept = fitAnswerChars(fitted.outcome, charShare);
    chars -= answerChars(kept);
    return kept;
  });
  return { entries, summary: batch.summary };
}

/** ScratchRun's line on the whole call, first in the answer's text. */
export function batchSummaryLine(s: BatchSummary): string {
  const reasons = Object.entries(s.exit_reasons)
    .filter(([reason]) => reason !== "ok")
    .map(([reason, count]) => `${reason} ${count}`);
  return [
    `inputs: ${s.count}, ${s.concurrency} at once`,
    `passed ${s.passed}`,
    `failed ${s.failed}${reasons.length ? ` (${reasons.join(", ")})` : ""}`,
    `duration p50 ${s.duration_p50_ms} ms, max ${s.duration_max_ms} ms`,
    `${s.wall_ms} ms in all`,
  ].join(" · ");
}

/** structuredContent: each input's result, as a single call's, and the summary. */
export function batchStructured(batch: BatchOutcome): BatchResult {
  return { results: batch.entries.map((e) => e.result), summary: batch.summary };
}

/**
 * Content blocks: the summary, then per input a heading and its result's text, followed by its
 * images and files (so "image 1 below" in an input's text is that input's first image).
 */
export function batchContentBlocks(batch: BatchOutcome): Block[] {
  const tag = fenceTag(batch.entries.flatMap((e) => fencedStreams(e)));
  const blocks: Block[] = [{ type: "text", text: batchSummaryLine(batch.summary) }];
  const n = batch.entries.length;
  batch.entries.forEach((entry, i) =>
    blocks.push(...toContentBlocks(entry, tag, `=== inputs[${i}] (${i + 1} of ${n}) ===`)),
  );
  return blocks;
}
