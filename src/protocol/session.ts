/**
 * Drives one agent session over a byte stream (docs/PROTOCOL.md): wait for `R`, send `Q`, collect
 * `S`/`O`/`E`/`X`/`F`/`D` in order, re-checking every cap the request set. Whatever the agent does
 * wrong becomes `outcome.failure`; the promise rejects only for host bugs (an unencodable request).
 */
import {
  encodeKill,
  encodeRequest,
  FrameDecoder,
  MAX_DISPLAYS,
  MAX_STREAM_RUNS,
  type AgentExit,
  type AgentFrame,
} from "./codec.js";
import { LIMITS } from "../schema/limits.js";
import {
  PROTOCOL_VERSION,
  type AgentEvent,
  type AgentOutcome,
  type AgentRequest,
  type ReturnedFile,
  type ShownEvent,
} from "./types.js";

export type SessionFailure = NonNullable<AgentOutcome["failure"]>;

export interface AgentSessionIo {
  /** Bytes from the agent. */
  input: NodeJS.ReadableStream;
  /** Bytes to the agent. */
  output: NodeJS.WritableStream;
}

export interface AgentSessionOptions {
  /** Abort = cancel: before `Q` the session ends at once; after it, `K` is sent and the agent
   * gets killGraceMs to report (reason `killed`) before the session gives up with `aborted`. */
  signal: AbortSignal;
  /** Wall-clock budget for the whole session from this call, READY wait included. On expiry `K`
   * is sent (best effort) and the outcome fails with `host_deadline`. */
  hardDeadlineMs: number;
  onEvent?: (e: AgentEvent) => void;
  /** The backend already consumed `R` with waitForReady (warm pool): send `Q` at once. */
  alreadyReady?: boolean;
  /** After `K` for an abort, how long to wait for `X`..`D`. Default 2000 ms. */
  killGraceMs?: number;
  /**
   * From `X` on, the returned files get at least this long to arrive (default
   * DEFAULT_COLLECT_MS), whatever is left of hardDeadlineMs: the code's deadline bounds the
   * code, and on a loaded TCG host a few MiB of files can take seconds to cross the channel.
   */
  collectMs?: number;
  /**
   * A session's call: after `D` the stream is left paused for the session's next call instead of
   * drained (the agent sends nothing until it reads the next `Q`).
   */
  keepOpen?: boolean;
}

export type ReadyResult = { ok: true; version: number } | { ok: false; failure: SessionFailure };

const DEFAULT_KILL_GRACE_MS = 2000;
/** The files' own bound after `X`: 6 MiB at most, at ~0.3 MiB/s on a host loaded with warm-ups. */
export const DEFAULT_COLLECT_MS = 20_000;

/** Streams get one permanent no-op error listener: a late EPIPE must not crash the server. */
const guarded = new WeakSet<object>();
function guardErrors(stream: NodeJS.EventEmitter): void {
  if (guarded.has(stream)) return;
  guarded.add(stream);
  stream.on("error", () => {});
}

function isEnded(input: NodeJS.ReadableStream): boolean {
  const r = input as NodeJS.ReadableStream & { readableEnded?: boolean; destroyed?: boolean };
  return r.readableEnded === true || r.destroyed === true;
}

/**
 * Reads until the agent's `R` frame and stops, leaving the stream paused, so a warm pool can hold a
 * ready sandbox and later call runAgentSession with alreadyReady. Anything but exactly one `R`
 * with this protocol version is a failure; so is EOF or abort.
 */
export function waitForReady(
  input: NodeJS.ReadableStream,
  signal: AbortSignal,
): Promise<ReadyResult> {
  return new Promise((resolve) => {
    const decoder = new FrameDecoder();
    let settled = false;
    let unlisten = () => {};
    const settle = (r: ReadyResult) => {
      if (settled) return;
      settled = true;
      unlisten();
      input.pause();
      resolve(r);
    };
    const onData = (chunk: Buffer | string) => {
      const batch = decoder.push(typeof chunk === "string" ? Buffer.from(chunk) : chunk);
      const first = batch.frames[0];
      if (batch.error !== null) return settle(fail("protocol", batch.error));
      if (!first) return;
      if (first.type !== "ready") return settle(fail("protocol", `expected R, got ${first.type}`));
      if (first.version !== PROTOCOL_VERSION)
        return settle(
          fail("protocol", `agent speaks version ${first.version}, host ${PROTOCOL_VERSION}`),
        );
      if (batch.frames.length > 1 || decoder.buffered > 0)
        return settle(fail("protocol", "agent sent data after R before Q"));
      settle({ ok: true, version: first.version });
    };
    const onEnd = () => settle(fail("eof", "agent stream ended before R"));
    const onError = (e: Error) => settle(fail("eof", `agent stream error before R: ${e.message}`));
    const onAbort = () => settle(fail("aborted", "aborted while waiting for R"));
    if (signal.aborted) return onAbort();
    guardErrors(input);
    unlisten = listen(input, signal, { data: onData, end: onEnd, error: onError, abort: onAbort });
    if (isEnded(input)) return onEnd();
    input.resume();
  });
}

/**
 * Listens to the agent's stream (its bytes, its end or close, its errors) and to the abort;
 * returns what removes every one of those listeners again.
 */
function listen(
  input: NodeJS.ReadableStream,
  signal: AbortSignal,
  on: {
    data: (chunk: Buffer | string) => void;
    end: () => void;
    error: (e: Error) => void;
    abort: () => void;
  },
): () => void {
  input.on("data", on.data);
  input.on("end", on.end);
  input.on("close", on.end);
  input.on("error", on.error);
  signal.addEventListener("abort", on.abort);
  return () => {
    input.removeListener("data", on.data);
    input.removeListener("end", on.end);
    input.removeListener("close", on.end);
    input.removeListener("error", on.error);
    signal.removeEventListener("abort", on.abort);
  };
}

function fail(
  kind: SessionFailure["kind"],
  detail: string,
): { ok: false; failure: SessionFailure } {
  return { ok: false, failure: { kind, detail } };
}

type Phase = "await_ready" | "await_start" | "running" | "files" | "done";

/**
 * Runs one request on an agent. Resolves with everything collected so far in every case; check
 * `failure` (null = the agent finished the protocol: `D` arrived). A completed session after an
 * abort has failure null and exit reason `killed`; the caller knows it aborted.
 */
export function runAgentSession(
  io: AgentSessionIo,
  request: AgentRequest,
  options: AgentSessionOptions,
): Promise<AgentOutcome> {
  const q = encodeRequest(request); // throws for a host bug, before any I/O
  const { input, output } = io;
  return new Promise((resolve) => {
    const decoder = new FrameDecoder();
    // Each stream's bytes so far, and the most the request lets the agent send of it.
    const streams = {
      stdout: { chunks: [] as Uint8Array[], bytes: 0, max: request.maxStdoutBytes },
      stderr: { chunks: [] as Uint8Array[], bytes: 0, max: request.maxStderrBytes },
    };
    let fileBytes = 0;
    // The streams' runs and the display channel's outputs, in order; the output being received.
    const shown: ShownEvent[] = [];
    let streamRuns = 0;
    let lastDisplayAt = -1; // index in shown of the latest output
    let display: { chunks: Uint8Array[]; bytes: number } | null = null;
    let displays = 0;
    let displayBytes = 0;
    const files: ReturnedFile[] = [];
    let exit: AgentExit | null = null;
    let started = false;
    let qSentAt = 0;
    let startedAfterMs: number | null = null;
    let pid: number | null = null;
    let phase: Phase = options.alreadyReady ? "await_start" : "await_ready";
    let killSent = false;
    let graceTimer: NodeJS.Timeout | undefined;
    let settled = false;
    let unlisten = () => {};
    let collectFrom = () => {};

    const emit = (e: AgentEvent) => {
      try {
        options.onEvent?.(e);
      } catch {
        // A progress callback must not break the session.
      }
    };
    const finish = (failure: SessionFailure | null) => {
      if (settled) return;
      settled = true;
      phase = "done";
      clearTimeout(deadline);
      clearTimeout(graceTimer);
      unlisten();
      // Keep the stream flowing with no listener: later bytes are discarded and 'end' still
      // comes, so a child process's 'close' is never held up by unread output. A session whose
      // call ended with D keeps it for the next one.
      if (options.keepOpen && failure === null) input.pause();
      else input.resume();
      resolve({
        exit,
        stdout: Buffer.concat(streams.stdout.chunks, streams.stdout.bytes),
        stderr: Buffer.concat(streams.stderr.chunks, streams.stderr.bytes),
        shown,
        files,
        failure,
        startedAfterMs,
        pid,
      });
    };
    const violation = (detail: string) => finish({ kind: "protocol", detail });
    const write = (b: Buffer) => {
      try {
        output.write(b);
      } catch {
        // Reported through 'error' / EOF on input.
      }
    };
    const sendKill = () => {
      if (killSent || phase === "await_ready") return;
      killSent = true;
      write(encodeKill());
    };
    const sendRequest = () => {
      phase = "await_start";
      qSentAt = Date.now();
      write(q);
    };

    const handle = (f: AgentFrame): string | null => {
      switch (phase) {
        case "await_ready":
          if (f.type !== "ready") return `expected R, got ${f.type}`;
          if (f.version !== PROTOCOL_VERSION)
            return `agent speaks version ${f.version}, host ${PROTOCOL_VERSION}`;
          sendRequest();
          return null;
        case "await_start":
          if (f.type === "started") {
            started = true;
            startedAfterMs = Date.now() - qSentAt;
            pid = f.pid;
            phase = "running";
            emit({ type: "started" });
            return null;
          }
          if (f.type === "exit") return onExit(f.exit);
          return `expected S or X, got ${f.type}`;
        case "running":
          if (f.type === "stdout" || f.type === "stderr") return onStream(f.type, f.data);
          if (f.type === "display") return onDisplay(f.data);
          if (f.type === "display_end") {
            if (!display) displays++; // an output with no bytes forwarded (past a bound, or empty)
            const content = Buffer.concat(display?.chunks ?? [], display?.bytes ?? 0);
            lastDisplayAt = shown.length;
            shown.push({ kind: "display", content, end: f.end });
            display = null;
            return null;
          }
          if (f.type === "exit")
            return display ? "X inside an output (Y without Z)" : onExit(f.exit);
          return `expected O, E, Y, Z or X, got ${f.type}`;
        case "files":
          if (f.type === "file") return onFile(f.file);
          if (f.type === "done") {
            if (files.length !== expectedFiles())
              return `D after ${files.length} of ${expectedFiles()} F`;
            finish(null);
            return null;
          }
          return `expected F or D, got ${f.type}`;
        case "done":
          return null;
      }
    };
    /**
     * A stream's bytes join its run when nothing came between them, and past MAX_STREAM_RUNS its
     * latest run since the last output.
     */
    const streamRun = (stream: "stdout" | "stderr", bytes: number) => {
      const last = shown[shown.length - 1];
      if (last?.kind === "stream" && last.stream === stream) {
        last.bytes += bytes;
        return;
      }
      if (streamRuns >= MAX_STREAM_RUNS)
        for (let i = shown.length - 1; i > lastDisplayAt; i--) {
          const e = shown[i];
          if (e?.kind === "stream" && e.stream === stream) {
            e.bytes += bytes;
            return;
          }
        }
      streamRuns++;
      shown.push({ kind: "stream", stream, bytes });
    };
    /** Bytes of stdout or stderr: kept up to the request's bound for it, then a violation. */
    const onStream = (stream: "stdout" | "stderr", data: Uint8Array): string | null => {
      const s = streams[stream];
      if (s.bytes + data.length > s.max)
        return `${stream} beyond ${stream === "stdout" ? "maxStdoutBytes" : "maxStderrBytes"}`;
      s.bytes += data.length;
      s.chunks.push(data);
      streamRun(stream, data.length);
      emit({ type: stream, chunk: data });
      return null;
    };
    /** Bytes of an output: the agent forwards at most LIMITS.outputs of them. */
    const onDisplay = (data: Uint8Array): string | null => {
      if (!display) {
        displays++;
        if (displays > MAX_DISPLAYS) return "Y beyond the output count";
        display = { chunks: [], bytes: 0 };
      }
      if (display.bytes + data.length > LIMITS.outputs.maxBytes)
        return "Y beyond an output's bytes";
      displayBytes += data.length;
      if (displayBytes > LIMITS.outputs.maxTotalBytes) return "Y beyond the outputs' total bytes";
      display.chunks.push(data);
      display.bytes += data.length;
      return null;
    };
    const expectedFiles = () =>
      exit && (exit.reason === "spawn_failed" || exit.reason === "setup_failed")
        ? 0
        : request.returnFiles.length;
    const onExit = (e: AgentExit): string | null => {
      const failedToStart = e.reason === "spawn_failed" || e.reason === "setup_failed";
      if (started && failedToStart) return `X ${e.reason} after S`;
      if (!started && !failedToStart) return `X ${e.reason} without S`;
      if (e.stdoutTruncated && streams.stdout.bytes !== streams.stdout.max)
        return "stdout_truncated without a full stdout";
      if (e.stderrTruncated && streams.stderr.bytes !== streams.stderr.max)
        return "stderr_truncated without a full stderr";
      if (e.reason === "output_limit" && !e.stdoutTruncated && !e.stderrTruncated)
        return "output_limit without a truncated stream";
      exit = e;
      phase = "files";
      collectFrom();
      emit({ type: "exited" });
      emit({ type: "collecting" });
      return null;
    };
    const onFile = (file: ReturnedFile): string | null => {
      const i = files.length;
      if (i >= expectedFiles()) return "more F frames than requested return files";
      if (file.path !== request.returnFiles[i]) return `F ${i} names a path that was not requested`;
      if (file.status === "ok") {
        if (file.content.length > request.maxFileBytes) return `F ${i} beyond maxFileBytes`;
        fileBytes += file.content.length;
        if (fileBytes > request.maxTotalFileBytes) return "F content beyond maxTotalFileBytes";
      }
      files.push(file);
      return null;
    };

    const onData = (chunk: Buffer | string) => {
      if (settled) return;
      const batch = decoder.push(typeof chunk === "string" ? Buffer.from(chunk) : chunk);
      for (const f of batch.frames) {
        const err = handle(f);
        if (err !== null) return violation(err);
        if (settled) return;
      }
      if (batch.error !== null) violation(batch.error);
    };
    const onEnd = () => finish({ kind: "eof", detail: `agent stream ended (${phase})` });
    const onError = (e: Error) =>
      finish({ kind: "eof", detail: `agent stream error: ${e.message}` });
    const onAbort = () => {
      if (settled) return;
      if (phase === "await_ready") return finish({ kind: "aborted", detail: "aborted before Q" });
      sendKill();
      graceTimer ??= setTimeout(
        () => finish({ kind: "aborted", detail: "agent did not finish after K" }),
        options.killGraceMs ?? DEFAULT_KILL_GRACE_MS,
      );
    };
    const sessionStart = Date.now();
    const expire = (detail: string) => () => {
      sendKill();
      finish({ kind: "host_deadline", detail });
    };
    let deadline = setTimeout(
      expire(`no D within ${options.hardDeadlineMs} ms`),
      options.hardDeadlineMs,
    );
    /** At X: the files get collectMs from now unless the session's own deadline is later. */
    collectFrom = () => {
      const collect = options.collectMs ?? DEFAULT_COLLECT_MS;
      if (sessionStart + options.hardDeadlineMs - Date.now() >= collect) return;
      clearTimeout(deadline);
      deadline = setTimeout(expire(`no D within ${collect} ms of X`), collect);
    };

    guardErrors(input);
    guardErrors(output);
    unlisten = listen(input, options.signal, {
      data: onData,
      end: onEnd,
      error: onError,
      abort: onAbort,
    });
    if (options.signal.aborted) return finish({ kind: "aborted", detail: "aborted before Q" });
    if (phase === "await_start") sendRequest();
    if (isEnded(input)) return onEnd();
    input.resume();
  });
}
