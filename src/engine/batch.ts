/**
 * One call over many inputs (`inputs`, issue 53): the same code once per input, each in its own
 * fresh sandbox, at most `width` at once, answered in the inputs' order with a summary. The
 * runner is the same wherever entries run: the local engine's queue (stdio), a key's service
 * (each input a run of the key, within its concurrency), an API replica (each input placed on a
 * worker as a call is). Pure apart from the `run` it is given.
 */
import type { Isolation } from "../backends/types.js";
import { isScratchRunError } from "../errors.js";
import type { BatchResult, ExecRequest, ExitReason } from "../schema/exec.js";
import { LIMITS } from "../schema/limits.js";
import { cancelledOutcome, type ExecOutcome } from "./result.js";

/** How a call's inputs went: its schema is the answer's (batchSummarySchema). */
export type BatchSummary = BatchResult["summary"];

export interface BatchOutcome {
  /** One per input, in the inputs' order, each a single call's outcome. */
  entries: ExecOutcome[];
  summary: BatchSummary;
}

/**
 * Per stream, what each input's result shows at most: the answer is shared, so n inputs show
 * what one call may between them, in bytes (shownOutputBytes.max) and in the characters a client
 * takes (answerChars: each input's two streams sit in its text and its structured result, with
 * room for the rest of it), never under shownOutputBytes.min each.
 */
export function batchStreamCap(n: number): number {
  const bytes = Math.floor(LIMITS.shownOutputBytes.max / n);
  const chars = Math.floor(LIMITS.answerChars.max / (5 * n));
  return Math.max(LIMITS.shownOutputBytes.min, Math.min(bytes, chars));
}

/**
 * Each input's own request: the call's, with the input's env and files laid over the call's (an
 * input's name wins) and its streams shown within its share of the answer. The schema checked
 * every overlay, alone and laid over (checkInputs), before this runs.
 */
export function entryRequests(req: ExecRequest): ExecRequest[] {
  const { inputs, ...call } = req;
  if (!inputs) return [req];
  const cap = batchStreamCap(inputs.length);
  return inputs.map((entry) => ({
    ...call,
    env: { ...call.env, ...entry.env },
    files: { ...call.files, ...entry.files },
    max_output_bytes: Math.min(call.max_output_bytes, cap),
  }));
}

/** The median by nearest rank (the smaller middle of an even count), 0 for none. */
function p50(values: readonly number[]): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.ceil(sorted.length / 2) - 1] ?? 0;
}

export function summarize(
  entries: readonly ExecOutcome[],
  wallMs: number,
  concurrency: number,
): BatchSummary {
  const reasons: Partial<Record<ExitReason, number>> = {};
  for (const e of entries) reasons[e.result.exit_reason] = (reasons[e.result.exit_reason] ?? 0) + 1;
  const durations = entries.map((e) => e.result.duration_ms);
  const passed = reasons.ok ?? 0;
  return {
    count: entries.length,
    passed,
    failed: entries.length - passed,
    exit_reasons: reasons,
    duration_p50_ms: p50(durations),
    duration_max_ms: durations.length ? Math.max(...durations) : 0,
    wall_ms: Math.round(wallMs),
    concurrency,
  };
}

/**
 * An input that never ran (its start failed, or the caller's concurrency never freed within the
 * wait): answered as a cancelled call, saying why, so the other inputs' results are kept.
 */
export function notRunOutcome(
  req: ExecRequest,
  isolation: string,
  wallMs: number,
  error: unknown,
): ExecOutcome {
  const outcome = cancelledOutcome(req, isolation as Isolation, wallMs);
  const why = isScratchRunError(error)
    ? `${error.code}: ${error.message}`
    : `INTERNAL: ${error instanceof Error ? error.message : String(error)}`;
  outcome.result.message = `This input did not run (${why}).`;
  return outcome;
}

export interface RunBatchOptions {
  /** Inputs at once at most (at least 1). */
  width: number;
  /** What runs one input: its outcome, or a throw (answered with notRunOutcome). */
  run: (req: ExecRequest, index: number) => Promise<ExecOutcome>;
  /** For an input that threw: the isolation its result names. */
  isolation: string;
  /**
   * Whether a throw ends the whole call instead (rethrown, once no input is running): the first
   * input's refusal before anything ran, e.g. the key's quota, is the call's refusal.
   */
  refuses?: (error: unknown, index: number, anyRan: boolean) => boolean;
  signal?: AbortSignal | undefined;
  /** Each input's outcome as it comes (in the order they end). */
  onDone?: (index: number, outcome: ExecOutcome) => void;
}

/**
 * Runs every input of `req`, at most `width` at once, each when the one before it in line has
 * started; answers in the inputs' order.
 */
export async function runBatch(req: ExecRequest, o: RunBatchOptions): Promise<BatchOutcome> {
  const requests = entryRequests(req);
  const width = Math.max(1, Math.min(o.width, requests.length));
  const entries: (ExecOutcome | undefined)[] = new Array(requests.length);
  const started = Date.now();
  let next = 0;
  let anyRan = false;
  let refusal: { error: unknown } | null = null;
  const lane = async () => {
    for (;;) {
      const i = next++;
      const entry = requests[i];
      if (entry === undefined || refusal) return;
      const at = Date.now();
      // Cancelled (the caller went away): the inputs not yet started are not started.
      if (o.signal?.aborted) {
        entries[i] = cancelledOutcome(entry, o.isolation as Isolation, 0);
        continue;
      }
      try {
        entries[i] = await o.run(entry, i);
        anyRan = true;
      } catch (e) {
        if (o.refuses?.(e, i, anyRan) && !refusal) {
          refusal = { error: e };
          return;
        }
        entries[i] = notRunOutcome(entry, o.isolation, Date.now() - at, e);
      }
      o.onDone?.(i, entries[i]);
    }
  };
  await Promise.all(Array.from({ length: width }, lane));
  // A refusal while other inputs ran anyway: those are answered, the rest said not to have run.
  if (refusal) {
    const { error } = refusal;
    if (!anyRan) throw error;
    requests.forEach((entry, i) => {
      entries[i] ??= notRunOutcome(entry, o.isolation, 0, error);
    });
  }
  const done = requests.map(
    (entry, i) =>
      entries[i] ?? notRunOutcome(entry, o.isolation, 0, new Error("no result was recorded")),
  );
  // Streams cut to the input's share of the answer are named so.
  const cap = batchStreamCap(requests.length);
  if (cap < req.max_output_bytes)
    for (const e of done) {
      const r = e.result;
      if (r.stdout_omitted_bytes > 0 || r.stderr_omitted_bytes > 0) {
        const note = `Each stream shows at most ${cap} bytes here, not max_output_bytes=${req.max_output_bytes}: ${requests.length} inputs share one answer.`;
        r.message = r.message ? `${r.message} ${note}` : note;
      }
    }
  return { entries: done, summary: summarize(done, Date.now() - started, width) };
}
