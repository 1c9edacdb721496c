/**
 * scratchrun_session_start and scratchrun_session_end (docs/decisions/0013-sessions.md): the
 * tools that open and close a sandbox kept between calls. scratchrun_exec's session_id runs a
 * call in one.
 */
import type { Tool } from "@modelcontextprotocol/server";
import { z } from "zod";
import { isScratchRunError, ScratchRunError } from "../errors.js";
import { formatIssues } from "../schema/validate.js";
import { LIMITS } from "../schema/limits.js";
import type { CallPolicy } from "../schema/policy.js";
import {
  sessionEndShape,
  sessionInfoSchema,
  sessionStartShapeFor,
  type SessionInfo,
} from "../schema/session.js";
import { VIEW_TOOL_META } from "./view.js";

export const SESSION_START_TOOL = "scratchrun_session_start";
export const SESSION_END_TOOL = "scratchrun_session_end";

/** A caller's sessions, as the MCP server reaches them (bound to the caller). */
export interface SessionOps {
  start(input: unknown, signal?: AbortSignal): Promise<SessionInfo>;
  end(id: string): Promise<SessionInfo>;
}

export const isSessionTool = (name: string): boolean =>
  name === SESSION_START_TOOL || name === SESSION_END_TOOL;

const minutes = (ms: number) => `${ms / 60_000} min`;

export function sessionToolDefinitions(policy: CallPolicy) {
  const { idleTimeoutMs, lifetimeMs } = LIMITS.session;
  return [
    sessionTool({
      name: SESSION_START_TOOL,
      title: "Start a session (a sandbox kept between calls)",
      description: [
        "Starts a session: one isolated sandbox that your scratchrun_exec calls with its session_id",
        "run in, one at a time, instead of a fresh one each. Files in /home/user and /tmp stay from",
        "call to call; for python and node the interpreter stays too, notebook-style (variables,",
        "imports, functions), and each call's code runs in it as a cell: its last expression is shown",
        "(a DataFrame as a table, a figure as an image), display() shows anything mid-cell, and",
        "figures left open are shown at the cell's end. bash calls share the",
        "files. A call that ends the interpreter (a crash, os._exit, the timeout) keeps the files and",
        'the next call gets a fresh interpreter (its result says interpreter: "fresh").',
        `The session ends after idle_timeout_ms without a call (default ${minutes(idleTimeoutMs.default)}),`,
        `lifetime_ms after its start (default ${minutes(lifetimeMs.default)}), or at`,
        "scratchrun_session_end; then everything in it is destroyed. Use a session when later steps",
        "need earlier results (load data once, then explore); otherwise call scratchrun_exec alone.",
      ].join(" "),
      input: sessionStartShapeFor(policy),
      hints: { title: "Start a session", destructiveHint: false },
    }),
    sessionTool({
      name: SESSION_END_TOOL,
      title: "End a session",
      description:
        "Ends a session started with scratchrun_session_start: a call still running in it is cancelled, and its sandbox, files and interpreter are destroyed.",
      input: sessionEndShape,
      hints: { title: "End a session", destructiveHint: true },
    }),
  ];
}

/** A session tool as tools/list gives it: its input, the session it answers with, its hints. */
function sessionTool(t: {
  name: string;
  title: string;
  description: string;
  input: z.ZodRawShape;
  hints: { title: string; destructiveHint: boolean };
}) {
  return {
    name: t.name,
    title: t.title,
    description: t.description,
    inputSchema: z.toJSONSchema(z.strictObject(t.input), { io: "input" }) as Tool["inputSchema"],
    outputSchema: z.toJSONSchema(sessionInfoSchema) as Tool["outputSchema"],
    // The result view shows the session and the cells this client holds (view.ts).
    _meta: VIEW_TOOL_META,
    annotations: {
      title: t.hints.title,
      readOnlyHint: false,
      destructiveHint: t.hints.destructiveHint,
      idempotentHint: false,
      openWorldHint: false,
    },
  };
}

function refused(e: unknown) {
  const text = isScratchRunError(e)
    ? `${e.code}: ${e.message}`
    : `INTERNAL: ${e instanceof Error ? e.message : String(e)}`;
  return { content: [{ type: "text" as const, text }], isError: true };
}

function answer(info: SessionInfo, said: string) {
  return {
    content: [{ type: "text" as const, text: `${said}\n${JSON.stringify(info)}` }],
    structuredContent: info,
  };
}

/** Runs one of the session tools; bad input and refusals are isError results, never throws. */
export async function callSessionTool(
  ops: SessionOps,
  name: string,
  args: unknown,
  signal: AbortSignal,
) {
  try {
    if (name === SESSION_START_TOOL) {
      const info = await ops.start(args, signal);
      return answer(
        info,
        `Session ${info.session_id} started (${info.runtime}, ${info.memory_mb} MB, network ${info.network}, ${info.isolation}); pass session_id to scratchrun_exec. It ends at ${info.expires_at} at the latest.`,
      );
    }
    const parsed = z.strictObject(sessionEndShape).safeParse(args);
    if (!parsed.success)
      return refused(
        new ScratchRunError(
          "INVALID_INPUT",
          `Invalid request: ${formatIssues(parsed.error.issues)}`,
        ),
      );
    const info = await ops.end(parsed.data.session_id);
    return answer(
      info,
      `Session ${info.session_id} ended after ${info.calls} calls; its sandbox is destroyed.`,
    );
  } catch (e) {
    return refused(e);
  }
}
