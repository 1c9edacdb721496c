import {
  CLIENT_CAPABILITIES_META_KEY,
  LOG_LEVEL_META_KEY,
  MissingRequiredClientCapabilityError,
  ProtocolError,
  ProtocolErrorCode,
  RELATED_TASK_META_KEY,
  Server,
} from "@modelcontextprotocol/server";
import { SERVER_ICONS } from "./icon.js";
import type { JSONRPCRequest, Result, ServerContext } from "@modelcontextprotocol/server";
import { AsyncLocalStorage } from "node:async_hooks";
import type { Engine, EngineOptions } from "../engine/engine.js";
import { policyKey } from "../schema/policy.js";
import { VERSION } from "../version.js";
import { z } from "zod";
import {
  EXEC_TOOL_NAME,
  execToolDefinition,
  OUTPUT_META_KEY,
  prepareExecCall,
  type ExecToolResult,
  type ToolCallContext,
} from "./exec-tool.js";
import { isTerminal, TASK_KEEP_MS, type TaskRecord, type TaskRegistry } from "./tasks.js";
import type { PoolsReport } from "../backends/types.js";
import { callRuntimesTool, RUNTIMES_TOOL_NAME, runtimesToolDefinition } from "./runtimes-tool.js";
import { readView, VIEW_RESOURCE, VIEW_URI } from "./view.js";
import {
  callSessionTool,
  isSessionTool,
  sessionToolDefinitions,
  type SessionOps,
} from "./session-tools.js";

/**
 * What the MCP server needs of an engine: the local Engine, the HTTP service's per-key view of
 * it, or the remote client that forwards to a ScratchRun server.
 */
export type ExecEngine = Pick<Engine, "execute" | "networkNote" | "policy"> & {
  /** A call with `inputs` (src/engine/batch.ts), run within this caller's concurrency. */
  executeBatch?: Engine["executeBatch"];
  readonly backend: { readonly isolation: string; pools?(): PoolsReport };
  readonly options: Pick<EngineOptions, "runtimes">;
  /**
   * Sessions for this caller (bound to it), where the engine keeps them; absent (an API replica
   * of a cluster, remote mode): the session tools are not listed.
   */
  readonly sessionOps?: SessionOps | undefined;
};

/** The server's identity as every client shows it (initialize result, or 2026 result `_meta`). */
export const SERVER_INFO = {
  name: "scratchrun",
  title: "ScratchRun",
  version: VERSION,
  icons: SERVER_ICONS,
} as const;

/**
 * tools/call `arguments` exactly as the transport parsed them. The SDK validates a request with
 * its schema and hands the handler a copy, and that copy drops an own `__proto__` key, so a call
 * carrying one would run instead of being refused: parseExecRequest must see the untouched
 * object. The SDK's handler-wrapping hook sees the request before its copy; this carries the
 * request's own arguments from there to the handler.
 */
/** One tools/call as the handler hook saw it, and the task handle that answers it, if any. */
interface CallSlot {
  arguments: unknown;
  task?: Result;
}

class RawArgumentsServer extends Server {
  static readonly current = new AsyncLocalStorage<CallSlot>();

  protected override _wrapHandler(
    method: string,
    handler: (request: JSONRPCRequest, ctx: ServerContext) => Promise<Result>,
  ): (request: JSONRPCRequest, ctx: ServerContext) => Promise<Result> {
    const wrapped = super._wrapHandler(method, handler);
    if (method !== "tools/call") return wrapped;
    // A call answered with a task handle returns the handle past the SDK's CallToolResult check
    // (the handler leaves it in `task` and returns an empty result for the check).
    return (request, ctx) => {
      const slot: CallSlot = {
        arguments: (request.params as { arguments?: unknown } | undefined)?.arguments,
      };
      return RawArgumentsServer.current.run(slot, async () => {
        const result = await wrapped(request, ctx);
        return slot.task ?? result;
      });
    };
  }
}

/** The 2026-07-28 tasks extension's name, as clients declare it and servers advertise it. */
export const TASKS_EXTENSION = "io.modelcontextprotocol/tasks";

/** A 2026 request's declared extensions (its `_meta` envelope's client capabilities). */
function declaresTasks(ctx: ServerContext): boolean {
  const envelope = ctx.mcpReq.envelope as Record<string, unknown> | undefined;
  const caps = envelope?.[CLIENT_CAPABILITIES_META_KEY] as
    { extensions?: Record<string, unknown> } | undefined;
  return caps?.extensions?.[TASKS_EXTENSION] !== undefined;
}

const iso = (ms: number) => new Date(ms).toISOString();

/** A task as a 2025-11-25 client reads it (tasks/get, tasks/list, CreateTaskResult.task). */
function task2025(r: TaskRecord, pollInterval: number) {
  return {
    taskId: r.taskId,
    status: r.status,
    ttl: r.ttlMs,
    createdAt: iso(r.createdAt),
    lastUpdatedAt: iso(r.lastUpdatedAt),
    ...(isTerminal(r.status) ? {} : { pollInterval }),
    ...(r.statusMessage !== undefined ? { statusMessage: r.statusMessage } : {}),
  };
}

/** A task as a 2026-07-28 client reads it: with its result or error inline once finished. */
function task2026(r: TaskRecord, pollIntervalMs: number) {
  return {
    taskId: r.taskId,
    status: r.status,
    createdAt: iso(r.createdAt),
    lastUpdatedAt: iso(r.lastUpdatedAt),
    ttlMs: r.ttlMs,
    pollIntervalMs,
    ...(r.statusMessage !== undefined ? { statusMessage: r.statusMessage } : {}),
    ...(r.end && r.status === "completed" && "result" in r.end ? { result: r.end.result } : {}),
    ...(r.end && r.status === "failed" && "error" in r.end ? { error: r.end.error } : {}),
  };
}

const notFound = () =>
  new ProtocolError(ProtocolErrorCode.InvalidParams, "Failed to retrieve task: Task not found");
const TaskIdParams = z.looseObject({ taskId: z.string().min(1).max(200) });

/** How the MCP server runs tasks: in this registry, for this owner. */
export interface McpTaskOptions {
  registry: TaskRegistry;
  /** Whose tasks these are: the API key's id over HTTP, one constant over stdio. */
  owner: string;
  /**
   * A 2026 call from a client that declared the tasks extension becomes a task when it is still
   * running after this long; a 2025 client asks for a task itself (`params.task`).
   */
  taskAfterMs: number;
}

type ExecToolDefinition = ReturnType<typeof execToolDefinition>;
/** Per runtime image (its manifest object), per policy key. */
const definitions = new WeakMap<object, Map<string, ExecToolDefinition>>();
const NO_IMAGE = {};

/**
 * scratchrun_exec as this engine's caller sees it now (a session's key may be updated meanwhile),
 * built once per distinct policy, isolation and network note: a 2026 request builds a server per
 * request, and the schema should not be rebuilt with it.
 */
function toolDefinition(engine: ExecEngine): ExecToolDefinition {
  const key = `${policyKey(engine.policy)}\n${engine.backend.isolation}\n${engine.networkNote}`;
  const image = engine.options.runtimes ?? NO_IMAGE;
  let forImage = definitions.get(image);
  if (!forImage) definitions.set(image, (forImage = new Map()));
  let definition = forImage.get(key);
  if (!definition) {
    definition = execToolDefinition(
      engine.backend.isolation,
      engine.networkNote,
      engine.policy,
      engine.options.runtimes?.extras,
      engine.options.runtimes?.runtimes,
    );
    // A few policies in use at once; a long-running service with many past ones starts afresh.
    if (forImage.size >= 64) forImage.clear();
    forImage.set(key, definition);
  }
  return definition;
}

/** Levels at which a call's output is streamed as logging messages. */
const OUTPUT_LEVELS = new Set(["debug", "info"]);

/**
 * An MCP server exposing `scratchrun_exec` on top of one engine; transport- and era-agnostic.
 * stdio pins one per connection; Streamable HTTP builds one per legacy session or per 2026
 * request, so it holds no state a request of the other era could need.
 */
export function createMcpServer(engine: ExecEngine, tasks?: McpTaskOptions): Server {
  const server = new RawArgumentsServer(SERVER_INFO, {
    capabilities: {
      tools: {},
      logging: {},
      // One resource: the result view the tools name for MCP Apps hosts (view.ts).
      resources: {},
      ...(tasks
        ? {
            // 2025-11-25 reads `tasks`; 2026-07-28 reads the extension (and drops `tasks`).
            tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } },
            extensions: { [TASKS_EXTENSION]: {} },
          }
        : {}),
    },
    instructions: engine.sessionOps
      ? "scratchrun_exec runs code in a fresh sandbox per call; nothing persists between calls unless you start a session (scratchrun_session_start) and pass its session_id."
      : "scratchrun_exec runs code in a fresh sandbox per call; nothing persists between calls.",
  });
  const definition = () => toolDefinition(engine);

  // A 2025 connection asks for output once (logging/setLevel, kept per session); a 2026 request
  // carries its level in its own _meta. Either way only "info" or more verbose streams output.
  const sessionLevels = new Map<string | undefined, string>();
  server.setRequestHandler("logging/setLevel", async (request, ctx) => {
    sessionLevels.set(ctx.sessionId, request.params.level);
    return {};
  });
  const wantsOutput = (ctx: ServerContext): boolean => {
    const level = ctx.mcpReq.envelope
      ? ctx.mcpReq.envelope[LOG_LEVEL_META_KEY as keyof typeof ctx.mcpReq.envelope]
      : sessionLevels.get(ctx.sessionId);
    return typeof level === "string" && OUTPUT_LEVELS.has(level);
  };

  server.setRequestHandler("tools/list", async () => ({
    tools: [
      tasks ? { ...definition(), execution: { taskSupport: "optional" as const } } : definition(),
      runtimesToolDefinition,
      ...(engine.sessionOps ? sessionToolDefinitions(engine.policy) : []),
    ],
  }));

  server.setRequestHandler("resources/list", async () => ({ resources: [VIEW_RESOURCE] }));
  server.setRequestHandler("resources/templates/list", async () => ({ resourceTemplates: [] }));
  server.setRequestHandler("resources/read", async (request) => {
    if (request.params.uri !== VIEW_URI)
      throw new ProtocolError(
        ProtocolErrorCode.ResourceNotFound,
        `Resource ${request.params.uri} not found: this server has one, ${VIEW_URI}`,
      );
    return readView();
  });

  server.setRequestHandler("tools/call", async (request, ctx) => {
    const { name } = request.params;
    if (name === RUNTIMES_TOOL_NAME) return callRuntimesTool(engine);
    if (engine.sessionOps && isSessionTool(name)) {
      const slot = RawArgumentsServer.current.getStore();
      return callSessionTool(engine.sessionOps, name, slot?.arguments ?? {}, ctx.mcpReq.signal);
    }
    if (name !== EXEC_TOOL_NAME)
      throw new ProtocolError(ProtocolErrorCode.InvalidParams, `Unknown tool ${name}`);
    const slot = RawArgumentsServer.current.getStore();
    const call = prepareExecCall(engine, slot?.arguments ?? {});
    const project = (result: ExecToolResult) =>
      server.projectCallToolResult(result, definition().outputSchema);
    if ("refused" in call) return project(call.refused);

    const modern = ctx.mcpReq.envelope !== undefined;
    const asTask = tasks && (modern ? declaresTasks(ctx) : request.params.task !== undefined);
    // Notifications go out while the request is open; a call that became a task sends none.
    let detached = false;
    const notify = (n: Parameters<typeof ctx.mcpReq.notify>[0]) =>
      detached ? Promise.resolve() : ctx.mcpReq.notify(n);
    const progressToken = request.params._meta?.progressToken;
    const streams = (signal: AbortSignal): ToolCallContext => ({
      signal,
      outputAsProgress: request.params._meta?.[OUTPUT_META_KEY] === "progress",
      ...(progressToken !== undefined
        ? {
            sendProgress: (progress: number, message: string) =>
              notify({
                method: "notifications/progress",
                params: { progressToken, progress, message },
              }),
          }
        : {}),
      ...(wantsOutput(ctx)
        ? {
            sendLog: (stream: "stdout" | "stderr", text: string) =>
              notify({
                method: "notifications/message",
                params: { level: "info", logger: stream, data: text },
              }),
          }
        : {}),
    });
    if (!asTask || !slot) return project(await call.run(streams(ctx.mcpReq.signal)));

    // The call's own abort: the request's until it becomes a task, then only tasks/cancel's.
    const controller = new AbortController();
    const onRequestAbort = () => controller.abort();
    ctx.mcpReq.signal.addEventListener("abort", onRequestAbort, { once: true });
    const running = call.run(streams(controller.signal)).then(project);
    // 2026: the call stays a plain call if it ends within taskAfterMs; 2025 asked for a task.
    let timer: NodeJS.Timeout | undefined;
    const first = modern
      ? await Promise.race([
          running,
          new Promise<null>(
            (resolve) => (timer = setTimeout(() => resolve(null), tasks.taskAfterMs)),
          ),
        ])
      : null;
    clearTimeout(timer);
    ctx.mcpReq.signal.removeEventListener("abort", onRequestAbort);
    if (first !== null) return first;
    detached = true;
    const record = tasks.registry.adopt(
      tasks.owner,
      call.req.timeout_ms + TASK_KEEP_MS,
      controller,
      running.then((result) => ({ result: result as Record<string, unknown> })),
    );
    const poll = tasks.registry.pollIntervalMs;
    slot.task = modern
      ? { resultType: "task", ...task2026(record, poll) }
      : { task: task2025(record, poll) };
    return { content: [] };
  });

  if (tasks) serveTasks(server, tasks);
  return server;
}

/**
 * tasks/get and tasks/cancel in both eras, tasks/update (2026: ScratchRun never asks for input,
 * so it only acknowledges), tasks/result and tasks/list (2025). Each answers only the owner's
 * tasks; a 2026 client must declare the extension on each of these requests.
 */
function serveTasks(server: Server, { registry, owner }: McpTaskOptions): void {
  const poll = registry.pollIntervalMs;
  const mine = (ctx: ServerContext, taskId: string): TaskRecord => {
    if (ctx.mcpReq.envelope !== undefined && !declaresTasks(ctx))
      throw new MissingRequiredClientCapabilityError({
        requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } },
      });
    const record = registry.get(owner, taskId);
    if (!record) throw notFound();
    return record;
  };

  server.setRequestHandler("tasks/get", { params: TaskIdParams }, async ({ taskId }, ctx) => {
    const record = mine(ctx, taskId);
    return ctx.mcpReq.envelope !== undefined ? task2026(record, poll) : task2025(record, poll);
  });

  server.setRequestHandler("tasks/cancel", { params: TaskIdParams }, async ({ taskId }, ctx) => {
    const record = mine(ctx, taskId);
    if (ctx.mcpReq.envelope !== undefined) {
      registry.cancel(owner, taskId);
      return {};
    }
    if (isTerminal(record.status))
      throw new ProtocolError(
        ProtocolErrorCode.InvalidParams,
        `Cannot cancel task ${taskId}: it is already ${record.status}`,
      );
    registry.cancel(owner, taskId);
    return task2025(record, poll);
  });

  server.setRequestHandler(
    "tasks/update",
    // The SDK lifts `inputResponses` out of params before a handler sees them.
    { params: TaskIdParams },
    async ({ taskId }, ctx) => {
      mine(ctx, taskId);
      return {};
    },
  );

  server.setRequestHandler("tasks/result", { params: TaskIdParams }, async ({ taskId }, ctx) => {
    mine(ctx, taskId);
    const record = await registry.finished(owner, taskId);
    if (!record) throw notFound();
    if (record.end && "result" in record.end) {
      const result = record.end.result;
      const meta = (result._meta as Record<string, unknown> | undefined) ?? {};
      return { ...result, _meta: { ...meta, [RELATED_TASK_META_KEY]: { taskId } } };
    }
    if (record.end && "error" in record.end)
      throw new ProtocolError(record.end.error.code, record.end.error.message);
    throw new ProtocolError(ProtocolErrorCode.InvalidParams, `Task ${taskId} was cancelled`);
  });

  server.setRequestHandler(
    "tasks/list",
    { params: z.looseObject({ cursor: z.string().optional() }) },
    async () => ({ tasks: registry.list(owner).map((r) => task2025(r, poll)) }),
  );
}
