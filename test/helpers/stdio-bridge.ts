import { spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { createInterface } from "node:readline";

/**
 * An HTTP front for a stdio MCP server, for a client that speaks only Streamable HTTP (the
 * conformance suite) to test the stdio server itself. It carries JSON-RPC messages and nothing
 * else: every answer, schema and error is the stdio server's own.
 *
 * - A 2025-11-25 `initialize` starts a stdio server of its own (one per `Mcp-Session-Id`), as a
 *   desktop client starts one per connection; the session's later requests go to it.
 * - A request without a session (the 2026-07-28 era: no handshake) goes to one shared stdio
 *   server, opened as a 2026 client opens its pipe (`server/discover`, then a request, which pins
 *   the era), so a malformed request from the suite meets a pinned 2026 server, as it would on a
 *   client's pipe, instead of deciding the era of every request after it.
 * - A request is answered on an event stream: the notifications and server requests the stdio
 *   server sends while it runs (progress by its token; otherwise while it is the only request
 *   running), then its response. Request ids are the bridge's own on the pipe, so two requests
 *   with one id from different callers never meet; a dropped stream cancels its request.
 *
 * What HTTP itself promises (Host checks, session lifecycle, standalone GET streams) belongs to
 * `/mcp` and is not the stdio server's to pass: the bridge offers no GET stream (405).
 */
export interface StdioBridge {
  url: string;
  /** The stdio servers' stderr, all of them. */
  stderr(): string;
  close(): Promise<void>;
}

type Message = Record<string, unknown> & { id?: string | number; method?: string };

interface Pending {
  res: ServerResponse;
  id: string | number;
  progressToken: unknown;
}

class Pipe {
  readonly pending = new Map<number, Pending>();
  private readonly child: ChildProcess;
  readonly exited: Promise<void>;

  constructor(spawnServer: () => ChildProcess, onStderr: (s: string) => void) {
    this.child = spawnServer();
    this.child.stderr?.on("data", (d: Buffer) => onStderr(d.toString()));
    this.exited = new Promise((resolve) => this.child.once("exit", () => resolve()));
    createInterface({ input: this.child.stdout! }).on("line", (line) => {
      if (line.trim() !== "") this.fromServer(JSON.parse(line) as Message);
    });
  }

  private readonly own = new Map<number, (m: Message) => void>();

  /** A request of the bridge's own (negative ids, never the suite's), answered to it alone. */
  request(id: number, method: string, params: Record<string, unknown>): Promise<Message> {
    return new Promise((resolve) => {
      this.own.set(id, resolve);
      this.send({ jsonrpc: "2.0", id, method, params });
    });
  }

  send(message: unknown): void {
    this.child.stdin!.write(`${JSON.stringify(message)}\n`);
  }

  private fromServer(m: Message): void {
    if (m.method === undefined && m.id !== undefined) {
      const mine = this.own.get(Number(m.id));
      if (mine) {
        this.own.delete(Number(m.id));
        mine(m);
        return;
      }
      const p = this.pending.get(Number(m.id));
      if (!p) return;
      this.pending.delete(Number(m.id));
      event(p.res, { ...m, id: p.id });
      p.res.end();
      return;
    }
    const token = (m.params as { progressToken?: unknown } | undefined)?.progressToken;
    const to =
      [...this.pending.values()].find((p) => token !== undefined && p.progressToken === token) ??
      (this.pending.size === 1 ? [...this.pending.values()][0] : undefined);
    if (to) event(to.res, m);
  }

  async close(): Promise<void> {
    this.child.stdin!.end();
    const killer = setTimeout(() => this.child.kill("SIGKILL"), 10_000);
    await this.exited;
    clearTimeout(killer);
  }
}

function event(res: ServerResponse, m: unknown): void {
  res.write(`event: message\ndata: ${JSON.stringify(m)}\n\n`);
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

export async function startStdioBridge(command: string, args: string[], env: NodeJS.ProcessEnv) {
  let stderr = "";
  const spawnServer = () => spawn(command, args, { env, stdio: ["pipe", "pipe", "pipe"] });
  const pipe = () => new Pipe(spawnServer, (s) => (stderr += s));
  const sessions = new Map<string, Pipe>();
  let modern: Promise<Pipe> | undefined;
  const openModern = async () => {
    const p = pipe();
    const _meta = {
      "io.modelcontextprotocol/protocolVersion": "2026-07-28",
      "io.modelcontextprotocol/clientInfo": { name: "stdio-bridge", version: "1.0.0" },
      "io.modelcontextprotocol/clientCapabilities": {},
    };
    for (const [id, method] of [
      [-1, "server/discover"],
      [-2, "tools/list"],
    ] as const) {
      const answer = await p.request(id, method, { _meta });
      if (!("result" in answer)) throw new Error(`stdio ${method}: ${JSON.stringify(answer)}`);
    }
    return p;
  };
  let nextId = 1;

  const serve = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const sid = req.headers["mcp-session-id"];
    if (req.method === "DELETE" && typeof sid === "string" && sessions.has(sid)) {
      const p = sessions.get(sid)!;
      sessions.delete(sid);
      await p.close();
      res.writeHead(200).end();
      return;
    }
    if (req.method !== "POST") {
      res.writeHead(405, { Allow: "POST, DELETE" }).end();
      return;
    }
    let m: Message;
    try {
      m = JSON.parse(await readBody(req)) as Message;
    } catch {
      res.writeHead(400, { "Content-Type": "application/json" });
      res.end(
        JSON.stringify({
          jsonrpc: "2.0",
          id: null,
          error: { code: -32700, message: "Parse error" },
        }),
      );
      return;
    }
    let to: Pipe;
    const headers: Record<string, string> = { "Content-Type": "text/event-stream" };
    if (m.method === "initialize") {
      const id = randomUUID();
      sessions.set(id, (to = pipe()));
      headers["Mcp-Session-Id"] = id;
    } else if (typeof sid === "string") {
      const found = sessions.get(sid);
      if (!found) {
        res.writeHead(404).end();
        return;
      }
      to = found;
    } else to = await (modern ??= openModern());

    if (m.method === undefined || m.id === undefined) {
      // A notification, or the client's answer to a server request: nothing comes back for it.
      to.send(m);
      res.writeHead(202).end();
      return;
    }
    const onPipe = nextId++;
    const meta = (m.params as { _meta?: { progressToken?: unknown } } | undefined)?._meta;
    to.pending.set(onPipe, { res, id: m.id, progressToken: meta?.progressToken });
    res.on("close", () => {
      if (to.pending.delete(onPipe))
        to.send({
          jsonrpc: "2.0",
          method: "notifications/cancelled",
          params: { requestId: onPipe },
        });
    });
    res.writeHead(200, headers);
    to.send({ ...m, id: onPipe });
  };

  const server = createServer((req, res) => {
    serve(req, res).catch((e: unknown) => {
      if (!res.headersSent) res.writeHead(500);
      res.end(String(e));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
  return {
    url,
    stderr: () => stderr,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      const all = [...sessions.values(), ...(modern ? [await modern] : [])];
      await Promise.all(all.map((p) => p.close()));
    },
  } satisfies StdioBridge;
}
