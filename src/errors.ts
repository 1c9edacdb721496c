/**
 * The one error class the engine throws, with string codes documented here (and, rendered from
 * `ERROR_CODE_MEANINGS`, in ARCHITECTURE's "Failure model"). What the sandboxed program does wrong
 * is never an error: it is a result with an exit_reason.
 */
export const ERROR_CODES = [
  "INVALID_INPUT",
  "NOT_READY",
  "BUSY",
  "SANDBOX_FAILED",
  "WORKER_LOST",
  "SESSION_NOT_FOUND",
  "SESSION_LOST",
  "INTERNAL",
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

/** What each code means, as the docs say it. */
export const ERROR_CODE_MEANINGS: Readonly<Record<ErrorCode, string>> = {
  INVALID_INPUT: "the request failed validation; nothing was started",
  NOT_READY: "the host cannot run sandboxes (missing image, bwrap, QEMU, cgroups)",
  BUSY: "admission refused: the queue is full, or the call waited past its deadline (a call cancelled while queued is a result: `cancelled`)",
  SANDBOX_FAILED:
    "the sandbox could not be set up (boot, agent never ready) or torn down; a sandbox that breaks off once the call runs is a result (`killed`)",
  WORKER_LOST:
    "(API replicas) the worker running the call stopped answering mid-call; the call may or may not have run to its end and is never re-run",
  SESSION_NOT_FOUND:
    "a `session_id` that names no session of this caller: never started, ended, expired, or another caller's (the same answer for each)",
  SESSION_LOST:
    "a session of this caller whose sandbox's process died without ending it (a worker lost, a server killed): it is over and is never re-created",
  INTERNAL: "a bug in ScratchRun",
};

export class ScratchRunError extends Error {
  readonly code: ErrorCode;
  /** What the user or operator can do about it. */
  readonly fix: string | undefined;

  constructor(code: ErrorCode, message: string, options: { fix?: string; cause?: unknown } = {}) {
    super(options.fix ? `${message}. ${options.fix}` : message, { cause: options.cause });
    this.name = "ScratchRunError";
    this.code = code;
    this.fix = options.fix;
  }
}

export function isScratchRunError(e: unknown): e is ScratchRunError {
  return e instanceof ScratchRunError;
}
