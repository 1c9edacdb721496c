import { isTextMime } from "../engine/mime.js";
import type { ExecOutcome, FileOut } from "../engine/result.js";
import { LIMITS } from "../schema/limits.js";

/** Bytes a file adds to the answer: JSON-escaped text for text types, base64 otherwise. */
function fileCost(file: FileOut): number {
  const base64 = Math.ceil(file.content.length / 3) * 4;
  if (!isTextMime(file.mimeType)) return base64;
  return Math.max(base64, JSON.stringify(file.content.toString("utf8")).length);
}

/**
 * Keeps one MCP answer under the byte budget a stdio client accepts: the streams appear twice
 * (text block and structured content), so the rest of the budget goes to files, smallest first;
 * a file that does not fit is left out, its status set to total_limit and the reason said.
 */
export function fitAnswerBudget(
  outcome: ExecOutcome,
  budget: number = LIMITS.answerBytes.max,
): ExecOutcome {
  const r = outcome.result;
  const streams = 2 * (JSON.stringify(r.stdout).length + JSON.stringify(r.stderr).length);
  let room = budget - streams - 64 * 1024; // the rest of the summary, metadata and framing
  // By identity, not by path: the note must name exactly the files left out, never more or fewer.
  const keep = new Set<FileOut>();
  for (const f of [...outcome.files].sort((a, b) => a.content.length - b.content.length)) {
    const cost = fileCost(f);
    if (cost <= room) {
      room -= cost;
      keep.add(f);
    }
  }
  const dropped = outcome.files.filter((f) => !keep.has(f)).map((f) => f.path);
  if (dropped.length === 0) return outcome;
  const note = `Left out of this answer to keep it under ${budget} bytes (MCP stdio clients refuse larger messages): ${dropped.join(", ")}.`;
  return {
    files: outcome.files.filter((f) => keep.has(f)),
    result: {
      ...r,
      files: r.files.map((f) =>
        dropped.includes(f.path) && f.status === "ok" ? { ...f, status: "total_limit" } : f,
      ),
      message: r.message ? `${r.message} ${note}` : note,
    },
  };
}
