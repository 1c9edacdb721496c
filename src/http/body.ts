import type { IncomingMessage } from "node:http";

export type BodyResult =
  { ok: true; value: unknown } | { ok: false; status: 400 | 413 | 415; message: string };

/**
 * Reads a JSON request body of at most `capBytes`. Content-Length over the cap is refused before
 * reading; a chunked body is counted as it arrives and dropped at the cap.
 */
export async function readJsonBody(req: IncomingMessage, capBytes: number): Promise<BodyResult> {
  const type = (req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
  if (type !== "application/json")
    return { ok: false, status: 415, message: "Content-Type must be application/json" };
  const body = await readCapped(req, capBytes);
  if (!body.ok) return body;
  try {
    return { ok: true, value: JSON.parse(body.text) };
  } catch {
    return { ok: false, status: 400, message: "Body is not valid JSON" };
  }
}

/**
 * Reads an `application/x-www-form-urlencoded` body (HTML forms, the OAuth token endpoint) of at
 * most `capBytes` into its fields; a field given twice is refused (RFC 6749 §3.1).
 */
export async function readFormBody(
  req: IncomingMessage,
  capBytes: number,
): Promise<
  | { ok: true; value: Record<string, string> }
  | { ok: false; status: 400 | 413 | 415; message: string }
> {
  const type = (req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
  if (type !== "application/x-www-form-urlencoded")
    return {
      ok: false,
      status: 415,
      message: "Content-Type must be application/x-www-form-urlencoded",
    };
  const body = await readCapped(req, capBytes);
  if (!body.ok) return body;
  const value: Record<string, string> = {};
  for (const [k, v] of new URLSearchParams(body.text)) {
    if (Object.hasOwn(value, k))
      return { ok: false, status: 400, message: `parameter ${k} is given more than once` };
    value[k] = v;
  }
  return { ok: true, value };
}

/**
 * A body of at most `capBytes` as UTF-8 text. Content-Length over the cap is refused before
 * reading; a chunked body is counted as it arrives and dropped at the cap.
 */
async function readCapped(
  req: IncomingMessage,
  capBytes: number,
): Promise<{ ok: true; text: string } | { ok: false; status: 413; message: string }> {
  const declared = req.headers["content-length"];
  if (declared !== undefined && Number(declared) > capBytes) return tooLarge(capBytes);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > capBytes) return tooLarge(capBytes);
    chunks.push(chunk);
  }
  return { ok: true, text: Buffer.concat(chunks).toString("utf8") };
}

const tooLarge = (cap: number): { ok: false; status: 413; message: string } => ({
  ok: false,
  status: 413,
  message: `Body is larger than ${cap} bytes`,
});
