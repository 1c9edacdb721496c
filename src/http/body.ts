/**
 * The one body reader every server's routes use: a JSON or form body within a cap. It decides
 * each refusal once (its status, its code, and a connection that closes after it); the wire
 * answers it with `refuse`, an OAuth endpoint or a console form in its own words.
 */
import type { IncomingMessage } from "node:http";
import type { Refusal } from "./respond.js";

/** A request body as read, or why it was refused (answered by `refuse`, or in a page's words). */
export type Body<T> = { ok: true; value: T } | { ok: false; refusal: Refusal };

/**
 * Reads a JSON request body of at most `capBytes`. Content-Length over the cap is refused before
 * reading; a chunked body is counted as it arrives and dropped at the cap.
 */
export async function readJsonBody(req: IncomingMessage, capBytes: number): Promise<Body<unknown>> {
  if (mediaType(req) !== "application/json")
    return refused(415, "UNSUPPORTED_MEDIA_TYPE", "Content-Type must be application/json");
  const body = await readCapped(req, capBytes);
  if (!body.ok) return body;
  try {
    return { ok: true, value: JSON.parse(body.value) };
  } catch {
    return refused(400, "INVALID_INPUT", "Body is not valid JSON");
  }
}

/**
 * Reads an `application/x-www-form-urlencoded` body (HTML forms, the OAuth token endpoint) of at
 * most `capBytes` into its fields; a field given twice is refused (RFC 6749 §3.1).
 */
export async function readFormBody(
  req: IncomingMessage,
  capBytes: number,
): Promise<Body<Record<string, string>>> {
  if (mediaType(req) !== "application/x-www-form-urlencoded")
    return refused(
      415,
      "UNSUPPORTED_MEDIA_TYPE",
      "Content-Type must be application/x-www-form-urlencoded",
    );
  const body = await readCapped(req, capBytes);
  if (!body.ok) return body;
  const value: Record<string, string> = {};
  for (const [k, v] of new URLSearchParams(body.value)) {
    if (Object.hasOwn(value, k))
      return refused(400, "INVALID_INPUT", `parameter ${k} is given more than once`);
    value[k] = v;
  }
  return { ok: true, value };
}

const mediaType = (req: IncomingMessage) =>
  (req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();

/**
 * A body of at most `capBytes` as UTF-8 text. Content-Length over the cap is refused before
 * reading; a chunked body is counted as it arrives and dropped at the cap.
 */
async function readCapped(req: IncomingMessage, capBytes: number): Promise<Body<string>> {
  const declared = req.headers["content-length"];
  if (declared !== undefined && Number(declared) > capBytes) return tooLarge(capBytes);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > capBytes) return tooLarge(capBytes);
    chunks.push(chunk);
  }
  return { ok: true, value: Buffer.concat(chunks).toString("utf8") };
}

const tooLarge = (cap: number) =>
  refused(413, "PAYLOAD_TOO_LARGE", `Body is larger than ${cap} bytes`);

/**
 * A body refused is answered on a connection that then closes: what is left of it (all of it,
 * when the refusal came before reading) must not be read as the next request.
 */
const refused = (status: number, code: Refusal["code"], message: string) =>
  ({ ok: false, refusal: { status, code, message, headers: { Connection: "close" } } }) as const;
