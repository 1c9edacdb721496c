import {
  PROTOCOL_VERSION_META_KEY,
  ProtocolErrorCode,
  type JSONRPCMessage,
} from "@modelcontextprotocol/server";
import { serveStdio, StdioServerTransport } from "@modelcontextprotocol/server/stdio";
import { parseArgs } from "node:util";
import { LIMITS } from "../schema/limits.js";
import { createMcpServer, type ExecEngine } from "../mcp/server.js";
import { TaskRegistry } from "../mcp/tasks.js";
import { settingsFrom, type Remote } from "../schema/settings/values.js";
import { RemoteEngine } from "../remote/client.js";
import { localRefusal, openLocalService } from "../remote/local-service.js";
import { setting, settingOn } from "../schema/settings/read.js";
import { ScratchRunError } from "../errors.js";
import { logWhenPoolsFull } from "./pools-full.js";
import { withServerLimits } from "../policy/server-policy.js";

/** --max-timeout-ms and --max-memory-mb: the server-wide maxima of local mode. */
type LimitFlags = Parameters<typeof withServerLimits>[1];

/** The engine and what the ready line says about its network. */
interface Started {
  engine: ExecEngine & { close(): Promise<void> };
  networkLine: string;
}

/**
 * Local mode: the sandboxes run here. Imported only when SCRATCHRUN_URL is unset, so remote mode
 * loads none of the backends (and nothing native: the stdio server never opens SQLite).
 * Builds nothing: what setup did not build is a NOT_READY naming the setup command.
 */
async function startLocal(
  isolation: string | undefined,
  imageConfig: string | undefined,
  limits: LimitFlags,
  egressAllow: string | undefined,
): Promise<Started> {
  const { createEngineFromEnv, withEgressAllow, withIsolation } =
    await import("../compose/engine-factory.js");
  // What a server killed outright (kill -9) left running: a session's frozen jail, which its
  // bwrap's --die-with-parent could not take (a frozen process acts on no signal until thawed).
  const { reapOrphanSandboxes } = await import("../jail/reap.js");
  await reapOrphanSandboxes();
  const { withImageConfig } = await import("../images/config-load.js");
  const env = withEgressAllow(
    withServerLimits(withImageConfig(withIsolation(process.env, isolation), imageConfig), limits),
    egressAllow,
  );
  const engine = await createEngineFromEnv(env, {}, "existing");
  logWhenPoolsFull(engine.backend, (ms) =>
    process.stderr.write(
      `scratchrun-mcp: every warm pool full, ${(ms / 1000).toFixed(1)} s after start\n`,
    ),
  );
  return { engine, networkLine: engine.options.networkReason ?? engine.networkNote };
}

async function startRemote(options: Remote) {
  const engine = await RemoteEngine.connect(options);
  return { engine, networkLine: engine.networkNote };
}

/** The flags that shape this process's own engine, which a forwarded call never reaches. */
interface EngineFlags {
  isolation: string | undefined;
  imageConfig: string | undefined;
  limits: LimitFlags;
  egressAllow: string | undefined;
}

/**
 * No SCRATCHRUN_URL: the local service when it answers (every user's, root's too: one set of
 * pools per host), else the engine here, which needs root. --local (SCRATCHRUN_LOCAL=1) skips the
 * service. A user who cannot use either gets one line saying what to do (decision 0018).
 */
async function startOnThisMachine(
  local: boolean,
  flags: EngineFlags,
): Promise<Started & { via: string }> {
  const here = () =>
    startLocal(flags.isolation, flags.imageConfig, flags.limits, flags.egressAllow);
  if (local) return { ...(await here()), via: "" };
  const socket = setting("SCRATCHRUN_SOCKET", process.env);
  const service = await openLocalService(socket);
  if (service.kind === "answers") {
    const given = [
      flags.isolation && "--isolation",
      flags.imageConfig && "--image-config",
      flags.limits.maxTimeoutMs && "--max-timeout-ms",
      flags.limits.maxMemoryMb && "--max-memory-mb",
      flags.egressAllow && "--egress-allow",
    ].filter(Boolean);
    if (given.length > 0)
      throw new ScratchRunError(
        "NOT_READY",
        `${given.join(", ")} set this process's own engine, and the local service at ${socket} runs the calls`,
        {
          fix: "Drop them (root sets the service's: scratchrun daemon, scratchrun keys update uid:N), or add --local to run an engine here (as root)",
        },
      );
    return {
      engine: service.engine,
      networkLine: service.engine.networkNote,
      via: `local service ${socket}, `,
    };
  }
  if (process.getuid?.() !== 0) throw localRefusal(service.kind, socket);
  return { ...(await here()), via: "" };
}

/** How long closing may take before the process exits anyway (a client waits about 4 s). */
const CLOSE_BOUND_MS = 30_000;

/**
 * The stdio MCP server: what `npx -y scratchrun-mcp` runs. Logs go to stderr only;
 * stdout carries JSON-RPC. With SCRATCHRUN_URL set it forwards every call to that ScratchRun
 * server (remote mode) instead of running sandboxes here. Everything that can fail at start
 * (configuration, a missing build, an unreachable server) fails before the client's initialize
 * is answered, with one line on stderr.
 */
export async function runMcpStdio(argv: string[] = []): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      isolation: { type: "string" },
      "image-config": { type: "string" },
      "max-timeout-ms": { type: "string" },
      "max-memory-mb": { type: "string" },
      "egress-allow": { type: "string" },
      local: { type: "boolean" },
    },
  });
  const limits: LimitFlags = {
    maxTimeoutMs: values["max-timeout-ms"],
    maxMemoryMb: values["max-memory-mb"],
  };
  const remote = settingsFrom(process.env).remote;
  if (remote && (limits.maxTimeoutMs ?? limits.maxMemoryMb) !== undefined)
    throw new ScratchRunError(
      "NOT_READY",
      "--max-timeout-ms and --max-memory-mb set this machine's limits, and remote mode runs nothing here",
      { fix: "The server's operator sets them (scratchrun serve, or the key's policy)" },
    );
  const { engine, networkLine, via } = remote
    ? { ...(await startRemote(remote)), via: `remote ${new URL(remote.url).origin}, ` }
    : await startOnThisMachine(
        values.local === true || settingOn("SCRATCHRUN_LOCAL", process.env),
        {
          isolation: values.isolation,
          imageConfig: values["image-config"],
          limits,
          egressAllow: values["egress-allow"],
        },
      );
  let closing = false;
  const shutdown = async (code = 0) => {
    if (closing) return;
    closing = true;
    // Stdin has ended: once the sandboxes' own processes are gone, nothing else may hold Node's
    // event loop, and a close step still awaiting a promise would let the process end there,
    // silently, with cgroups and directories left. This timer holds the loop, and bounds a close
    // that hangs: a server nobody can use must not linger (the next start reaps what is left).
    setTimeout(() => {
      process.stderr.write(
        `scratchrun-mcp: closing took over ${CLOSE_BOUND_MS / 1000} s; exiting, the next start reaps what is left\n`,
      );
      process.exit(1);
    }, CLOSE_BOUND_MS);
    try {
      await engine.close();
    } catch (err) {
      process.stderr.write(`scratchrun-mcp: closing failed: ${errorText(err)}\n`);
      code = 1;
    }
    process.exit(code);
  };
  process.on("SIGINT", () => void shutdown());
  process.on("SIGTERM", () => void shutdown());
  process.stdin.on("end", () => void shutdown());
  // A bug nothing caught ends the process as Node would, but only after every sandbox is
  // destroyed: its QEMU or jails die with the process, their cgroups and directories would not.
  const fatal = (err: unknown) => {
    process.stderr.write(`scratchrun-mcp: internal error, closing: ${errorText(err)}\n`);
    void shutdown(1);
  };
  process.on("uncaughtException", fatal);
  process.on("unhandledRejection", fatal);
  serveMcpStdio(engine, () => void shutdown());
  process.stderr.write(
    `scratchrun-mcp: ready (${via}isolation ${engine.backend.isolation}; network: ${networkLine})\n`,
  );
}

/**
 * Serves `engine` over this process's stdio in both MCP eras: serveStdio decides the
 * connection's era from its opening (a 2025 initialize, or a 2026-07-28 request with its _meta
 * envelope) and pins one server to it. `onClosed` runs when the connection closes.
 */
export function serveMcpStdio(engine: ExecEngine, onClosed: () => void): void {
  // One connection, one caller: its tasks live as long as the process.
  const tasks = {
    registry: new TaskRegistry(),
    owner: "stdio",
    taskAfterMs: settingsFrom(process.env).taskAfterMs,
  };
  serveStdio(() => createMcpServer(engine, tasks), {
    transport: new ClosingStdioTransport(onClosed),
    onerror: (e) => process.stderr.write(`scratchrun-mcp: ${e.message}\n`),
  });
}

/** The 2026 revisions serveStdio serves (its SUPPORTED_MODERN_PROTOCOL_VERSIONS, not exported). */
const MODERN_REVISIONS = ["2026-07-28"];

/**
 * The revision a request's `_meta` envelope claims, when it claims one this server does not
 * serve. serveStdio answers such a claim on the opening exchange only; once the connection is
 * pinned, later requests reach the server as they are (CONF-SUITE).
 */
function unsupportedClaim(message: JSONRPCMessage): string | undefined {
  if (!("method" in message) || !("id" in message)) return undefined;
  const meta = (message.params as { _meta?: Record<string, unknown> } | undefined)?._meta;
  const claim = meta?.[PROTOCOL_VERSION_META_KEY];
  return typeof claim === "string" && !MODERN_REVISIONS.includes(claim) ? claim : undefined;
}

/**
 * The stdio transport, bounded to our request size, that ends the process when it closes. A
 * request claiming a revision we do not serve is answered here, whenever it comes, as serveStdio
 * answers it at the opening: UnsupportedProtocolVersionError with the revisions we do serve.
 */
class ClosingStdioTransport extends StdioServerTransport {
  constructor(private readonly onClosed: () => void) {
    super(process.stdin, process.stdout, { maxBufferSize: LIMITS.requestLineBytes.max });
    let inner: ((message: JSONRPCMessage) => void) | undefined;
    Object.defineProperty(this, "onmessage", {
      configurable: true,
      get: () => (inner ? (m: JSONRPCMessage) => this.screen(m, inner!) : undefined),
      set: (fn: ((message: JSONRPCMessage) => void) | undefined) => (inner = fn),
    });
  }

  private screen(message: JSONRPCMessage, deliver: (message: JSONRPCMessage) => void): void {
    const requested = unsupportedClaim(message);
    if (requested === undefined || !("id" in message)) return deliver(message);
    void this.send({
      jsonrpc: "2.0",
      id: message.id,
      error: {
        code: ProtocolErrorCode.UnsupportedProtocolVersion,
        message: `Unsupported protocol version: ${requested}`,
        data: { supported: MODERN_REVISIONS, requested },
      },
    });
  }

  override async close(): Promise<void> {
    await super.close();
    this.onClosed();
  }
}

function errorText(err: unknown): string {
  return err instanceof Error ? (err.stack ?? err.message) : String(err);
}
