import { randomBytes } from "node:crypto";
import type { ExecOutcome } from "../engine/result.js";
import { escapeControlChars } from "../engine/shape-output.js";
import { leftOutLine, stdoutWithOutputs } from "./outputs-text.js";
import { isInlineImage, isTextMime } from "../engine/mime.js";
import { LIMITS } from "../schema/limits.js";

export type Block =
  | { type: "text"; text: string }
  | { type: "image"; data: string; mimeType: string }
  | {
      type: "resource";
      resource:
        | { uri: string; mimeType: string; text: string }
        | { uri: string; mimeType: string; blob: string };
    };

/** Bytes of randomness in a call's fence tag: 48 bits, never seen by the code that printed. */
const TAG_BYTES = 6;

/**
 * A fresh tag per call (hex), one that occurs in neither stream as shown (escaped): the code
 * cannot print the closing fence, not even by chance.
 */
export function fenceTag(
  shown: readonly string[],
  draw: () => string = () => randomBytes(TAG_BYTES).toString("hex"),
): string {
  for (;;) {
    const tag = draw();
    if (!shown.some((text) => text.includes(tag))) return tag;
  }
}

/**
 * The stdout and stderr fences' text as the summary shows them (escaped; what the code displayed
 * sits in the stdout fence, at its place among what it printed): a tag for several results must
 * be absent from all of them.
 */
export function fencedStreams(outcome: ExecOutcome): [string, string] {
  const r = outcome.result;
  const shownOutputs = r.outputs?.some((o) => o.type === "display" || o.type === "result");
  const fenced = shownOutputs ? stdoutWithOutputs(outcome) : escapeControlChars(r.stdout);
  return [fenced.replace(/\n$/, ""), escapeControlChars(r.stderr).replace(/\n$/, "")];
}

/** Server text on one line: a newline inside it (e.g. an agent's message) cannot start a line. */
const oneLine = (text: string) => escapeControlChars(text).replace(/\n/g, " ");

/**
 * A short, model-readable summary of a call. What the code printed cannot pass for ScratchRun's
 * own lines: each stream sits between a `--- stdout TAG ---` and a `--- end stdout TAG ---` line,
 * TAG drawn at random after the code ended (and absent from its output), so no program can print
 * a closing fence; ScratchRun's lines (verdict, message, files) come after the last fence, and
 * control characters inside are escaped. docs/decisions/0007-result-text.md says why.
 */
export function summaryText(outcome: ExecOutcome, tag?: string): string {
  const r = outcome.result;
  const shownOutputs = r.outputs?.some((o) => o.type === "display" || o.type === "result");
  const [stdout, stderr] = fencedStreams(outcome);
  const t = tag ?? fenceTag([stdout, stderr]);
  const lines: string[] = [];
  const stream = (name: string, text: string, shown: string, truncated: boolean) => {
    if (!text && !truncated) return;
    lines.push(
      `--- ${name}${truncated ? " (truncated)" : ""} ${t} ---`,
      shown,
      `--- end ${name} ${t} ---`,
    );
  };
  stream("stdout", shownOutputs ? stdout : r.stdout, stdout, r.stdout_truncated);
  stream("stderr", r.stderr, stderr, r.stderr_truncated);
  if (!r.stdout && !r.stderr && !r.stdout_truncated && !r.stderr_truncated && !shownOutputs)
    lines.push("(no output)");
  const verdict =
    r.exit_reason === "ok" || r.exit_reason === "error"
      ? `exit_code: ${r.exit_code} (${r.exit_reason})`
      : `exit_reason: ${r.exit_reason}${r.signal !== null ? ` (signal ${r.signal})` : ""}`;
  lines.push(
    `${verdict} · ${r.duration_ms} ms · isolation: ${r.isolation} · network: ${r.network}`,
  );
  if (r.message) lines.push(oneLine(r.message));
  if (r.network_reason) lines.push(oneLine(`network: ${r.network_reason}`));
  const refused = refusedLine(r.network_refused ?? [], r.network_refused_omitted ?? 0);
  if (refused) lines.push(refused);
  if (r.outputs_left_out) lines.push(leftOutLine(r.outputs_left_out));
  for (const f of r.files) {
    const path = oneLine(f.path);
    const bigImage = isInlineImage(f.mime_type) && f.size_bytes > LIMITS.inlineImageBytes.max;
    lines.push(
      f.status !== "ok"
        ? `file ${path}: not returned (${f.message ? oneLine(f.message) : describeStatus(f.status)})`
        : bigImage
          ? `file ${path}: ${f.size_bytes} bytes, ${f.mime_type}, over ${LIMITS.inlineImageBytes.max} bytes so returned as a resource, not inline (save a smaller image to see it)`
          : `file ${path}: ${f.size_bytes} bytes, ${f.mime_type}`,
    );
  }
  return lines.join("\n");
}

/** Refusals named in the text (the rest are counted; structuredContent has them all). */
const REFUSALS_SHOWN = 8;

/** One line naming what the egress allowlist refused, or null when nothing was. */
export function refusedLine(
  refused: NonNullable<ExecOutcome["result"]["network_refused"]>,
  omitted: number,
): string | null {
  if (refused.length === 0 && omitted === 0) return null;
  const shown = refused
    .slice(0, REFUSALS_SHOWN)
    .map(
      (f) =>
        `${f.host ?? "(no name)"}:${f.port} (${f.reason.replace(/_/g, " ")}${f.count > 1 ? `, ${f.count}×` : ""})`,
    );
  const more = refused.length - shown.length + omitted;
  return oneLine(
    `network: the egress allowlist refused ${shown.join(", ")}${more > 0 ? ` and ${more} more` : ""}`,
  );
}

function describeStatus(status: string): string {
  switch (status) {
    case "missing":
      return "does not exist";
    case "not_regular":
      return "not a regular file (directory, link, device or pipe)";
    case "too_large":
      return "larger than the per-file cap";
    case "total_limit":
      return "over the total size cap for returned files";
    default:
      return "could not be read";
  }
}

/** MCP content blocks: the summary, the outputs' images in order, then each returned file (images
 * inline, text as text). */
export function toContentBlocks(outcome: ExecOutcome, tag?: string, heading?: string): Block[] {
  const text = summaryText(outcome, tag);
  const blocks: Block[] = [{ type: "text", text: heading ? `${heading}\n${text}` : text }];
  for (const image of outcome.images)
    blocks.push({
      type: "image",
      data: image.content.toString("base64"),
      mimeType: image.mimeType,
    });
  for (const file of outcome.files) {
    const uri = `file://${file.path}`;
    if (isInlineImage(file.mimeType) && file.content.length <= LIMITS.inlineImageBytes.max) {
      blocks.push({
        type: "image",
        data: file.content.toString("base64"),
        mimeType: file.mimeType,
      });
    } else if (isTextMime(file.mimeType) && isUtf8(file.content)) {
      blocks.push({
        type: "resource",
        resource: { uri, mimeType: file.mimeType, text: file.content.toString("utf8") },
      });
    } else {
      blocks.push({
        type: "resource",
        resource: { uri, mimeType: file.mimeType, blob: file.content.toString("base64") },
      });
    }
  }
  return blocks;
}

function isUtf8(buf: Buffer): boolean {
  try {
    new TextDecoder("utf-8", { fatal: true }).decode(buf);
    return true;
  } catch {
    return false;
  }
}
