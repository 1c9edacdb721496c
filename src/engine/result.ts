import type { BackendOutcome, Isolation } from "../backends/types.js";
import type { ExecRequest, ExecResult, ExitReason } from "../schema/exec.js";
import { LIMITS } from "../schema/limits.js";
import { formatBytes } from "../schema/limits-doc.js";
import { isTextMime, mimeTypeOf } from "./mime.js";
import { outputsOf, type OutputImage } from "./outputs.js";
import { headTail, redactSecrets } from "./shape-output.js";
import { redactionMap } from "./secrets.js";

const decoder = new TextDecoder("utf-8", { fatal: false });

export interface FileOut {
  path: string;
  mimeType: string;
  content: Buffer;
}

/**
 * The engine's answer: the structured result plus the bytes of every returned file and of every
 * image among its outputs.
 */
export interface ExecOutcome {
  result: ExecResult;
  files: FileOut[];
  images: OutputImage[];
}

interface Verdict {
  reason: ExitReason;
  exitCode: number | null;
  signal: number | null;
  message?: string;
}

/**
 * The first termination reason wins: cancellation, then the agent's own verdict (timeout, output
 * limit), then OOM, then how the process ended.
 */
function verdict(req: ExecRequest, outcome: BackendOutcome, cancelled: boolean): Verdict {
  const { exit, failure } = outcome.agent;
  if (cancelled || exit?.reason === "killed" || failure?.kind === "aborted")
    return {
      reason: "cancelled",
      exitCode: null,
      signal: null,
      message: "The call was cancelled.",
    };
  if (exit?.reason === "timeout" || failure?.kind === "host_deadline")
    return {
      reason: "timeout",
      exitCode: null,
      signal: null,
      message: `The code ran past timeout_ms=${req.timeout_ms} and was stopped.`,
    };
  if (exit?.reason === "output_limit")
    return {
      reason: "output_limit",
      exitCode: null,
      signal: null,
      message: `The code wrote more output than the ${formatBytes(LIMITS.outputBytes.max)} cap and was stopped; output is truncated.`,
    };
  if (outcome.oomKilled)
    return {
      reason: "oom",
      exitCode: null,
      signal: exit?.reason === "signaled" ? exit.value : null,
      message: `The code ran out of memory (memory_mb=${req.memory_mb}).`,
    };
  if (exit?.reason === "exited")
    return { reason: exit.value === 0 ? "ok" : "error", exitCode: exit.value, signal: null };
  if (exit?.reason === "signaled")
    return {
      reason: "killed",
      exitCode: null,
      signal: exit.value,
      message: `The code was killed by signal ${exit.value}.`,
    };
  return {
    reason: "killed",
    exitCode: null,
    signal: null,
    message: `The sandbox ended before the code finished (${failure?.detail ?? exit?.message ?? "unknown"}); it was destroyed.`,
  };
}

/** Why the host stopped reading a session, in words for a result (never sandbox-chosen text). */
function lostReason(failure: NonNullable<BackendOutcome["agent"]["failure"]>): string {
  switch (failure.kind) {
    case "host_deadline":
      return "the sandbox did not finish sending files before the call's deadline (timeout_ms plus the host's grace)";
    case "eof":
      return "the sandbox's connection closed while files were being sent (the sandbox stopped)";
    case "aborted":
      return "the call was cancelled while files were being sent";
    case "protocol":
      return "the sandbox sent a malformed file report";
  }
}

/** Maps what the backend saw onto the one result shape, shaped for a model to read. */
export function toExecOutcome(
  req: ExecRequest,
  outcome: BackendOutcome,
  wallMs: number,
  cancelled: boolean,
): ExecOutcome {
  const { agent } = outcome;
  const v = verdict(req, outcome, cancelled);
  // Env values when redact_env, secrets' values always (engine/secrets.ts).
  const hidden = redactionMap(req);
  const redact = (text: string) => redactSecrets(text, hidden);
  const stdout = headTail(redact(decoder.decode(agent.stdout)), req.max_output_bytes);
  const stderrText = redact(decoder.decode(agent.stderr));
  const stderr = headTail(stderrText, req.max_output_bytes);
  const shown = outputsOf(req, agent.shown, stderrText, v.reason === "error", redact);

  const files: FileOut[] = [];
  const received = new Set(agent.files.map((f) => f.path));
  const infos = agent.files.map((f) => {
    const mimeType = mimeTypeOf(f.path);
    if (f.status === "ok") {
      let content = Buffer.from(f.content);
      if (isTextMime(mimeType)) {
        const text = content.toString("utf8");
        const redacted = redactSecrets(text, hidden);
        if (redacted !== text) content = Buffer.from(redacted, "utf8");
      }
      files.push({ path: f.path, mimeType, content });
    }
    return {
      path: f.path,
      status: f.status,
      size_bytes: f.size,
      mime_type: mimeType,
      ...(f.status === "error"
        ? { message: "the sandbox could not read it (an I/O error inside the sandbox)" }
        : {}),
    };
  });
  // A sandbox that broke off after its exit report still owes the files it never sent: each says
  // why the host stopped listening (the session's failure as the host saw it).
  const lost = agent.failure
    ? `never sent: ${lostReason(agent.failure)}`
    : "never sent: the sandbox ended before sending it";
  for (const path of req.return_files)
    if (!received.has(path))
      infos.push({
        path,
        status: "error",
        size_bytes: 0,
        mime_type: mimeTypeOf(path),
        message: lost,
      });

  const exit = agent.exit;
  const result: ExecResult = {
    stdout: stdout.text,
    stderr: stderr.text,
    exit_code: v.exitCode,
    exit_reason: v.reason,
    signal: v.signal,
    duration_ms: Math.round(exit?.durationMs ?? wallMs),
    isolation: outcome.isolation,
    network: req.network,
    stdout_truncated: (exit?.stdoutTruncated ?? false) || stdout.omittedBytes > 0,
    stderr_truncated: (exit?.stderrTruncated ?? false) || stderr.omittedBytes > 0,
    stdout_omitted_bytes: stdout.omittedBytes,
    stderr_omitted_bytes: stderr.omittedBytes,
    files: infos,
    outputs: shown.outputs,
  };
  if (shown.leftOut) result.outputs_left_out = shown.leftOut;
  const lateFailure =
    agent.exit && agent.failure
      ? `The sandbox broke off after the code finished (${agent.failure.detail}); files it did not send are marked error.`
      : undefined;
  const message = [v.message, lateFailure].filter(Boolean).join(" ");
  if (message) result.message = message;
  const net = outcome.network;
  if (net) {
    result.network_blocked_packets = net.blockedPackets;
    if (net.refused) result.network_refused = net.refused.map((r) => ({ ...r }));
    if (net.refusedDropped) result.network_refused_omitted = net.refusedDropped;
    if (net.hostDropped) result.network_reason = hostDroppedReason(net.hostDropped);
  }
  return { result, files, images: shown.images };
}

/** Why a "public" call's packets did not all leave: the host's firewall, after ours. */
export function hostDroppedReason(packets: number): string {
  return (
    `the host's own firewall dropped ${packets} packet${packets === 1 ? "" : "s"} this sandbox ` +
    "sent after ScratchRun's filter let them out (a forward chain whose policy drops, such as " +
    "Docker's, ufw's or firewalld's), so the internet was not reachable; the server's operator " +
    "can let the sandbox links through it (scratchrun doctor names the chain)"
  );
}

/**
 * The answer to a call cancelled before any sandbox ran it (in the engine's queue, or between an
 * API replica's attempts): what a call cancelled before its request reached the agent gets,
 * `exit_reason: "cancelled"`, no output, and each requested return file `error`.
 */
export function cancelledOutcome(
  req: ExecRequest,
  isolation: Isolation,
  wallMs: number,
): ExecOutcome {
  return toExecOutcome(
    req,
    {
      agent: {
        exit: null,
        stdout: new Uint8Array(),
        stderr: new Uint8Array(),
        shown: [],
        files: [],
        failure: { kind: "aborted", detail: "cancelled before a sandbox ran it" },
        startedAfterMs: null,
        pid: null,
      },
      isolation,
      oomKilled: false,
      sandboxReadyMs: 0,
    },
    wallMs,
    true,
  );
}
