import type { ExecOutcome } from "../engine/result.js";
import { isInlineImage, isTextMime } from "../engine/mime.js";
import { LIMITS } from "../schema/limits.js";

type Block =
  | { type: "text"; text: string }
  | { type: "image"; data: string; mimeType: string }
  | {
      type: "resource";
      resource:
        | { uri: string; mimeType: string; text: string }
        | { uri: string; mimeType: string; blob: string };
    };

/** A short, model-readable summary of a call: verdict first, then the two streams. */
export function summaryText(outcome: ExecOutcome): string {
  const r = outcome.result;
  const verdict =
    r.exit_reason === "ok" || r.exit_reason === "error"
      ? `exit_code: ${r.exit_code} (${r.exit_reason})`
      : `exit_reason: ${r.exit_reason}${r.signal !== null ? ` (signal ${r.signal})` : ""}`;
  const lines = [
    `${verdict} · ${r.duration_ms} ms · isolation: ${r.isolation} · network: ${r.network}`,
  ];
  if (r.message) lines.push(r.message);
  const stream = (name: string, text: string, truncated: boolean) => {
    if (!text && !truncated) return;
    lines.push(`--- ${name}${truncated ? " (truncated)" : ""} ---`, text.replace(/\n$/, ""));
  };
  stream("stdout", r.stdout, r.stdout_truncated);
  stream("stderr", r.stderr, r.stderr_truncated);
  if (!r.stdout && !r.stderr && !r.stdout_truncated && !r.stderr_truncated)
    lines.push("(no output)");
  for (const f of r.files) {
    const bigImage = isInlineImage(f.mime_type) && f.size_bytes > LIMITS.inlineImageBytes.max;
    lines.push(
      f.status !== "ok"
        ? `file ${f.path}: not returned (${describeStatus(f.status)})`
        : bigImage
          ? `file ${f.path}: ${f.size_bytes} bytes, ${f.mime_type}, over ${LIMITS.inlineImageBytes.max} bytes so returned as a resource, not inline (save a smaller image to see it)`
          : `file ${f.path}: ${f.size_bytes} bytes, ${f.mime_type}`,
    );
  }
  return lines.join("\n");
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

/** MCP content blocks: the summary, then each returned file (images inline, text as text). */
export function toContentBlocks(outcome: ExecOutcome): Block[] {
  const blocks: Block[] = [{ type: "text", text: summaryText(outcome) }];
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
