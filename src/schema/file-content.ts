import { z } from "zod";

/**
 * What a `files` value may be: UTF-8 text (the product page's form), or `{ "base64": "…" }` for
 * bytes that are not text (an xlsx, a PNG). Limits count the bytes written, not the JSON text.
 */
export type FileContent = string | { base64: string };

export const fileContentSchema = z.union([
  z.string(),
  z
    .strictObject({
      base64: z
        .string()
        .describe("the file's bytes, standard base64 (RFC 4648 section 4, padded, no line breaks)"),
    })
    .describe("binary content"),
]);

/**
 * Standard alphabet and at most two `=` at the end (a flat character class: a nested quantifier
 * overflows the regexp stack on a 7 MB string); length and padding are checked after it.
 */
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/**
 * Decodes canonical base64 or returns why it is not: Node's own decoder skips whatever it does
 * not understand, so a damaged upload would silently become other bytes.
 */
export function decodeBase64(
  text: string,
): { ok: true; bytes: Buffer } | { ok: false; error: string } {
  if (!BASE64.test(text) || text.length % 4 !== 0) {
    const bad = /[^A-Za-z0-9+/=]/.exec(text);
    return {
      ok: false,
      error: bad
        ? `not valid base64: character ${JSON.stringify(bad[0])} at offset ${bad.index} (standard alphabet, no line breaks)`
        : `not valid base64: length ${text.length} is not a multiple of 4 or the padding is misplaced`,
    };
  }
  const bytes = Buffer.from(text, "base64");
  if (bytes.toString("base64") !== text)
    return {
      ok: false,
      error:
        "not valid base64: the padding is misplaced or the bits after the last byte are not zero",
    };
  return { ok: true, bytes };
}

/**
 * Bytes of base64 values validation has decoded, by value: validation decodes each once, and the
 * engine and the run record take those bytes instead of decoding again (issue 25: parse once).
 */
const decodedOnce = new WeakMap<{ base64: string }, Buffer>();

/** The bytes a validated value writes. Throws on invalid base64, which validation refuses first. */
export function fileBytes(content: FileContent): Buffer {
  if (typeof content === "string") return Buffer.from(content, "utf8");
  const known = decodedOnce.get(content);
  if (known) return known;
  const decoded = decodeBase64(content.base64);
  if (!decoded.ok) throw new Error(`unvalidated file content reached the engine: ${decoded.error}`);
  decodedOnce.set(content, decoded.bytes);
  return decoded.bytes;
}

/** How many bytes a value writes, or the reason it is invalid (for validation and records). */
export function fileSize(
  content: FileContent,
): { ok: true; size: number } | { ok: false; error: string } {
  if (typeof content === "string") return { ok: true, size: Buffer.byteLength(content, "utf8") };
  const known = decodedOnce.get(content);
  if (known) return { ok: true, size: known.length };
  const decoded = decodeBase64(content.base64);
  if (!decoded.ok) return decoded;
  decodedOnce.set(content, decoded.bytes);
  return { ok: true, size: decoded.bytes.length };
}

/** A local file's bytes as a `files` value: text when they are UTF-8, else base64. */
export function asFileContent(bytes: Buffer): FileContent {
  const text = bytes.toString("utf8");
  return Buffer.from(text, "utf8").equals(bytes) ? text : { base64: bytes.toString("base64") };
}
