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
 * The bytes a `files` value writes, or why it is invalid: the schema decodes each value once, and
 * a parsed request holds the bytes (`ExecRequest["files"]`), never the text they came as.
 */
export function decodeFileContent(
  content: FileContent,
): { ok: true; bytes: Buffer } | { ok: false; error: string } {
  return typeof content === "string"
    ? { ok: true, bytes: Buffer.from(content, "utf8") }
    : decodeBase64(content.base64);
}

/** A local file's bytes as a `files` value: text when they are UTF-8, else base64. */
export function asFileContent(bytes: Buffer): FileContent {
  const text = bytes.toString("utf8");
  return Buffer.from(text, "utf8").equals(bytes) ? text : { base64: bytes.toString("base64") };
}
