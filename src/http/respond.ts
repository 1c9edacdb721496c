/**
 * How every HTTP server here answers in JSON: bodies that are never cached, and the wire's error
 * shape, `{ error: { code, message } }`, whose code is the engine's (src/errors.ts) or one that
 * only the HTTP layer answers with.
 */
import type { ServerResponse } from "node:http";
import type { ErrorCode } from "../errors.js";

/** The codes only the HTTP layer answers with (the wire schema, src/api/wire.ts, lists both). */
export const HTTP_ERROR_CODES = [
  "UNAUTHORIZED",
  "FORBIDDEN",
  "NOT_FOUND",
  "PAYLOAD_TOO_LARGE",
  "UNSUPPORTED_MEDIA_TYPE",
] as const;
export type WireErrorCode = ErrorCode | (typeof HTTP_ERROR_CODES)[number];

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    "Content-Type": "application/json",
    "Content-Length": String(Buffer.byteLength(text)),
    "Cache-Control": "no-store",
    ...headers,
  });
  res.end(text);
}

export function sendError(
  res: ServerResponse,
  status: number,
  code: WireErrorCode,
  message: string,
  headers: Record<string, string> = {},
): void {
  sendJson(res, status, { error: { code, message } }, headers);
}
