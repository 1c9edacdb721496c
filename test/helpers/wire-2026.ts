import type { Transport } from "@modelcontextprotocol/client";

/**
 * A 2026-07-28 client at the wire, over one of the v2 SDK's own client transports (stdio or
 * Streamable HTTP): every request carries the revision's `_meta` envelope, with the tasks
 * extension declared when asked. The SDK's Client refuses a `resultType: "task"` answer (it has
 * no tasks runtime), so the tasks extension is driven here, message by message, as the
 * extension's specification writes them.
 */
export const TASKS_EXTENSION = "io.modelcontextprotocol/tasks";

export interface WireError extends Error {
  code: number;
  data?: unknown;
}

export interface WireOptions {
  /** Declare the tasks extension on this request (default: the client's own choice). */
  tasks?: boolean;
  meta?: Record<string, unknown>;
  /** Give up waiting for the answer after this long (the client's own request timeout). */
  timeoutMs?: number;
}

export class WireClient {
  private nextId = 1;
  private readonly pending = new Map<
    number,
    { resolve: (r: Record<string, unknown>) => void; reject: (e: WireError) => void }
  >();
  readonly notifications: { method: string; params: Record<string, unknown> }[] = [];

  private constructor(
    private readonly transport: Transport,
    private readonly declaresTasks: boolean,
  ) {}

  static async connect(transport: Transport, declaresTasks = true): Promise<WireClient> {
    const client = new WireClient(transport, declaresTasks);
    transport.onmessage = (m) => client.receive(m as Record<string, unknown>);
    (transport as { setProtocolVersion?: (v: string) => void }).setProtocolVersion?.("2026-07-28");
    await transport.start();
    return client;
  }

  private receive(m: Record<string, unknown>): void {
    if (typeof m.method === "string" && m.id === undefined) {
      this.notifications.push({
        method: m.method,
        params: (m.params as Record<string, unknown>) ?? {},
      });
      return;
    }
    const waiter = this.pending.get(m.id as number);
    if (!waiter) return;
    this.pending.delete(m.id as number);
    if (m.error) {
      const { code, message, data } = m.error as { code: number; message: string; data?: unknown };
      waiter.reject(Object.assign(new Error(message), { code, data }));
    } else waiter.resolve(m.result as Record<string, unknown>);
  }

  async request(
    method: string,
    params: Record<string, unknown> = {},
    options: WireOptions = {},
  ): Promise<Record<string, unknown>> {
    const id = this.nextId++;
    const declare = options.tasks ?? this.declaresTasks;
    const _meta = {
      "io.modelcontextprotocol/protocolVersion": "2026-07-28",
      "io.modelcontextprotocol/clientInfo": { name: "scratchrun-wire-2026", version: "1.0.0" },
      "io.modelcontextprotocol/clientCapabilities": declare
        ? { extensions: { [TASKS_EXTENSION]: {} } }
        : {},
      ...options.meta,
    };
    const answer = new Promise<Record<string, unknown>>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      if (options.timeoutMs !== undefined)
        setTimeout(() => {
          if (!this.pending.delete(id)) return;
          reject(
            Object.assign(new Error(`no answer to ${method} in ${options.timeoutMs} ms`), {
              code: -1,
            }),
          );
        }, options.timeoutMs).unref();
    });
    await this.transport.send({ jsonrpc: "2.0", id, method, params: { ...params, _meta } });
    return answer;
  }

  /** scratchrun_exec as a tools/call. */
  exec(args: Record<string, unknown>, options: WireOptions = {}) {
    return this.request("tools/call", { name: "scratchrun_exec", arguments: args }, options);
  }

  /** Polls tasks/get at the task's own interval until it is finished. */
  async untilFinished(taskId: string, limitMs = 120_000): Promise<Record<string, unknown>> {
    const deadline = Date.now() + limitMs;
    for (;;) {
      const task = await this.request("tasks/get", { taskId });
      if (task.status !== "working" && task.status !== "input_required") return task;
      if (Date.now() > deadline) throw new Error(`task ${taskId} still ${String(task.status)}`);
      await new Promise((r) => setTimeout(r, Number(task.pollIntervalMs ?? 500)));
    }
  }

  close(): Promise<void> {
    return this.transport.close();
  }
}
