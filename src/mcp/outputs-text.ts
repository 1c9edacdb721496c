/**
 * The outputs in a result's text (docs/decisions/0017-outputs.md): each display and result sits
 * in the stdout fence at its place among what the code printed (decision 0007: the fence holds
 * what the code wrote and showed; ScratchRun's own lines come after it), as its image's place in
 * the answer or as its best text form. Computed from the structured result alone, so remote mode
 * renders the same text. Pure.
 */
import type { ExecOutcome } from "../engine/result.js";
import { escapeControlChars } from "../engine/shape-output.js";
import type { Output, OutputForm } from "../schema/exec.js";
import { LIMITS } from "../schema/limits.js";

/** Characters of one output's text in the fence; structuredContent has it all. */
export const OUTPUT_TEXT_SHOWN = 8 * 1024;
/** Names the left-out line lists. */
const NAMES_SHOWN = 8;

/** `<Foo object at 0x7f…>`: a repr that says nothing, where an HTML form says more. */
const DEFAULT_REPR = /^<[\w.]+ object at 0x[0-9a-fA-F]+>$/;

/** The form a model reads best: the first text form, HTML over a default repr. */
function bestText(data: readonly OutputForm[]): OutputForm | undefined {
  const texts = data.filter((f) => f.text !== undefined);
  const first = texts[0];
  const html = texts.find((f) => f.mime_type === "text/html");
  if (first?.mime_type === "text/plain" && html && DEFAULT_REPR.test(first.text ?? "")) return html;
  return first;
}

/** A PNG's width and height, from its header. */
function pngSize(content: Buffer): string {
  if (content.length < 24 || content.toString("latin1", 12, 16) !== "IHDR") return "";
  return ` ${content.readUInt32BE(16)}×${content.readUInt32BE(20)}`;
}

function outputText(
  o: Extract<Output, { type: "display" | "result" }>,
  imageNo: number | undefined,
  image: Buffer | undefined,
): string {
  const img = o.data.find((f) => f.text === undefined);
  const lines: string[] = [];
  if (img && imageNo !== undefined)
    return `[${img.mime_type}${image && img.mime_type === "image/png" ? pngSize(image) : ""}, ${img.size_bytes} bytes: image ${imageNo} below]`;
  if (img) lines.push(`[${img.mime_type}, ${img.size_bytes} bytes: left out, ${img.left_out}]`);
  const form = bestText(o.data);
  if (form?.text !== undefined) {
    const text = form.text;
    lines.push(
      text.length > OUTPUT_TEXT_SHOWN
        ? `${text.slice(0, OUTPUT_TEXT_SHOWN)}\n[... ${text.length - OUTPUT_TEXT_SHOWN} more characters of ${form.mime_type} in structuredContent.outputs ...]`
        : text,
    );
  }
  return lines.join("\n");
}

/** Where the head/tail marker of a shaped stream sits (bytes), the one nearest its middle. */
function markerAt(shown: Buffer, omitted: number): { at: number; length: number } | null {
  const marker = Buffer.from(`\n[... ${omitted} bytes omitted ...]\n`);
  let best: number | null = null;
  for (let i = shown.indexOf(marker); i >= 0; i = shown.indexOf(marker, i + 1)) {
    const imbalance = Math.abs(i - (shown.length - i - marker.length));
    if (best === null || imbalance < Math.abs(best - (shown.length - best - marker.length)))
      best = i;
  }
  return best === null ? null : { at: best, length: marker.length };
}

/**
 * The stdout fence's text: what the code printed (as `stdout` shows it), with each display and
 * result at the line where it came. Outputs are placed by the bytes the code had written before
 * each; one in the part of a long stdout left out goes right after the marker, and one that came
 * mid-line after the line (redaction changes lengths, so a place is never trusted to fall inside a
 * line).
 */
export function stdoutWithOutputs(outcome: ExecOutcome): string {
  const r = outcome.result;
  const shown = Buffer.from(r.stdout, "utf8");
  const omitted = r.stdout_omitted_bytes;
  const marker = omitted > 0 ? markerAt(shown, omitted) : null;
  const place = (raw: number): number => {
    let at = raw;
    if (marker)
      at =
        raw <= marker.at
          ? raw
          : raw < marker.at + omitted
            ? marker.at + marker.length
            : raw - omitted + marker.length;
    at = Math.min(at, shown.length);
    if (at > 0 && shown[at - 1] !== 0x0a) {
      const nl = shown.indexOf(0x0a, at);
      at = nl < 0 ? shown.length : nl + 1;
    }
    return at;
  };
  const images = new Map(outcome.images.map((im, i) => [im.output, { no: i + 1, im }]));
  const pieces: string[] = [];
  let from = 0;
  let written = 0;
  (r.outputs ?? []).forEach((o, i) => {
    if (o.type === "stream") {
      if (o.name === "stdout") written += o.size_bytes;
      return;
    }
    if (o.type === "error") return;
    const at = Math.max(place(written), from);
    const before = shown.subarray(from, at).toString("utf8");
    if (before) pieces.push(before.endsWith("\n") ? before : `${before}\n`);
    const image = images.get(i);
    pieces.push(`${outputText(o, image?.no, image?.im.content)}\n`);
    from = at;
  });
  pieces.push(shown.subarray(from).toString("utf8"));
  return escapeControlChars(pieces.join(""));
}

/** ScratchRun's line naming the outputs left out (names are the code's: made one line). */
export function leftOutLine(left: { count: number; names: readonly string[] }): string {
  const named = left.names.slice(0, NAMES_SHOWN);
  const more = left.count - named.length;
  const text =
    `outputs: ${left.count} left out (a call shows at most ${LIMITS.outputs.maxCount}, ` +
    `${LIMITS.outputs.maxTotalBytes} bytes in all; a figure past them is never drawn)` +
    `${named.length ? `: ${named.join(", ")}` : ""}${more > 0 ? ` and ${more} more` : ""}`;
  return escapeControlChars(text).replace(/\n/g, " ");
}
