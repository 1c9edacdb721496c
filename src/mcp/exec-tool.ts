import { z } from "zod";
import type { Engine, Progress } from "../engine/engine.js";
import { isScratchRunError } from "../errors.js";
import { execInputSchema, execOutputSchema } from "../schema/exec.js";
import { LIMITS } from "../schema/limits.js";
import { parseExecRequest } from "../schema/validate.js";
import { fitAnswerBudget } from "./answer-budget.js";
import { toContentBlocks } from "./content.js";
import { LineStreamer } from "./stream-log.js";

export const EXEC_TOOL_NAME = "scratchrun_exec";

export function execToolDefinition(isolation: string, networkNote: string) {
  return {
    name: EXEC_TOOL_NAME,
    title: "Run code in a fresh sandbox",
    description: [
      "Runs code in a fresh, isolated sandbox that is destroyed after the call, and returns stdout,",
      "stderr, exit code and any files you ask for. Nothing persists between calls: each call starts",
      "from a clean machine, so send everything the code needs in `code` and `files`.",
      "Runtimes: python3.12 and python3.11 (python3.11 has numpy, pandas, matplotlib, pillow, scipy),",
      "node20, bash. Working directory /home/user; /tmp and the working directory are writable and",
      "RAM-backed. Save plots to a file (e.g. /tmp/plot.png) and list it in `return_files`: PNG, JPG",
      "and SVG come back as images.",
      `Limits: timeout_ms default ${LIMITS.timeoutMs.default}, max ${LIMITS.timeoutMs.max};`,
      `memory_mb default ${LIMITS.memoryMb.default}, max ${LIMITS.memoryMb.max};`,
      `stdout/stderr are stopped at ${LIMITS.outputBytes.default / 1024} KiB each, and output past max_output_bytes`,
      `(default ${LIMITS.shownOutputBytes.default / 1024} KiB per stream) comes back as head and tail;`,
      `up to ${LIMITS.returnFiles.maxCount} return files.`,
      "Pass secrets in `env`, never inside `code`; their values are redacted from the output.",
      "Call scratchrun_runtimes for exact versions and preinstalled packages.",
      `Isolation on this server: ${isolation}. Network: ${networkNote}.`,
    ].join(" "),
    inputSchema: z.toJSONSchema(execInputSchema, { io: "input" }),
    outputSchema: z.toJSONSchema(execOutputSchema),
    annotations: {
      title: "Run code in a fresh sandbox",
      readOnlyHint: false,
      destructiveHint: false,
      idempotentHint: false,
      openWorldHint: true,
    },
  };
}

export interface ToolCallContext {
  signal: AbortSignal;
  /** Progress notifications, when the client sent a progress token. */
  sendProgress?: (progress: number, message: string) => Promise<void>;
  /** Output as logging messages, when the client asked for logging. */
  sendLog?: (stream: "stdout" | "stderr", text: string) => Promise<void>;
}

const STAGE_MESSAGES: Record<Exclude<Progress["stage"], "output">, string> = {
  queued: "queued",
  starting: "starting sandbox",
  running: "running",
  collecting: "collecting files",
};

/** How often a running call reports its elapsed time. */
const PROGRESS_TICK_MS = 1000;

/** Handles one tools/call: bad input and engine failures become isError results, never throws. */
export async function callExecTool(
  engine: Pick<Engine, "execute">,
  args: unknown,
  ctx: ToolCallContext,
) {
  let req;
  try {
    req = parseExecRequest(args);
  } catch (e) {
    return errorResult(e);
  }
  // Progress is the elapsed time in ms: it only ever grows, as the protocol asks.
  const started = Date.now();
  let last = -1;
  const progress = (message: string) => {
    last = Math.max(last + 1, Date.now() - started);
    ctx.sendProgress?.(last, message).catch(() => {});
  };
  let ticker: NodeJS.Timeout | undefined;
  const sendLog = ctx.sendLog;
  const lines = sendLog
    ? new LineStreamer(
        (stream, text) => void sendLog(stream, text).catch(() => {}),
        req.redact_env ? req.env : null,
      )
    : null;
  try {
    const outcome = await engine.execute(req, {
      signal: ctx.signal,
      onProgress: (p) => {
        if (p.stage === "output") return lines?.push(p.stream, p.chunk);
        progress(STAGE_MESSAGES[p.stage]);
        if (p.stage === "running" && ctx.sendProgress && !ticker)
          ticker = setInterval(
            () => progress(`running, ${Math.round((Date.now() - started) / 1000)} s elapsed`),
            PROGRESS_TICK_MS,
          );
        if (p.stage === "collecting") clearInterval(ticker);
      },
    });
    lines?.flush();
    const answer = fitAnswerBudget(outcome);
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

function errorResult(e: unknown) {
  const text = isScratchRunError(e)
    ? `${e.code}: ${e.message}`
    : `INTERNAL: ${e instanceof Error ? e.message : String(e)}`;
  return { content: [{ type: "text" as const, text }], isError: true };
}
