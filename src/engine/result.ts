import type { BackendOutcome } from "../backends/types.js";
import type { ExecRequest, ExecResult, ExitReason } from "../schema/exec.js";
import { mimeTypeOf } from "./mime.js";

const decoder = new TextDecoder("utf-8", { fatal: false });

export interface FileOut {
  path: string;
  mimeType: string;
  content: Buffer;
}

/** The engine's answer: the structured result plus the bytes of every returned file. */
export interface ExecOutcome {
  result: ExecResult;
  files: FileOut[];
}

/**
 * Maps what the backend saw onto the one result shape. The first termination reason wins:
 * cancellation, then the agent's own verdict (timeout, output limit), then OOM, then how the
 * process ended.
 */
export function toExecOutcome(
  req: ExecRequest,
  outcome: BackendOutcome,
  wallMs: number,
  cancelled: boolean,
): ExecOutcome {
  const { agent } = outcome;
  const exit = agent.exit;
  let reason: ExitReason;
  let exitCode: number | null = null;
  let signal: number | null = null;
  let message: string | undefined;

  if (cancelled || exit?.reason === "killed" || agent.failure?.kind === "aborted") {
    reason = "cancelled";
  } else if (exit?.reason === "timeout" || agent.failure?.kind === "host_deadline") {
    reason = "timeout";
    message = `The code ran past timeout_ms=${req.timeout_ms} and was stopped.`;
  } else if (exit?.reason === "output_limit") {
    reason = "output_limit";
    message = "The code wrote more output than the cap and was stopped; output is truncated.";
  } else if (outcome.oomKilled) {
    reason = "oom";
    message = `The code ran out of memory (memory_mb=${req.memory_mb}).`;
    if (exit?.reason === "signaled") signal = exit.value;
  } else if (exit?.reason === "exited") {
    exitCode = exit.value;
    reason = exit.value === 0 ? "ok" : "error";
  } else if (exit?.reason === "signaled") {
    signal = exit.value;
    reason = "killed";
    message = `The code was killed by signal ${exit.value}.`;
  } else {
    reason = "killed";
    message = `The sandbox ended before the code finished (${agent.failure?.detail ?? exit?.message ?? "unknown"}); it was destroyed.`;
  }

  const files: FileOut[] = [];
  const infos = agent.files.map((f) => {
    const mimeType = mimeTypeOf(f.path);
    if (f.status === "ok") files.push({ path: f.path, mimeType, content: Buffer.from(f.content) });
    return { path: f.path, status: f.status, size_bytes: f.size, mime_type: mimeType };
  });

  const result: ExecResult = {
    stdout: decoder.decode(agent.stdout),
    stderr: decoder.decode(agent.stderr),
    exit_code: exitCode,
    exit_reason: reason,
    signal,
    duration_ms: Math.round(exit?.durationMs ?? wallMs),
    isolation: outcome.isolation,
    network: req.network,
    stdout_truncated: exit?.stdoutTruncated ?? false,
    stderr_truncated: exit?.stderrTruncated ?? false,
    files: infos,
  };
  if (message) result.message = message;
  if (outcome.blockedConnections !== undefined)
    result.network_blocked_packets = outcome.blockedConnections;
  return { result, files };
}
