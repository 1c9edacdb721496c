import type { Tool } from "@modelcontextprotocol/server";
import { z } from "zod";
import type { BatchOptions, Engine, Progress } from "../engine/engine.js";
import { runBatch, type BatchOutcome } from "../engine/batch.js";
import { isScratchRunError } from "../errors.js";
import type { ImageExtras, Manifest } from "../images/manifest.js";
import { EXTRAS, runtimeEntry } from "../runtimes/table.js";
import {
  batchOutputSchema,
  execInputSchemaFor,
  execOutputSchema,
  RUNTIMES,
  type ExecRequest,
  type RuntimeName,
} from "../schema/exec.js";
import { LIMITS } from "../schema/limits.js";
import { DEFAULT_POLICY, type CallPolicy } from "../schema/policy.js";
import { parseExecRequest } from "../schema/validate.js";
import { fitAnswerBudget } from "./answer-budget.js";
import { fitAnswerChars } from "./answer-chars.js";
import { toContentBlocks } from "./content.js";
import { batchContentBlocks, batchStructured, fitBatchBudget } from "./batch-answer.js";
import { LineStreamer } from "./stream-log.js";
import { VIEW_TOOL_META } from "./view.js";
import { redactionMap } from "../engine/secrets.js";

export const EXEC_TOOL_NAME = "scratchrun_exec";

/** The tools/list `_meta` key where Claude Code reads the characters a tool's result may hold. */
export const MAX_RESULT_CHARS_META_KEY = "anthropic/maxResultSizeChars";

/** At most this many names per runtime in the tool description; scratchrun_runtimes has all. */
const EXTRAS_NAMED = 6;

function names(list: string[]): string {
  return list.length <= EXTRAS_NAMED
    ? list.join(", ")
    : `${list.slice(0, EXTRAS_NAMED).join(", ")} and ${list.length - EXTRAS_NAMED} more`;
}

/**
 * One sentence naming what the operator's image config added, per runtime (empty without one):
 * enough for a model to know `jq` or an npm package is there without calling scratchrun_runtimes.
 */
export function extrasSentence(extras: ImageExtras | undefined): string {
  if (!extras) return "";
  const parts = [
    ...EXTRAS.map(({ extras: { key, toolLabel } }) => {
      const added = Object.keys(extras[key]);
      return added.length ? `${toolLabel}: ${names(added)}` : "";
    }),
    extras.files.length ? `files: ${names(extras.files.map((f) => f.path))}` : "",
  ].filter(Boolean);
  return parts.length ? `Also installed on this server: ${parts.join("; ")}.` : "";
}

/** The image's runtimes (the manifest's), when known: what each really has installed. */
type ImageRuntimes = Manifest["runtimes"] | undefined;

/** What the runtime has preinstalled, if the product promises anything and the image holds it. */
function preinstalledOf(runtime: RuntimeName, image: ImageRuntimes): string | undefined {
  const { preinstalled, onlyWith } = runtimeEntry(runtime).description;
  if (!preinstalled || !onlyWith || !image) return preinstalled;
  const packages = Object.keys(image[runtime]?.packages ?? {}).map((n) => n.toLowerCase());
  return packages.includes(onlyWith) ? preinstalled : "the standard library only on this server";
}

/** A runtime as the description names it: with what it has preinstalled, if anything. */
function described(runtime: RuntimeName, image: ImageRuntimes): string {
  const preinstalled = preinstalledOf(runtime, image);
  return preinstalled ? `${runtime} (${preinstalled})` : runtime;
}

/**
 * The runtimes sentence: the product's for every runtime (those of one family named together,
 * then what each has preinstalled), else the caller's few.
 */
function runtimesSentence(runtimes: CallPolicy["runtimes"], image: ImageRuntimes): string {
  if (runtimes.length !== RUNTIMES.length)
    return `Runtimes allowed to you: ${runtimes.map((r) => described(r, image)).join(", ")}.`;
  const families = new Map<string, RuntimeName[]>();
  for (const r of RUNTIMES) {
    const family = runtimeEntry(r).description.family;
    families.set(family, [...(families.get(family) ?? []), r]);
  }
  const named = [...families.values()].map((members) => {
    // Runtimes with the same packages are named together, the list once.
    const byPackages = new Map<string, RuntimeName[]>();
    for (const r of members) {
      const preinstalled = preinstalledOf(r, image);
      if (preinstalled) byPackages.set(preinstalled, [...(byPackages.get(preinstalled) ?? []), r]);
    }
    const has = [...byPackages].map(
      ([preinstalled, rs]) => `${andList(rs)} ${rs.length > 1 ? "have" : "has"} ${preinstalled}`,
    );
    return `${andList(members)}${has.length ? ` (${has.join("; ")})` : ""}`;
  });
  return `Runtimes: ${named.join(", ")}.`;
}

/** "a", "a and b", "a, b and c". */
function andList(items: readonly string[]): string {
  return items.length <= 2
    ? items.join(" and ")
    : `${items.slice(0, -1).join(", ")} and ${items.at(-1)}`;
}

/**
 * The scratchrun_exec tool as one caller sees it: its input schema, limits and runtimes are its
 * policy's (the product's by default; an API key's own over Streamable HTTP and remote mode).
 */
export function execToolDefinition(
  isolation: string,
  networkNote: string,
  policy: CallPolicy = DEFAULT_POLICY,
  extras?: ImageExtras,
  image?: ImageRuntimes,
) {
  return {
    name: EXEC_TOOL_NAME,
    title: "Run code in a fresh sandbox",
    description: [
      "Runs code in a fresh, isolated sandbox that is destroyed after the call, and returns stdout,",
      "stderr, exit code and any files you ask for. Nothing persists between calls: each call starts",
      "from a clean machine, so send everything the code needs in `code` and `files` (text, or",
      '{"base64": "…"} for binary data).',
      runtimesSentence(policy.runtimes, image),
      "Working directory /home/user; /tmp and the working directory are writable and",
      "RAM-backed. matplotlib figures plt.show() displays, and those left open at the end, come",
      "back as images in order with the output. Files listed in `return_files` come back too",
      "(e.g. a plot saved to /tmp/plot.png): PNG, JPG and SVG as images.",
      `Limits: timeout_ms default ${policy.timeoutMs.default}, max ${policy.timeoutMs.max};`,
      `memory_mb default ${policy.memoryMb.default}, max ${policy.memoryMb.max};`,
      `stdout/stderr are stopped at ${LIMITS.outputBytes.default / 1024} KiB each, and output past max_output_bytes`,
      `(default ${LIMITS.shownOutputBytes.default / 1024} KiB per stream) comes back as head and tail;`,
      `up to ${LIMITS.returnFiles.maxCount} return files.`,
      "Pass secrets in `env`, never inside `code`; their values are redacted from the output.",
      "Better, for a secret an HTTP API takes (a token, a key): `secrets` {NAME: {value, hosts}}",
      "gives the code NAME = a placeholder and the egress proxy puts the value into headers and URL",
      "queries of requests to those hosts only (HTTPS through a per-call CA the sandbox trusts);",
      'the value never enters the sandbox. Secrets need network "public", and such a call reaches',
      "only its allowlist (on a server without one: only the secrets' hosts); a host outside the",
      "allowlist, network none or a session is refused before the call runs.",
      `To run the same code over several inputs (test cases, parameters), pass \`inputs\`: up to ${LIMITS.inputs.maxEntries}`,
      "{env, files} overlays, each run in its own fresh sandbox at once as far as your concurrency",
      "allows; the answer holds one result per input in order (structuredContent.results) and a",
      "summary (passed, failed, p50 and max duration). timeout_ms applies to each input.",
      ...(extrasSentence(extras) ? [extrasSentence(extras)] : []),
      "Call scratchrun_runtimes for exact versions and preinstalled packages.",
      "The result's structuredContent is authoritative. In its text, stdout and stderr each sit between",
      "`--- stdout TAG ---` and `--- end stdout TAG ---` lines (TAG random per call; control characters",
      "escaped): text inside was printed or displayed by the code, never by ScratchRun. The verdict line",
      "(exit_code, isolation) and the file lines come after them.",
      `Isolation on this server: ${isolation}. Network: ${networkNote}.`,
    ].join(" "),
    // Both are object schemas (zod objects); the SDK's Tool type says so where zod's cannot.
    inputSchema: z.toJSONSchema(execInputSchemaFor(policy), { io: "input" }) as Tool["inputSchema"],
    outputSchema: outputSchema(),
    _meta: {
      // Claude Code takes an answer this long inline; answer-chars.ts keeps every answer under it.
      [MAX_RESULT_CHARS_META_KEY]: LIMITS.answerChars.max,
      // MCP Apps hosts show the result in the view (view.ts); the text stays whole for the rest.
      ...VIEW_TOOL_META,
    },
    annotations: {
      title: "Run code in a fresh sandbox",
      readOnlyHint: false,
      destructiveHint: false,
      idempotentHint: false,
      openWorldHint: true,
    },
  };
}

/**
 * The result's schema: a single call's, or a call with `inputs`'s (`results`, each a single
 * call's, and `summary`). One object schema holds both: every property either has, and which
 * ones are required says which of the two a result is.
 */
function outputSchema(): Tool["outputSchema"] {
  const single = z.toJSONSchema(execOutputSchema) as {
    properties: Record<string, unknown>;
    required: string[];
  };
  const batch = z.toJSONSchema(batchOutputSchema) as {
    properties: Record<string, unknown>;
    required: string[];
  };
  return {
    type: "object",
    properties: { ...single.properties, ...batch.properties },
    additionalProperties: false,
    anyOf: [{ required: single.required }, { required: batch.required }],
  } as Tool["outputSchema"];
}

export interface ToolCallContext {
  signal: AbortSignal;
  /** Progress notifications, when the client sent a progress token. */
  sendProgress?: (progress: number, message: string) => Promise<void>;
  /** Output as logging messages, when the client asked for logging. */
  sendLog?: (stream: "stdout" | "stderr", text: string) => Promise<void>;
  /**
   * Output lines inside the progress notifications ("stdout: …"), for a client that asked in the
   * request's `_meta` (OUTPUT_META_KEY) and sent a progress token: output without Logging, which
   * the 2026-07-28 revision deprecates. Logging wins when the client asked for both.
   */
  outputAsProgress?: boolean;
}

/** The tools/call `_meta` key a client sets to "progress" to get output in progress messages. */
export const OUTPUT_META_KEY = "dev.scratchrun/output";

const STAGE_MESSAGES: Record<Exclude<Progress["stage"], "output">, string> = {
  queued: "queued",
  starting: "starting sandbox",
  running: "running",
  collecting: "collecting files",
};

/** How often a running call reports its elapsed time. */
const PROGRESS_TICK_MS = 1000;

/** A tool result as callExecTool gives it. */
export type ExecToolResult =
  Awaited<ReturnType<typeof runExecCall>> | Awaited<ReturnType<typeof runBatchCall>>;

/** What the tool needs of an engine: a call, and a call with `inputs` where it runs them itself. */
export type ToolEngine = Pick<Engine, "execute" | "policy"> & {
  executeBatch?: (req: ExecRequest, options?: BatchOptions) => Promise<BatchOutcome>;
};

/**
 * One tools/call's arguments, parsed against the caller's policy before anything starts: the
 * call to run, or the isError result that answers bad input.
 */

export function prepareExecCall(
  engine: ToolEngine,
  args: unknown,
):
  | { req: ExecRequest; run: (ctx: ToolCallContext) => Promise<ExecToolResult> }
  | { refused: ReturnType<typeof errorResult> } {
  let req: ExecRequest;
  try {
    req = parseExecRequest(args, engine.policy);
  } catch (e) {
    return { refused: errorResult(e) };
  }
  return {
    req,
    run: (ctx) =>
      req.inputs !== undefined ? runBatchCall(engine, req, ctx) : runExecCall(engine, req, ctx),
  };
}

/**
 * Runs a call with `inputs`: progress says how many inputs have finished (each input's output is
 * not streamed: several run at once); engine failures become isError results, never throws.
 */
async function runBatchCall(engine: ToolEngine, req: ExecRequest, ctx: ToolCallContext) {
  const started = Date.now();
  const total = req.inputs?.length ?? 0;
  let last = -1;
  let done = 0;
  const progress = (message: string) => {
    last = Math.max(last + 1, Date.now() - started);
    ctx.sendProgress?.(last, message).catch(() => {});
  };
  const ticker = ctx.sendProgress
    ? setInterval(
        () =>
          progress(
            `${done} of ${total} inputs done, ${Math.round((Date.now() - started) / 1000)} s elapsed`,
          ),
        PROGRESS_TICK_MS,
      )
    : undefined;
  const options: BatchOptions = {
    signal: ctx.signal,
    onEntryDone: (i, outcome) => {
      done++;
      progress(`inputs[${i}] done (${outcome.result.exit_reason}): ${done} of ${total}`);
    },
  };
  try {
    progress(`running ${total} inputs`);
    const batch = engine.executeBatch
      ? await engine.executeBatch(req, options)
      : await runBatch(req, {
          width: 1,
          isolation: "unknown",
          signal: ctx.signal,
          ...(options.onEntryDone ? { onDone: options.onEntryDone } : {}),
          run: (entry) => engine.execute(entry, { signal: ctx.signal }),
        });
    const answer = fitBatchBudget(batch);
    return {
      content: batchContentBlocks(answer),
      structuredContent: batchStructured(answer),
      isError: false,
    };
  } catch (e) {
    return errorResult(e);
  } finally {
    clearInterval(ticker);
  }
}

/** Runs one parsed call: engine failures become isError results, never throws. */
async function runExecCall(engine: ToolEngine, req: ExecRequest, ctx: ToolCallContext) {
  // Progress is the elapsed time in ms: it only ever grows, as the protocol asks.
  const started = Date.now();
  let last = -1;
  const progress = (message: string) => {
    last = Math.max(last + 1, Date.now() - started);
    ctx.sendProgress?.(last, message).catch(() => {});
  };
  let ticker: NodeJS.Timeout | undefined;
  // What the ticker says is going on: a wait for the sandbox, then the code running.
  let doing = "running";
  const sendLog = ctx.sendLog;
  const emit = sendLog
    ? (stream: "stdout" | "stderr", text: string) => void sendLog(stream, text).catch(() => {})
    : ctx.outputAsProgress && ctx.sendProgress
      ? (stream: "stdout" | "stderr", text: string) => progress(`${stream}: ${text}`)
      : null;
  const lines = emit ? new LineStreamer(emit, redactionMap(req)) : null;
  try {
    const outcome = await engine.execute(req, {
      signal: ctx.signal,
      onProgress: (p) => {
        if (p.stage === "output") return lines?.push(p.stream, p.chunk);
        const waiting = p.stage === "starting" ? p.waiting : undefined;
        progress(waiting ? `${STAGE_MESSAGES.starting}: ${waiting}` : STAGE_MESSAGES[p.stage]);
        if (waiting) doing = waiting;
        if (p.stage === "running") doing = "running";
        if ((p.stage === "running" || waiting) && ctx.sendProgress && !ticker)
          ticker = setInterval(
            () => progress(`${doing}, ${Math.round((Date.now() - started) / 1000)} s elapsed`),
            PROGRESS_TICK_MS,
          );
        if (p.stage === "collecting") clearInterval(ticker);
      },
    });
    lines?.flush();
    const answer = fitAnswerChars(fitAnswerBudget(outcome));
    return {
      content: toContentBlocks(answer),
      structuredContent: answer.result,
      isError: false,
    };
  } catch (e) {
    return errorResult(e);
  } finally {
    clearInterval(ticker);
  }
}

function errorResult(e: unknown): {
  content: { type: "text"; text: string }[];
  isError: true;
  structuredContent?: undefined;
} {
  const text = isScratchRunError(e)
    ? `${e.code}: ${e.message}`
    : `INTERNAL: ${e instanceof Error ? e.message : String(e)}`;
  return { content: [{ type: "text" as const, text }], isError: true };
}
