import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import {
  NodeStreamableHTTPServerTransport as StreamableHTTPServerTransport,
  toNodeHandler,
  toWebRequest,
  type NodeMcpRequestHandler,
} from "@modelcontextprotocol/node";
import {
  createMcpHandler,
  isInitializeRequest,
  isLegacyRequest,
  type AuthInfo,
  type JSONRPCMessage,
} from "@modelcontextprotocol/server";
import { createMcpServer } from "../mcp/server.js";
import { TaskRegistry } from "../mcp/tasks.js";
import type { Caller, ExecService } from "./service.js";

interface Session {
  transport: StreamableHTTPServerTransport;
  /** The key that opened it, with its policy as of the session's latest request. */
  caller: Caller;
  lastSeen: number;
}

export interface McpSessionLimits {
  maxPerKey: number;
  maxTotal: number;
  idleMs: number;
  /** The largest request body /mcp takes (the service's body cap). */
  maxBodyBytes: number;
  /** A 2026 call with the tasks extension still running after this long becomes a task. */
  taskAfterMs: number;
}

/** The caller a 2026 request's server is built for, carried where the SDK passes auth through. */
const CALLER = Symbol("scratchrun caller");
type CallerAuth = AuthInfo & { [CALLER]: Caller };

/**
 * MCP over Streamable HTTP at /mcp, in both protocol eras.
 *
 * 2026-07-28 requests carry their protocol version and client capabilities in `_meta`: each is
 * served by a server built for that request's caller and dropped after it, so any replica answers
 * any request and nothing is kept between them. Closing a request's response stream cancels its
 * call (the revision's cancellation).
 *
 * 2025-11-25 clients open a session with `initialize`: one MCP server per session, bound to the
 * API key that opened it (another key gets 404 for it). Sessions let `notifications/cancelled`
 * reach the call it cancels; a client whose response stream drops mid-call has that call
 * cancelled as well. A session lives in one replica's memory, so legacy clients need affinity.
 */
export class McpSessions {
  private readonly sessions = new Map<string, Session>();
  private pending = 0;
  private readonly sweeper: NodeJS.Timeout;
  private readonly modern: ReturnType<typeof createMcpHandler>;
  private readonly serveModern: NodeMcpRequestHandler;
  /**
   * Every key's tasks. A task runs in this replica and lives in its memory: tasks/get reaches it
   * the way a 2025 session does (the front door's client affinity; the client's `Mcp-Name`
   * header carries the task id for routers that key on it).
   */
  private readonly tasks = new TaskRegistry();

  constructor(
    private readonly service: ExecService,
    private readonly limits: McpSessionLimits,
  ) {
    this.sweeper = setInterval(() => this.sweep(), Math.min(60_000, limits.idleMs)).unref();
    this.modern = createMcpHandler(
      (ctx) => {
        const caller = (ctx.authInfo as CallerAuth | undefined)?.[CALLER];
        // Unreachable: every request reaches here through handle(), which sets it.
        if (!caller) throw new Error("a 2026 request reached the MCP handler without its caller");
        return createMcpServer(
          service.forCaller(() => caller),
          this.tasksOf(caller),
        );
      },
      { legacy: "reject", maxRequestBodySize: limits.maxBodyBytes },
    );
    this.serveModern = toNodeHandler(this.modern, { maxRequestBodySize: limits.maxBodyBytes });
  }

  /** A key's tasks, whichever request or session (and era) created them. */
  private tasksOf(caller: Caller) {
    return { registry: this.tasks, owner: caller.keyId, taskAfterMs: this.limits.taskAfterMs };
  }

  get size(): number {
    return this.sessions.size;
  }

  /**
   * One request to /mcp from an authenticated caller. The session keeps the caller as of its
   * latest request, so its key's policy (tool schema, limits) is the one stored now.
   */
  async handle(
    req: IncomingMessage,
    res: ServerResponse,
    caller: Caller,
    body: unknown,
  ): Promise<void> {
    const { keyId } = caller;
    const sid = req.headers["mcp-session-id"];
    if (typeof sid !== "string" && !(await isLegacyRequest(await toWebRequest(req, body), body))) {
      const auth: CallerAuth = { token: "", clientId: keyId, scopes: [], [CALLER]: caller };
      return this.serveModern(Object.assign(req, { auth }), res, body);
    }
    if (typeof sid === "string") {
      const s = this.sessions.get(sid);
      if (!s || s.caller.keyId !== keyId) return rpcError(res, 404, -32001, "Session not found");
      s.lastSeen = Date.now();
      s.caller = caller;
      cancelOnDisconnect(res, s.transport, body);
      return s.transport.handleRequest(req, res, body);
    }
    if (req.method !== "POST" || !isInitializeRequest(body))
      return rpcError(res, 400, -32000, "No valid session: send initialize first");
    const mine = [...this.sessions.values()].filter((s) => s.caller.keyId === keyId).length;
    if (
      mine >= this.limits.maxPerKey ||
      this.sessions.size + this.pending >= this.limits.maxTotal
    ) {
      res.setHeader("Retry-After", "10");
      return rpcError(res, 429, -32000, "Too many MCP sessions; close one (DELETE /mcp) first");
    }
    this.pending++;
    // Assigned below, before the transport handles the initialize that registers it.
    let session: Session | undefined;
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        if (session) this.sessions.set(id, session);
      },
      onsessionclosed: (id) => {
        this.sessions.delete(id);
      },
    });
    transport.onclose = () => {
      if (transport.sessionId) this.sessions.delete(transport.sessionId);
    };
    const opened: Session = (session = { transport, caller, lastSeen: Date.now() });
    const server = createMcpServer(
      this.service.forCaller(() => opened.caller),
      this.tasksOf(caller),
    );
    try {
      await server.connect(transport);
      await transport.handleRequest(req, res, body);
    } finally {
      this.pending--;
    }
  }

  private sweep(): void {
    const cutoff = Date.now() - this.limits.idleMs;
    for (const [id, s] of this.sessions)
      if (s.lastSeen < cutoff) {
        this.sessions.delete(id);
        void s.transport.close();
      }
  }

  /** Closes every session; calls still running in them are aborted (their sandboxes end). */
  async closeAll(): Promise<void> {
    clearInterval(this.sweeper);
    this.tasks.close();
    await this.modern.close();
    const all = [...this.sessions.values()];
    this.sessions.clear();
    await Promise.all(all.map((s) => s.transport.close().catch(() => {})));
  }
}

/** Request ids in a JSON-RPC body (one message or a batch). */
export function requestIds(body: unknown): (string | number)[] {
  const msgs = Array.isArray(body) ? body : [body];
  const ids: (string | number)[] = [];
  for (const m of msgs) {
    if (typeof m !== "object" || m === null) continue;
    const { id, method } = m as { id?: unknown; method?: unknown };
    if (typeof method === "string" && (typeof id === "string" || typeof id === "number"))
      ids.push(id);
  }
  return ids;
}

/**
 * Without an event store a dropped response stream cannot be resumed, so the calls it carried are
 * cancelled as if the client had sent notifications/cancelled: their sandboxes are destroyed.
 */
function cancelOnDisconnect(
  res: ServerResponse,
  transport: StreamableHTTPServerTransport,
  body: unknown,
): void {
  const ids = requestIds(body);
  if (ids.length === 0) return;
  res.once("close", () => {
    if (res.writableFinished) return;
    for (const requestId of ids) {
      const msg: JSONRPCMessage = {
        jsonrpc: "2.0",
        method: "notifications/cancelled",
        params: { requestId, reason: "client disconnected" },
      };
      transport.onmessage?.(msg);
    }
  });
}

function rpcError(res: ServerResponse, status: number, code: number, message: string): void {
  res.statusCode = status;
  res.setHeader("Content-Type", "application/json");
  res.end(JSON.stringify({ jsonrpc: "2.0", error: { code, message }, id: null }));
}
