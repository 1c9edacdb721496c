/**
 * Shapes what the code printed for a model to read: secrets the caller passed in `env` are
 * replaced by `[redacted:NAME]`, and long streams keep their head and tail with the number of
 * bytes left out in between. Pure functions.
 */

/** Values shorter than this are not redacted: "1" or "true" would shred every output. */
export const MIN_REDACT_LENGTH = 6;

export function redactSecrets(text: string, env: Readonly<Record<string, string>>): string {
  const secrets = Object.entries(env)
    .filter(([, value]) => value.length >= MIN_REDACT_LENGTH)
    .sort((a, b) => b[1].length - a[1].length);
  let out = text;
  for (const [name, value] of secrets) out = out.split(value).join(`[redacted:${name}]`);
  return out;
}

export interface Shaped {
  text: string;
  /** Bytes of the original left out of `text` (0 when it was kept whole). */
  omittedBytes: number;
}

const decoder = new TextDecoder("utf-8", { fatal: false });

const isContinuation = (bytes: Uint8Array, i: number) => ((bytes[i] ?? 0) & 0xc0) === 0x80;

/** Moves `i` to the start of a UTF-8 character, backwards or forwards, so none is cut in two. */
function charBoundary(bytes: Uint8Array, i: number, direction: -1 | 1): number {
  let j = i;
  while (j > 0 && j < bytes.length && isContinuation(bytes, j)) j += direction;
  return j;
}

/** Keeps the first and last `maxBytes / 2` bytes of `text`, with a marker naming what was cut. */
export function headTail(text: string, maxBytes: number): Shaped {
  const bytes = Buffer.from(text, "utf8");
  if (bytes.length <= maxBytes) return { text, omittedBytes: 0 };
  const half = Math.floor(maxBytes / 2);
  const headEnd = charBoundary(bytes, half, -1);
  const tailStart = charBoundary(bytes, bytes.length - half, 1);
  const omitted = tailStart - headEnd;
  return {
    text: `${decoder.decode(bytes.subarray(0, headEnd))}\n[... ${omitted} bytes omitted ...]\n${decoder.decode(bytes.subarray(tailStart))}`,
    omittedBytes: omitted,
  };
}

/**
 * Control characters (C0 but tab and newline, DEL, C1) as visible escapes (`\x1b`, `\r`, `\x9b`),
 * so what the code printed can neither drive a terminal (ANSI/OSC sequences, cursor moves, a bell)
 * nor hide text behind a carriage return. A CRLF line end stays a line end.
 */
export function escapeControlChars(text: string): string {
  return text.replace(/\r\n/g, "\n").replace(/[\p{Cc}]/gu, (c) => {
    if (c === "\n" || c === "\t") return c;
    if (c === "\r") return "\\r";
    return `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`;
  });
}
