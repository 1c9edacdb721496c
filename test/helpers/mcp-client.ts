import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema, type CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { Client as ModernClient } from "@modelcontextprotocol/client";
import { StdioClientTransport as ModernStdioTransport } from "@modelcontextprotocol/client/stdio";
import { readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { setting } from "../../src/schema/settings/read.js";
import { childrenOf } from "./procs.js";

/**
 * The revision the shared suites' client speaks (SCRATCHRUN_TEST_ERA): 2025-11-25 in `npm test`,
 * 2026-07-28 in the era leg of `npm run test:matrix`, where `startServer` hands the suites a v2
 * client pinned to it behind the same harness.
 */
export const TEST_ERA = setting("SCRATCHRUN_TEST_ERA", process.env);

/** The repository root (this file is dist/test/helpers/mcp-client.js once built). */
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
export const MCP_BIN = join(REPO_ROOT, "dist/src/bin/scratchrun-mcp.js");

export interface ExecStructured {
  stdout: string;
  stderr: string;
  exit_code: number | null;
  exit_reason: string;
  signal: number | null;
  duration_ms: number;
  isolation: string;
  network: string;
  stdout_truncated: boolean;
  stderr_truncated: boolean;
  stdout_omitted_bytes: number;
  stderr_omitted_bytes: number;
  files: { path: string; status: string; size_bytes: number; mime_type: string }[];
  message?: string;
  network_blocked_packets?: number;
}

export interface McpHarness {
  client: Client;
  call(
    args: Record<string, unknown>,
    options?: { signal?: AbortSignal; timeoutMs?: number },
  ): Promise<CallToolResult>;
  exec(args: Record<string, unknown>): Promise<{ result: CallToolResult; s: ExecStructured }>;
  stderr(): string;
  /** Open fds of the server process (for the fd leak check). */
  serverFds(): number;
  /** The server's child processes (a namespace server's jails: pooled and in use). */
  serverChildren(): number;
  /** The server's own pid (to signal it as an operator would). */
  serverPid(): number;
  close(): Promise<void>;
  /**
   * After close(): ms from the client's close to the server's exit. The client's transport sends
   * SIGTERM after 2 s and SIGKILL after 4, and a server killed so leaves its sandboxes to the next
   * start's reaper: a leak check names this when it fails.
   */
  closedAfterMs(): number | null;
}

/** How the suites spawn the built stdio server: on this test's own Node unless one is named. */
export function serverParams(env: Record<string, string>, node = process.execPath) {
  return {
    command: node,
    args: [MCP_BIN],
    // Network "none" unless a test builds its own topology: the suites never touch real links.
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: process.env.HOME ?? "/root",
      SCRATCHRUN_NETWORK: "none",
      // Each server builds its own microVM templates (the suites count and time what it does);
      // test/microvm/template-store.test.ts keeps them on purpose.
      SCRATCHRUN_TEMPLATE_CACHE: process.env.SCRATCHRUN_TEMPLATE_CACHE ?? "off",
      // The engine under test is this server's own, even where a local service answers (setup's
      // systemd unit on a developer's machine): test/e2e/local-service.test.ts covers forwarding.
      SCRATCHRUN_LOCAL: "1",
      ...env,
    },
    stderr: "pipe" as const,
  };
}

/**
 * Starts the built stdio server as a 2025-11-25 client does (Claude Desktop, Claude Code, Cursor
 * as they are today), with the v1 SDK's own Client.
 */
export async function startServer(
  env: Record<string, string> = {},
  node?: string,
): Promise<McpHarness> {
  let closedAfterMs: number | null = null;
  const { client, pid, stderr } =
    TEST_ERA === "2026-07-28" ? await connectModern(env, node) : await connectLegacy(env, node);
  const call = async (
    args: Record<string, unknown>,
    options: { signal?: AbortSignal; timeoutMs?: number } = {},
  ) =>
    (await client.callTool({ name: "scratchrun_exec", arguments: args }, CallToolResultSchema, {
      timeout: options.timeoutMs ?? 120_000,
      ...(options.signal ? { signal: options.signal } : {}),
    })) as CallToolResult;
  return {
    client,
    call,
    async exec(args) {
      const result = await call(args);
      if (result.isError) throw new Error(`tool error: ${JSON.stringify(result.content)}`);
      return { result, s: result.structuredContent as unknown as ExecStructured };
    },
    stderr,
    serverFds: () => readdirSync(`/proc/${pid}/fd`).length,
    serverChildren: () => childrenOf(pid).length,
    serverPid: () => pid,
    async close() {
      const t0 = Date.now();
      const gone = exitOf(pid);
      await client.close();
      closedAfterMs = (await gone) - t0;
    },
    closedAfterMs: () => closedAfterMs,
  };
}

/**
 * Resolves with the time (Date.now()) the process is gone, polled (a server is the client
 * transport's child, not the test's); fails once `withinMs` passed with it still running.
 */
export async function exitOf(pid: number, withinMs = Infinity): Promise<number> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    try {
      process.kill(pid, 0);
    } catch {
      return Date.now();
    }
    if (Date.now() > deadline) throw new Error(`pid ${pid} still runs after ${withinMs} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

interface Connected {
  client: Client;
  pid: number;
  stderr: () => string;
}

async function connectLegacy(env: Record<string, string>, node?: string): Promise<Connected> {
  const transport = new StdioClientTransport(serverParams(env, node));
  let stderr = "";
  transport.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  const client = new Client({ name: "scratchrun-test", version: "1.0.0" });
  await client.connect(transport);
  return { client, pid: transport.pid ?? -1, stderr: () => stderr };
}

/**
 * The era leg: a 2026-07-28 client behind the same harness. Its `client` answers what the shared
 * suites ask of a client (tools/list, tools/call with a schema and options, the server's
 * identity); Logging is the 2025 revision's (a 2026 request asks for output in its own `_meta`),
 * so a suite that turns it on is the 2025 leg's alone (scripts/test-matrix.mjs names them).
 */
async function connectModern(env: Record<string, string>, node?: string): Promise<Connected> {
  const transport = new ModernStdioTransport(serverParams(env, node));
  let stderr = "";
  transport.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  const modern = new ModernClient(
    { name: "scratchrun-test-2026", version: "1.0.0" },
    { versionNegotiation: { mode: { pin: "2026-07-28" } } },
  );
  await modern.connect(transport);
  if (modern.getProtocolEra() !== "modern")
    throw new Error(`the era leg's client speaks ${modern.getProtocolEra()}, not 2026-07-28`);
  const client = {
    listTools: () => modern.listTools(),
    callTool: (
      params: { name: string; arguments?: Record<string, unknown> },
      _schema?: unknown,
      options: { signal?: AbortSignal; timeout?: number } = {},
    ) => modern.callTool(params, options),
    getServerVersion: () => modern.getServerVersion(),
    close: () => modern.close(),
  } as unknown as Client;
  return { client, pid: transport.pid ?? -1, stderr: () => stderr };
}

export interface ModernHarness {
  client: ModernClient;
  call(
    args: Record<string, unknown>,
    options?: {
      signal?: AbortSignal;
      _meta?: Record<string, unknown>;
      onprogress?: (p: { progress: number; message?: string }) => void;
    },
  ): Promise<CallToolResult>;
  stderr(): string;
  serverFds(): number;
  close(): Promise<void>;
}

/**
 * Starts the built stdio server as a 2026-07-28 client does: the v2 SDK's Client pinned to that
 * revision (server/discover, every request with its _meta envelope, no initialize).
 */
export async function startModernServer(
  env: Record<string, string> = {},
  node?: string,
): Promise<ModernHarness> {
  const transport = new ModernStdioTransport(serverParams(env, node));
  let stderr = "";
  transport.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  const client = new ModernClient(
    { name: "scratchrun-test-2026", version: "1.0.0" },
    { versionNegotiation: { mode: { pin: "2026-07-28" } } },
  );
  await client.connect(transport);
  return {
    client,
    call: async (args, options = {}) =>
      (await client.callTool(
        {
          name: "scratchrun_exec",
          arguments: args,
          ...(options._meta ? { _meta: options._meta } : {}),
        },
        {
          timeout: 120_000,
          ...(options.signal ? { signal: options.signal } : {}),
          ...(options.onprogress ? { onprogress: options.onprogress } : {}),
        },
      )) as CallToolResult,
    stderr: () => stderr,
    serverFds: () => readdirSync(`/proc/${transport.pid}/fd`).length,
    close: () => client.close(),
  };
}

/** The server's identity carries its icon: an SVG, inline as a data URI (nothing to fetch). */
export function assertIcon(icons: unknown): void {
  const list = icons as { src: string; mimeType?: string }[] | undefined;
  const icon = list?.[0];
  if (!icon) throw new Error(`no icon in the server's identity: ${JSON.stringify(icons)}`);
  const m = /^data:image\/svg\+xml;base64,(.+)$/.exec(icon.src);
  if (!m || icon.mimeType !== "image/svg+xml")
    throw new Error(`the icon is not an inline SVG: ${icon.src.slice(0, 60)}`);
  const svg = Buffer.from(m[1]!, "base64").toString("utf8");
  if (!/^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"[^>]*viewBox="0 0 64 64"/.test(svg))
    throw new Error(`the icon's data is not an SVG: ${svg.slice(0, 60)}`);
}

export function textOf(result: CallToolResult): string {
  return result.content
    .filter((b): b is { type: "text"; text: string } => b.type === "text")
    .map((b) => b.text)
    .join("\n");
}
