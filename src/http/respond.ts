/**
 * How every HTTP server here answers in JSON: bodies that are never cached, and the wire's error
 * shape, `{ error: { code, message } }`, whose code is the engine's (src/errors.ts) or one that
 * only the HTTP layer answers with. A refusal (a body refused, an engine's error) is decided here
 * once, as a status, a code and headers, and every server answers it the same way.
 */
import type { ServerResponse } from "node:http";
import { isScratchRunError, ScratchRunError, type ErrorCode } from "../errors.js";

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

/** A request refused: what the wire answers (`refuse`), or a page or an OAuth error renders. */
export interface Refusal {
  status: number;
  code: WireErrorCode;
  message: string;
  headers?: Record<string, string>;
}

export function refuse(res: ServerResponse, r: Refusal): void {
  sendError(res, r.status, r.code, r.message, r.headers);
}

/** A refusal the client should retry later: HTTP 429 with Retry-After, MCP "BUSY: ...". */
export class RetryLater extends ScratchRunError {
  constructor(
    message: string,
    readonly retryAfterS: number,
  ) {
    super("BUSY", message);
  }
}

/** The HTTP status of each engine code (docs/ARCHITECTURE.md, "Failure model"). */
const STATUS: Record<ErrorCode, number> = {
  INVALID_INPUT: 400,
  NOT_READY: 503,
  BUSY: 429,
  SANDBOX_FAILED: 500,
  WORKER_LOST: 502,
  SESSION_NOT_FOUND: 404,
  SESSION_LOST: 410,
  INTERNAL: 500,
};

/** An engine's error as every server answers it: NOT_READY and RetryLater say when to retry. */
export function refusalOf(e: ScratchRunError): Refusal {
  const retryAfterS = e instanceof RetryLater ? e.retryAfterS : e.code === "NOT_READY" ? 2 : 0;
  return {
    status: STATUS[e.code],
    code: e.code,
    message: e.message,
    ...(retryAfterS > 0 ? { headers: { "Retry-After": String(retryAfterS) } } : {}),
  };
}

/**
 * Answers what a route's engine call threw: its refusal, nothing when the client has gone, and
 * anything but the engine's error thrown on (the server logs it and answers 500).
 */
export function answerError(res: ServerResponse, e: unknown): void {
  if (res.destroyed) return;
  if (!isScratchRunError(e)) throw e;
  refuse(res, refusalOf(e));
}

/** Aborted when the client goes away before its answer is written whole (a call then ends). */
export function closeSignal(res: ServerResponse): AbortSignal {
  const controller = new AbortController();
  res.once("close", () => {
    if (!res.writableFinished) controller.abort();
  });
  return controller.signal;
}
