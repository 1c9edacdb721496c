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
  const declared = req.headers["content-length"];
  if (declared !== undefined && Number(declared) > capBytes) return tooLarge(capBytes);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > capBytes) return tooLarge(capBytes);
    chunks.push(chunk);
  }
  try {
    return { ok: true, value: JSON.parse(Buffer.concat(chunks).toString("utf8")) };
  } catch {
    return { ok: false, status: 400, message: "Body is not valid JSON" };
  }
}

const tooLarge = (cap: number): BodyResult => ({
  ok: false,
  status: 413,
  message: `Body is larger than ${cap} bytes`,
});
