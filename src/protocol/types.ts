/**
 * Types shared by the host side of the agent protocol (docs/PROTOCOL.md) and the backends.
 * A backend provides a byte stream to an agent; `runAgentSession` drives it with these types.
 */

export const PROTOCOL_VERSION = 4;

/** What the host asks the agent to run: the `Q` frame, before encoding. */
export interface AgentRequest {
  timeoutMs: number;
  maxStdoutBytes: number;
  maxStderrBytes: number;
  maxFileBytes: number;
  maxTotalFileBytes: number;
  /** uid/gid to run the code as; null keeps the agent's own uid (namespace backend). */
  uid: number | null;
  gid: number | null;
  cwd: string;
  argv: string[];
  /** The code's whole environment, NAME → value. */
  env: Record<string, string>;
  files: AgentFile[];
  returnFiles: string[];
  /**
   * A session's call (docs/decisions/0013-sessions.md): the agent keeps the sandbox after `D` and
   * reads the next `Q`. `kernel`: the script that keeps the interpreter (`argv[0] kernel`) between
   * calls, which runs the code file in it; null: the code runs as a process of its own each time.
   * Absent: one call, and the agent exits after `D`. `adopt`: a session with no kernel yet may
   * make the sandbox's pre-started interpreter its kernel (the agent does only when a fresh
   * kernel would have started exactly as it was started).
   */
  session?: { kernel: string | null; adopt?: boolean };
  /**
   * The host's wall clock (ms since the epoch) for an agent on a kernel of its own (microVM) to set
   * before the call: a session's VM stands still while paused, its clock with it. Absent (0): the
   * clock is left as it is.
   */
  clockMs?: number;
}

export interface AgentFile {
  path: string;
  mode: number;
  content: Uint8Array;
}

/** Why the user code stopped, as the agent saw it (`X` frame reason). */
export type AgentExitReason =
  "exited" | "signaled" | "timeout" | "output_limit" | "killed" | "spawn_failed" | "setup_failed";

export type ReturnFileStatus =
  "ok" | "missing" | "not_regular" | "too_large" | "total_limit" | "error";

export interface ReturnedFile {
  path: string;
  status: ReturnFileStatus;
  size: number;
  content: Uint8Array;
}

/**
 * How an output on the display channel ended (`Z`): forwarded whole; past a bound (LIMITS.outputs:
 * what came of it is dropped); cut off (its writer died, or a session's cell ended, mid-output).
 */
export type DisplayEnd = "whole" | "over" | "cut";

/**
 * What the code wrote and showed, in the order the agent forwarded it (docs/decisions/0017-outputs.md):
 * a run of one stream (its bytes, which are in `stdout` / `stderr`), or one output of the display
 * channel with its bytes as the code sent them (unparsed: the engine parses them).
 */
export type ShownEvent =
  | { kind: "stream"; stream: "stdout" | "stderr"; bytes: number }
  | { kind: "display"; content: Uint8Array; end: DisplayEnd };

/** Everything one agent session produced. Produced by runAgentSession, never thrown. */
export interface AgentOutcome {
  /** null when the agent never sent `X` (died, misbehaved, or the host deadline hit). */
  exit: {
    reason: AgentExitReason;
    value: number;
    stdoutTruncated: boolean;
    stderrTruncated: boolean;
    durationMs: number;
    oomKills: number;
    message: string;
  } | null;
  stdout: Uint8Array;
  stderr: Uint8Array;
  /** The streams' runs and the displayed outputs, in order. */
  shown: ShownEvent[];
  files: ReturnedFile[];
  /** Set when the session ended abnormally: protocol violation, EOF, host deadline, abort. */
  failure: null | {
    kind: "protocol" | "eof" | "host_deadline" | "aborted";
    detail: string;
  };
  /** ms from sending `Q` to `S` (sandbox start overhead inside the agent). */
  startedAfterMs: number | null;
  /**
   * The code's pid in the sandbox, from `S`; null without `S`. A session's kernel keeps its pid
   * from call to call, so a new one means a fresh interpreter.
   */
  pid: number | null;
}

/** Progress a session reports while it runs (for MCP progress notifications). */
export type AgentEvent =
  | { type: "started" }
  | { type: "stdout"; chunk: Uint8Array }
  | { type: "stderr"; chunk: Uint8Array }
  | { type: "exited" }
  | { type: "collecting" };
