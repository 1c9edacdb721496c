import { isTextMime } from "../engine/mime.js";
import type { OutputImage } from "../engine/outputs.js";
import type { ExecOutcome, FileOut } from "../engine/result.js";
import { LIMITS } from "../schema/limits.js";

/** Bytes a file adds to the answer: JSON-escaped text for text types, base64 otherwise. */
function fileCost(file: FileOut): number {
  const base64 = Math.ceil(file.content.length / 3) * 4;
  if (!isTextMime(file.mimeType)) return base64;
  return Math.max(base64, JSON.stringify(file.content.toString("utf8")).length);
}

/** Bytes the outputs' text forms add (they sit in structuredContent, their shown text in the text). */
function outputsCost(outcome: ExecOutcome): number {
  let cost = 0;
  for (const o of outcome.result.outputs ?? [])
    if (o.type === "display" || o.type === "result")
      for (const f of o.data) if (f.text !== undefined) cost += 2 * JSON.stringify(f.text).length;
  return cost;
}

/**
 * Keeps one MCP answer under the byte budget a stdio client accepts: the streams and the outputs'
 * text forms appear twice (text block and structured content), so the rest of the budget goes to
 * files and the outputs' images, smallest first; a file that does not fit is left out, its status
 * set to total_limit, an image is left out with its form saying why, and the note names them.
 */
export function fitAnswerBudget(
  outcome: ExecOutcome,
  budget: number = LIMITS.answerBytes.max,
): ExecOutcome {
  return fitWithin(outcome, budget).outcome;
}

/** Bytes an answer's framing, verdict and metadata take beside what is counted. */
const FRAMING_BYTES = 64 * 1024;

/**
 * fitAnswerBudget for one part of an answer (one input of a call with inputs): what it keeps
 * within `budget`, and how many bytes of it that uses (the rest goes to the parts after it).
 * `share` says, in the note, whose budget it was.
 */
export function fitWithin(
  outcome: ExecOutcome,
  budget: number,
  share?: string,
): { outcome: ExecOutcome; used: number } {
  const r = outcome.result;
  const streams = 2 * (JSON.stringify(r.stdout).length + JSON.stringify(r.stderr).length);
  const fixed = streams + outputsCost(outcome) + FRAMING_BYTES; // the summary, metadata, framing
  let room = budget - fixed;
  // By identity, not by path: the note must name exactly what is left out, never more or fewer.
  const keep = new Set<FileOut | OutputImage>();
  const all = [...outcome.files, ...outcome.images];
  for (const item of all.sort((a, b) => a.content.length - b.content.length)) {
    const cost = fileCost({ path: "", ...item });
    if (cost <= room) {
      room -= cost;
      keep.add(item);
    }
  }
  const used = budget - room;
  const dropped = outcome.files.filter((f) => !keep.has(f)).map((f) => f.path);
  const droppedImages = outcome.images.filter((im) => !keep.has(im));
  if (dropped.length === 0 && droppedImages.length === 0) return { outcome, used };
  const names = [
    ...dropped,
    ...droppedImages.map((im) => `output ${im.output + 1}'s ${im.mimeType}`),
  ];
  const whose = share ? `, ${share},` : "";
  const note = `Left out of this answer to keep it${whose} under ${budget} bytes (MCP stdio clients refuse larger messages): ${names.join(", ")}.`;
  const why = `left out of this answer to keep it${whose} under ${budget} bytes`;
  const outputs = r.outputs?.map((o, i) => {
    const image = droppedImages.find((im) => im.output === i);
    if (!image || (o.type !== "display" && o.type !== "result")) return o;
    const data = o.data.map((f) =>
      f.mime_type === image.mimeType && f.text === undefined && !f.left_out
        ? { ...f, left_out: why }
        : f,
    );
    return { ...o, data };
  });
  const fitted: ExecOutcome = {
    files: outcome.files.filter((f) => keep.has(f)),
    images: outcome.images.filter((im) => keep.has(im)),
    result: {
      ...r,
      files: r.files.map((f) =>
        dropped.includes(f.path) && f.status === "ok" ? { ...f, status: "total_limit" } : f,
      ),
      ...(outputs ? { outputs } : {}),
      message: r.message ? `${r.message} ${note}` : note,
    },
  };
  return { outcome: fitted, used };
}
