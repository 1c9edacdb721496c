/**
 * Keeps one answer under the characters scratchrun_exec declares to clients
 * (`_meta["anthropic/maxResultSizeChars"]` in tools/list, LIMITS.answerChars): Claude Code sends
 * a result past the size a tool declares to a file and shows the model a preview. A client may
 * read the text blocks or the structured result (Claude Code reads structuredContent where there
 * is one), so both count, together: the text blocks, text resources (a UTF-8 text file) and
 * structuredContent as JSON. Image blocks and binary resources (base64 blobs) are not characters
 * a model reads: a returned binary file is what the caller asked for by name, bounded by the file
 * limits (LIMITS.returnFiles) and the byte budget (answer-budget.ts), never dropped here.
 *
 * What is cut, in order, and named in the result's message: returned text files (the largest
 * first), outputs' text forms in structuredContent (the largest first; the text block shows at
 * most OUTPUT_TEXT_SHOWN of each), then the streams' shown head and tail, and as a last resort an
 * error's traceback. Pure.
 */
import type { ExecOutcome, FileOut } from "../engine/result.js";
import { isInlineImage, isTextMime } from "../engine/mime.js";
import { headTail } from "../engine/shape-output.js";
import type { ExecResult, Output } from "../schema/exec.js";
import { LIMITS } from "../schema/limits.js";
import { toContentBlocks } from "./content.js";

/** The characters a client may count in this answer (see the module's comment). */
export function answerChars(outcome: ExecOutcome): number {
  let chars = JSON.stringify(outcome.result).length;
  for (const block of toContentBlocks(outcome)) {
    if (block.type === "text") chars += block.text.length;
    else if (block.type === "resource" && "text" in block.resource)
      chars += block.resource.text.length;
  }
  return chars;
}

/** A text resource's characters (a UTF-8 text file, as content.ts sends it), else null (a blob). */
function textChars(f: FileOut): number | null {
  if (!isTextMime(f.mimeType)) return null;
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(f.content).length;
  } catch {
    return null;
  }
}

/** A returned file that comes back as a text resource block: the files this module may cut. */
const isTextResource = (f: FileOut) =>
  !(isInlineImage(f.mimeType) && f.content.length <= LIMITS.inlineImageBytes.max) &&
  textChars(f) !== null;
const resourceChars = (f: FileOut) => textChars(f) ?? 0;

/** The marker a shaped stream carries between its head and tail (engine/shape-output.ts). */
const markerOf = (omitted: number) => Buffer.from(`\n[... ${omitted} bytes omitted ...]\n`);

const isContinuation = (bytes: Buffer, i: number) => ((bytes[i] ?? 0) & 0xc0) === 0x80;

/** `i` moved to the start of a UTF-8 character (backwards or forwards), none cut in two. */
function charStart(bytes: Buffer, i: number, direction: -1 | 1): number {
  let j = i;
  while (j > 0 && j < bytes.length && isContinuation(bytes, j)) j += direction;
  return j;
}

/**
 * A shown stream narrowed to about `maxBytes` (its head and tail), the marker counting every byte
 * of the original left out. A shaped stream's head and tail are the original's, split at its
 * marker (the one nearest the middle: the code may print look-alikes), so the result is the
 * original shaped smaller.
 */
export function narrowShown(
  shown: string,
  omitted: number,
  maxBytes: number,
): { text: string; omitted: number } {
  const bytes = Buffer.from(shown, "utf8");
  if (bytes.length <= maxBytes) return { text: shown, omitted };
  let head = bytes;
  let tail = bytes;
  if (omitted > 0) {
    const marker = markerOf(omitted);
    let at = -1;
    for (let i = bytes.indexOf(marker); i >= 0; i = bytes.indexOf(marker, i + 1))
      if (
        at < 0 ||
        Math.abs(2 * i + marker.length - bytes.length) <
          Math.abs(2 * at + marker.length - bytes.length)
      )
        at = i;
    if (at >= 0) {
      head = bytes.subarray(0, at);
      tail = bytes.subarray(at + marker.length);
    }
  }
  const half = Math.min(Math.floor(maxBytes / 2), head.length, tail.length);
  const headEnd = charStart(head, half, -1);
  const tailStart = charStart(tail, tail.length - half, 1);
  const kept = headEnd + (tail.length - tailStart);
  const original =
    omitted + (omitted > 0 && head !== bytes ? head.length + tail.length : bytes.length);
  const total = original - kept;
  return {
    text: Buffer.concat([
      head.subarray(0, headEnd),
      markerOf(total),
      tail.subarray(tailStart),
    ]).toString("utf8"),
    omitted: total,
  };
}

/** Names the note lists (the rest are counted); a path is at most LIMITS.pathBytes. */
const NAMES_SHOWN = 8;
/** Characters kept for the note: it sits in the text and in structuredContent, escaped. */
const NOTE_ROOM = 2 * 2 * (NAMES_SHOWN * LIMITS.pathBytes.max + 1024);

type Form = { mime_type: string; size_bytes: number; text?: string; left_out?: string };

export function fitAnswerChars(
  outcome: ExecOutcome,
  maxChars: number = LIMITS.answerChars.max,
): ExecOutcome {
  if (answerChars(outcome) <= maxChars) return outcome;
  // What the cuts aim at: the declared size less room for the note that names them.
  const budget = maxChars - NOTE_ROOM;
  const why = `left out of this answer to keep it under ${maxChars} characters`;
  const named: string[] = [];
  let r: ExecResult = { ...outcome.result };
  const resources = outcome.files.filter(isTextResource);
  const others = outcome.files.filter((f) => !isTextResource(f));
  const current = (files: FileOut[]): ExecOutcome => ({
    result: r,
    files: outcome.files.filter((f) => others.includes(f) || files.includes(f)),
    images: outcome.images,
  });

  // Outputs' text forms, the largest first, while the answer without resources is over.
  const forms: { o: number; f: number; length: number }[] = [];
  (r.outputs ?? []).forEach((o, i) => {
    if (o.type === "display" || o.type === "result")
      o.data.forEach((f, j) => {
        if (f.text !== undefined) forms.push({ o: i, f: j, length: f.text.length });
      });
  });
  forms.sort((a, b) => b.length - a.length);
  for (const form of forms) {
    if (answerChars(current([])) <= budget) break;
    const outputs = [...(r.outputs ?? [])];
    const o = outputs[form.o] as Extract<Output, { type: "display" | "result" }>;
    const data = o.data.map((f: Form, j) => {
      if (j !== form.f) return f;
      const { text: _text, ...rest } = f;
      return { ...rest, left_out: why };
    });
    outputs[form.o] = { ...o, data } as Output;
    r = { ...r, outputs };
    named.push(`output ${form.o + 1}'s ${o.data[form.f]?.mime_type}`);
  }

  // The streams: the larger shown one halves until the answer without resources fits.
  const floor = LIMITS.shownOutputBytes.min;
  const narrowed = new Set<string>();
  for (;;) {
    const over = answerChars(current([])) - budget;
    if (over <= 0) break;
    const out = Buffer.byteLength(r.stdout);
    const err = Buffer.byteLength(r.stderr);
    const name = out >= err ? "stdout" : "stderr";
    const size = Math.max(out, err);
    if (size <= floor) break;
    const target = Math.max(floor, Math.min(Math.floor(size / 2), size - over));
    const n =
      name === "stdout"
        ? narrowShown(r.stdout, r.stdout_omitted_bytes, target)
        : narrowShown(r.stderr, r.stderr_omitted_bytes, target);
    // Near the floor the marker makes a narrowed stream no shorter: it is as short as it gets
    // (a share of a call with many inputs may be smaller than any answer).
    if (Buffer.byteLength(n.text) >= size) break;
    r =
      name === "stdout"
        ? { ...r, stdout: n.text, stdout_omitted_bytes: n.omitted, stdout_truncated: true }
        : { ...r, stderr: n.text, stderr_omitted_bytes: n.omitted, stderr_truncated: true };
    narrowed.add(name);
  }

  // Last resort: an error's traceback (its head and tail).
  if (answerChars(current([])) > budget && r.outputs?.some((o) => o.type === "error")) {
    const outputs = (r.outputs ?? []).map((o) =>
      o.type === "error" ? { ...o, traceback: headTail(o.traceback, floor).text } : o,
    );
    r = { ...r, outputs };
    named.push("the error's traceback (its head and tail kept)");
  }

  // Returned files, the smallest first, in the room that is left beside the note.
  let room = budget - answerChars(current([]));
  const keep: FileOut[] = [];
  for (const f of [...resources].sort((a, b) => resourceChars(a) - resourceChars(b))) {
    const cost = resourceChars(f);
    if (cost <= room) {
      keep.push(f);
      room -= cost;
    }
  }
  const streams = [...narrowed].map(
    (name) =>
      `${name} shown as its first and last ${Math.floor(Buffer.byteLength(name === "stdout" ? r.stdout : r.stderr) / 2)} bytes`,
  );
  const before = r;
  // The note is written last; should it not fit (it cannot, with NOTE_ROOM), the largest kept
  // file goes too.
  for (;;) {
    const dropped = resources.filter((f) => !keep.includes(f)).map((f) => f.path);
    const all = [...dropped, ...named, ...streams];
    const shown = all.slice(0, NAMES_SHOWN);
    const more = all.length - shown.length;
    const note = `Cut to keep this answer under ${maxChars} characters (the size scratchrun_exec declares to clients): ${shown.join(", ")}${more > 0 ? ` and ${more} more` : ""}.`;
    r = {
      ...before,
      files: before.files.map((f) =>
        dropped.includes(f.path) && f.status === "ok" ? { ...f, status: "total_limit" } : f,
      ),
      message: before.message ? `${before.message} ${note}` : note,
    };
    const fitted = current(keep);
    if (answerChars(fitted) <= maxChars || keep.length === 0) return fitted;
    keep.pop();
  }
}
