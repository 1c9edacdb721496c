/**
 * What the code wrote and showed, in order (docs/decisions/0017-outputs.md): the streams' runs as
 * the agent forwarded them, each output of the display channel parsed from the sandbox's bytes
 * (hostile: anything malformed, over a bound or cut off is left out and named, never shown), and
 * for a Python runtime the exception that ended the call, read from the end of its stderr. Text
 * forms are redacted as the streams are. Pure.
 */
import type { ShownEvent } from "../protocol/types.js";
import { runtimeEntry } from "../runtimes/table.js";
import {
  OUTPUT_IMAGE_MIMES,
  OUTPUT_TEXT_MIMES,
  type ExecRequest,
  type Output,
  type OutputForm,
} from "../schema/exec.js";
import { LIMITS } from "../schema/limits.js";

/** An output's image: its bytes, for the answer's image block (`outputs[output]`'s image form). */
export interface OutputImage {
  output: number;
  mimeType: string;
  content: Buffer;
}

export interface LeftOut {
  count: number;
  names: string[];
}

export interface Outputs {
  outputs: Output[];
  images: OutputImage[];
  leftOut: LeftOut | null;
}

type ImageMime = (typeof OUTPUT_IMAGE_MIMES)[number];
type TextMime = (typeof OUTPUT_TEXT_MIMES)[number];

/** One output of the channel as the sandbox described it. */
export type ParsedOutput =
  | {
      kind: "shown";
      type: "display" | "result";
      texts: { mime: TextMime; text: string }[];
      image: { mime: ImageMime; content: Buffer } | null;
      /** An image the sandbox dropped as over LIMITS.outputs.maxBytes, and its size. */
      dropped: { mime: ImageMime; size: number } | null;
    }
  | { kind: "left_out"; count: number; names: string[] };

/** Characters of one text form kept (the guest sends at most 64 Ki; a hostile one may send more). */
const TEXT_CHARS = 64 * 1024 + 64;
/** Names a left-out note lists; the rest are counted. */
export const NAMES_LISTED = 20;
const NAME_CHARS = 200;

const SIGNATURES: Record<ImageMime, Buffer> = {
  "image/png": Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
  "image/jpeg": Buffer.from([0xff, 0xd8, 0xff]),
};

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);
const isCount = (v: unknown): v is number =>
  typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
const cut = (s: string, n: number) => (s.length > n ? `${s.slice(0, n)}…` : s);

/** Parses one output's bytes: a JSON header line, then its image's bytes if it names one. */
export function parseOutput(content: Uint8Array): ParsedOutput | { error: string } {
  const bytes = Buffer.from(content.buffer, content.byteOffset, content.length);
  const nl = bytes.indexOf(0x0a);
  if (nl < 0) return { error: "no header line" };
  let header: unknown;
  try {
    header = JSON.parse(bytes.subarray(0, nl).toString("utf8"));
  } catch {
    return { error: "a header that is not JSON" };
  }
  if (!isRecord(header)) return { error: "a header that is not an object" };
  const payload = bytes.subarray(nl + 1);
  if (header.type === "left_out") {
    if (!isCount(header.count) || !Array.isArray(header.names) || payload.length > 0)
      return { error: "a malformed left-out note" };
    const names = header.names
      .filter((n): n is string => typeof n === "string")
      .slice(0, NAMES_LISTED)
      .map((n) => cut(n, NAME_CHARS));
    return { kind: "left_out", count: header.count, names };
  }
  if (header.type !== "display" && header.type !== "result") return { error: "an unknown type" };
  if (!isRecord(header.data)) return { error: "no data" };
  const texts: { mime: TextMime; text: string }[] = [];
  for (const mime of OUTPUT_TEXT_MIMES) {
    const text = header.data[mime];
    if (typeof text === "string") texts.push({ mime, text: cut(text, TEXT_CHARS) });
  }
  let image: { mime: ImageMime; content: Buffer } | null = null;
  if (header.binary !== undefined) {
    const mime = OUTPUT_IMAGE_MIMES.find((m) => m === header.binary);
    if (!mime || header.bytes !== payload.length) return { error: "an image that is not whole" };
    if (!payload.subarray(0, SIGNATURES[mime].length).equals(SIGNATURES[mime]))
      return { error: `bytes that are not ${mime}` };
    image = { mime, content: Buffer.from(payload) };
  } else if (payload.length > 0) return { error: "bytes after a header that names none" };
  let dropped: { mime: ImageMime; size: number } | null = null;
  if (isRecord(header.dropped)) {
    const [mime, size] = Object.entries(header.dropped)[0] ?? [];
    const known = OUTPUT_IMAGE_MIMES.find((m) => m === mime);
    if (known && isCount(size)) dropped = { mime: known, size };
  }
  if (texts.length === 0 && !image) return { error: "no form" };
  return { kind: "shown", type: header.type, texts, image, dropped };
}

/** Text forms in the order a model reads them best; `content.ts` shows the first it has. */
const TEXT_ORDER: readonly TextMime[] = [
  "text/markdown",
  "text/latex",
  "application/json",
  "text/plain",
  "text/html",
  "image/svg+xml",
];

/**
 * The call's outputs: `shown` in order, each output parsed and bounded (LIMITS.outputs.maxCount
 * shown, the rest left out and named), the text forms redacted; `error`, if any, last.
 */
export function buildOutputs(
  shown: readonly ShownEvent[],
  redact: (text: string) => string,
  error: Extract<Output, { type: "error" }> | null = null,
): Outputs {
  const outputs: Output[] = [];
  const images: OutputImage[] = [];
  let leftCount = 0;
  const leftNames: string[] = [];
  const leave = (count: number, names: readonly string[]) => {
    leftCount += count;
    for (const n of names) if (leftNames.length < NAMES_LISTED) leftNames.push(redact(n));
  };
  let channel = 0;
  let kept = 0;
  for (const event of shown) {
    if (event.kind === "stream") {
      outputs.push({ type: "stream", name: event.stream, size_bytes: event.bytes });
      continue;
    }
    channel++;
    if (event.end !== "whole") {
      leave(1, [`output ${channel} (${event.end === "over" ? "over the bounds" : "cut off"})`]);
      continue;
    }
    const parsed = parseOutput(event.content);
    if ("error" in parsed) {
      leave(1, [`output ${channel} (malformed: ${parsed.error})`]);
      continue;
    }
    if (parsed.kind === "left_out") {
      leave(Math.max(parsed.count, parsed.names.length), parsed.names);
      continue;
    }
    if (kept >= LIMITS.outputs.maxCount) {
      leave(1, [`output ${channel} (past the count)`]);
      continue;
    }
    kept++;
    const data: OutputForm[] = [];
    const image = parsed.image;
    if (image) {
      data.push({ mime_type: image.mime, size_bytes: image.content.length });
      images.push({ output: outputs.length, mimeType: image.mime, content: image.content });
    }
    if (parsed.dropped)
      data.push({
        mime_type: parsed.dropped.mime,
        size_bytes: parsed.dropped.size,
        left_out: `over the ${LIMITS.outputs.maxBytes} bytes one output may have`,
      });
    for (const mime of TEXT_ORDER) {
      const form = parsed.texts.find((t) => t.mime === mime);
      if (!form) continue;
      const text = redact(form.text);
      data.push({ mime_type: mime, size_bytes: Buffer.byteLength(text), text });
    }
    outputs.push({ type: parsed.type, data });
  }
  if (error) outputs.push(error);
  return {
    outputs,
    images,
    leftOut: leftCount > 0 ? { count: leftCount, names: leftNames } : null,
  };
}

/** Bytes of a traceback kept: its head and its end (where the exception is named). */
const TRACEBACK_HEAD = 2 * 1024;
const TRACEBACK_TAIL = 6 * 1024;
const EXCEPTION_LINE = /^([A-Za-z_][\w.]*)(?:: (.*))?$/;
const SYNTAX = /^(SyntaxError|IndentationError|TabError)(?:: (.*))?$/;

/**
 * The exception a Python program ended with, from its stderr's last traceback as Python prints it
 * (`Traceback (most recent call last):`, the frames, `Type: message`; a syntax error's `File`
 * lines and `SyntaxError: message`), or null when stderr does not end with one. Frames of
 * ScratchRun's own scripts are already cut (guest/prestart.py, guest/session.py); a long traceback
 * keeps its head and end.
 */
export function pythonError(stderr: string): Extract<Output, { type: "error" }> | null {
  const lines = stderr.replace(/\n+$/, "").split("\n");
  let start = lines.lastIndexOf("Traceback (most recent call last):");
  let at = -1;
  if (start >= 0) {
    at = start + 1;
    while (at < lines.length && /^\s/.test(lines[at] ?? "")) at++;
  } else {
    const syntax = lines.findLastIndex((l) => SYNTAX.test(l));
    const file = lines.findLastIndex((l, i) => i < syntax && /^ {2}File "/.test(l));
    if (syntax < 0 || file < 0 || syntax - file > 6) return null;
    start = file;
    at = syntax;
  }
  const m = EXCEPTION_LINE.exec(lines[at] ?? "");
  if (!m?.[1]) return null;
  const evalue = [m[2] ?? "", ...lines.slice(at + 1)].join("\n");
  let traceback = lines.slice(start, at + 1).join("\n");
  if (Buffer.byteLength(traceback) > TRACEBACK_HEAD + TRACEBACK_TAIL) {
    const omitted = traceback.length - TRACEBACK_HEAD - TRACEBACK_TAIL;
    traceback = `${traceback.slice(0, TRACEBACK_HEAD)}\n[... ${omitted} characters omitted ...]\n${traceback.slice(-TRACEBACK_TAIL)}`;
  }
  return { type: "error", ename: m[1], evalue: cut(evalue, TRACEBACK_HEAD), traceback };
}

/**
 * A call's outputs (see buildOutputs), with the Python exception that ended it when its runtime
 * prints tracebacks and it ended with an error (`exit_reason` "error").
 */
export function outputsOf(
  req: Pick<ExecRequest, "runtime">,
  shown: readonly ShownEvent[],
  stderr: string,
  failed: boolean,
  redact: (text: string) => string,
): Outputs {
  const error =
    failed && runtimeEntry(req.runtime).traceback === "python" ? pythonError(stderr) : null;
  return buildOutputs(shown, redact, error);
}
