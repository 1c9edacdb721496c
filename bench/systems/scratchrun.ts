import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema, type CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { Client as ModernClient } from "@modelcontextprotocol/client";
import { StdioClientTransport as ModernStdioTransport } from "@modelcontextprotocol/client/stdio";
import { join } from "node:path";
import type { Stream } from "node:stream";
import type { RuntimeName } from "../../src/schema/exec.js";
import { REPO_ROOT } from "../peers.js";
import type { PoolKindCost } from "../proc.js";
import type { Workload } from "../workloads.js";
import type { BenchSystem, CallResult } from "./types.js";

export interface McpSystemOptions {
  id: string;
  label: string;
  /** Script run by node: the bench's server (bench/server.ts). */
  script: string;
  env: Record<string, string>;
  /** Runtimes/workloads not measured on this system, with the reason. */
  skip?: (w: Workload) => string | null;
  /**
   * The protocol era the client speaks: "legacy" (the v1 SDK's Client, 2025-11-25, what
   * desktop clients speak today) unless "modern" (the v2 SDK's Client pinned to 2026-07-28).
   */
  era?: "legacy" | "modern";
}

/** The two SDK clients behind one shape: connect, one tools/call, close. */
interface EraClient {
  connect(timeoutMs: number): Promise<void>;
  callTool(name: string, args: Record<string, unknown>, timeoutMs: number): Promise<CallToolResult>;
  close(): Promise<void>;
}

type SpawnParams = ConstructorParameters<typeof StdioClientTransport>[0];

function eraClient(
  era: "legacy" | "modern",
  params: SpawnParams,
): {
  client: EraClient;
  transport: { pid: number | null; stderr: Stream | null };
} {
  if (era === "modern") {
    const transport = new ModernStdioTransport(params);
    const client = new ModernClient(
      { name: "scratchrun-bench", version: "1.0.0" },
      { versionNegotiation: { mode: { pin: "2026-07-28" } } },
    );
    return {
      transport,
      client: {
        connect: (timeout) => client.connect(transport, { timeout }),
        callTool: async (name, args, timeout) =>
          (await client.callTool({ name, arguments: args }, { timeout })) as CallToolResult,
        close: () => client.close(),
      },
    };
  }
  const transport = new StdioClientTransport(params);
  const client = new Client({ name: "scratchrun-bench", version: "1.0.0" });
  return {
    transport,
    client: {
      connect: (timeout) => client.connect(transport, { timeout }),
      callTool: async (name, args, timeout) =>
        (await client.callTool({ name, arguments: args }, CallToolResultSchema, {
          timeout,
        })) as CallToolResult,
      close: () => client.close(),
    },
  };
}

/** The product's server as the benchmark runs it: bench/server.ts (same factory, same MCP layer). */
export const BENCH_SERVER = join(REPO_ROOT, "dist/bench/server.js");

export interface McpSystem extends BenchSystem {
  /**
   * Resolves when every runtime's pool is full and no sandbox is being started (immediately
   * without a pool), so that a sample neither waits for nor competes with a refill.
   */
  waitWarm(timeoutMs: number): Promise<boolean>;
  /** Ready and target sandboxes per runtime as last reported by the server. */
  poolReady(): Partial<Record<RuntimeName, [number, number]>>;
  /** What each kind of pooled sandbox cost while idle (BENCH_IDLE_MS), once the server says. */
  idleCost(timeoutMs: number): Promise<Record<string, PoolKindCost> | null>;
  /** Every stderr line (besides pool reports) the server wrote, for failure reports. */
  log(): string;
  /** One tools/call of any tool (the session tools), as the client got it; throws on a failure. */
  tool(name: string, args: Record<string, unknown>, timeoutMs?: number): Promise<CallToolResult>;
  /** The server's REST API (BENCH_REST=1): its URL and a key, once it said so; else null. */
  rest(): { url: string; key: string } | null;
}

function text(result: CallToolResult): string {
  return result.content
    .map((b) => (b.type === "text" ? b.text : ""))
    .join("\n")
    .slice(0, 300);
}

/** ScratchRun as a user's client sees it: a stdio server driven by the MCP SDK's own Client. */
export function mcpSystem(o: McpSystemOptions): McpSystem {
  let client: EraClient | null = null;
  let transport: { pid: number | null; stderr: Stream | null } | null = null;
  let ready: Partial<Record<RuntimeName, [number, number]>> = {};
  let starting = 0;
  let reported = false;
  let idle: Record<string, PoolKindCost> | null = null;
  let rest: { url: string; key: string } | null = null;
  let log = "";
  let waiters: (() => void)[] = [];
  const full = () =>
    reported &&
    starting === 0 &&
    Object.values(ready).every((rt) => rt !== undefined && rt[0] >= rt[1]);
  return {
    id: o.id,
    label: o.label,
    kind: "ours",
    unsupported: (w) => o.skip?.(w) ?? null,
    async start() {
      const spawned = eraClient(o.era ?? "legacy", {
        command: process.execPath,
        args: [o.script],
        env: {
          PATH: process.env.PATH ?? "/usr/bin:/bin",
          HOME: process.env.HOME ?? "/root",
          ...o.env,
        },
        stderr: "pipe",
      });
      transport = spawned.transport;
      let partial = "";
      transport.stderr?.on("data", (d: Buffer) => {
        partial += d.toString();
        const lines = partial.split("\n");
        partial = lines.pop() ?? "";
        for (const line of lines) {
          if (line.startsWith("bench-pool ")) {
            const report = JSON.parse(line.slice(11)) as { ready: typeof ready; starting: number };
            ready = report.ready;
            starting = report.starting;
            reported = true;
            for (const w of waiters.splice(0)) w();
          } else if (line.startsWith("bench-idle ")) {
            idle = JSON.parse(line.slice(11)) as Record<string, PoolKindCost>;
            for (const w of waiters.splice(0)) w();
          } else if (line.startsWith("bench-rest ")) {
            rest = JSON.parse(line.slice(11)) as { url: string; key: string };
          } else if (log.length < 20_000) log += `${line}\n`;
        }
      });
      client = spawned.client;
      // A server that builds templates first answers its opening only when they are built.
      await client.connect(300_000);
    },
    async call(w: Workload): Promise<CallResult> {
      if (!client) return { ok: false, error: "not started" };
      let result: CallToolResult;
      try {
        result = await client.callTool(
          "scratchrun_exec",
          {
            runtime: w.runtime,
            code: w.code,
            network: "none",
            // Realistic calls under TCG take seconds: give them the most the tool allows.
            ...(w.id !== "print" ? { timeout_ms: 30_000 } : {}),
            ...(w.files ? { files: w.files } : {}),
            ...(w.returnFiles.length ? { return_files: w.returnFiles } : {}),
          },
          300_000,
        );
      } catch (e) {
        return { ok: false, error: e instanceof Error ? e.message : String(e) };
      }
      if (result.isError) {
        const t = text(result);
        return { ok: false, busy: t.startsWith("BUSY"), error: t };
      }
      const s = result.structuredContent as {
        stdout: string;
        duration_ms: number;
        files: { path: string; status: string; size_bytes: number }[];
      };
      const files: Record<string, number> = {};
      for (const f of s.files ?? [])
        if (f.status === "ok") files[f.path.replace(/^\/home\/user\//, "")] = f.size_bytes;
      return w.check(s.stdout, files)
        ? { ok: true, serverMs: s.duration_ms }
        : { ok: false, error: text(result) };
    },
    rootPids: () => (transport?.pid ? [transport.pid] : []),
    async idleCost(timeoutMs: number) {
      const deadline = Date.now() + timeoutMs;
      while (!idle && Date.now() < deadline)
        await new Promise<void>((r) => {
          const t = setTimeout(r, deadline - Date.now());
          waiters.push(() => {
            clearTimeout(t);
            r();
          });
        });
      return idle;
    },
    async waitWarm(timeoutMs: number) {
      const deadline = Date.now() + timeoutMs;
      while (!full()) {
        const left = deadline - Date.now();
        if (left <= 0) return false;
        await new Promise<void>((r) => {
          const t = setTimeout(r, left);
          waiters.push(() => {
            clearTimeout(t);
            r();
          });
        });
      }
      return true;
    },
    poolReady: () => ({ ...ready }),
    log: () => log,
    rest: () => rest,
    async tool(name, args, timeoutMs = 300_000) {
      if (!client) throw new Error("not started");
      return client.callTool(name, args, timeoutMs);
    },
    async close() {
      await client?.close();
      client = null;
      transport = null;
      waiters = [];
    },
  };
}
