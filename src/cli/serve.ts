import { logWhenPoolsFull } from "./pools-full.js";
import { checkIssuerUrl, TrustedIssuer } from "../oauth/oidc.js";
import { settingsFrom } from "../schema/settings/values.js";
import { parseArgs } from "node:util";
import { startApiReplica } from "../cluster/api-role.js";
import { discovery } from "../cluster/discovery.js";
import { startWorkerRole } from "../cluster/worker-role.js";
import { withImageConfig } from "../images/config-load.js";
import {
  createEngineFromEnv,
  sessionLimitsFromEnv,
  withEgressAllow,
} from "../compose/engine-factory.js";
import { egressAllowlistFromEnv } from "../compose/network.js";
import { openDatabase } from "../store/db.js";
import { acquireHomeLock } from "../store/lock.js";
import { openStore } from "../store/open.js";
import { RunStore } from "../store/runs.js";
import { SandboxStore } from "../store/sandboxes.js";
import { SessionStore } from "../store/sessions.js";
import { hostCeiling, RECORDABLE_CEILING } from "../policy/host.js";
import { serverLimitsWithin, serverPolicy, withServerLimits } from "../policy/server-policy.js";
import { createLogger, type Logger } from "../http/log.js";
import { reapOrphanSandboxes } from "../jail/reap.js";
import { startApiServer, type ApiServer } from "../api/server.js";
import { loadPeerCredentials } from "../http/peer-cred.js";
import { prepareSocketPath } from "../http/unix-listener.js";
import { ensureServiceGroup } from "./service-state.js";
import { setting } from "../schema/settings/read.js";
import { parseTrustedProxies, type TrustedProxies } from "../http/client-address.js";

export const SERVE_USAGE = `scratchrun serve [--role all|api|worker] [--host H] [--port N] [limits]

  --role all               one process: API, sandboxes and SQLite records (the default)
  --role api               an API replica: keys, quotas and records in Postgres
                           (SCRATCHRUN_DATABASE_URL); every call goes to a worker
  --role worker            runs sandboxes for API replicas; no database, no API keys
  --workers NAME:PORT      (api) the workers: a DNS name (a headless Service) and their port;
                           comma-separated for several (or SCRATCHRUN_WORKERS)
  --host H                 address to bind (default 127.0.0.1; loopback binds check Host/Origin)
  --port N                 port (default 8787, worker 8788; 0 picks a free one)
  --socket PATH            (all) also serve this machine's users on a unix socket (group
                           scratchrun, 0660), each caller the uid the kernel proves (uid:N), no
                           key; with it, TCP only when --host or --port is given (scratchrun
                           daemon is serve --socket on SCRATCHRUN_SOCKET)
  --max-concurrent N       sandboxes running at once (default 4)
  --max-queued N           calls waiting for a sandbox (default 64)
  --queue-deadline-ms N    longest wait in the queue before 429 (default 60000)
  --key-concurrency N      calls in flight per API key (default 4)
  --key-rate N             calls per minute per API key (default 120, burst 30)
  --body-cap-bytes N       largest request body (default 16 MiB)
  --image-config PATH      the image config the image was built from (SCRATCHRUN_IMAGE_CONFIG)
  --max-timeout-ms N       (all, api) the longest timeout_ms a call may ask for (default 30000;
                           up to 900000, 15 minutes; SCRATCHRUN_MAX_TIMEOUT_MS); an API key's own
                           policy may set another (scratchrun keys update --max-timeout-ms)
  --max-memory-mb N        (all, api) the most memory_mb a call may ask for (default 512; up to
                           half of the host's RAM; SCRATCHRUN_MAX_MEMORY_MB)
  --egress-allow LIST      network "public" reaches only these names over HTTP(S): domain names
                           and *. wildcards, comma-separated (SCRATCHRUN_EGRESS_ALLOW)

State (database, lock) lives in SCRATCHRUN_HOME (default /var/lib/scratchrun for root).
API replicas and workers share a secret: SCRATCHRUN_WORKER_TOKEN (or SCRATCHRUN_WORKER_TOKEN_FILE).
`;

function int(v: string | undefined, name: string, fallback: number, min = 1): number {
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer >= ${min}`);
  return n;
}

/**
 * Resolves with the exit code on the first SIGTERM/SIGINT (0), or an error nothing caught (1),
 * after `stop` finished.
 */
function untilSignal(logger: Logger, stop: () => Promise<void>, inFlight: () => number) {
  return new Promise<number>((resolve) => {
    let stopping = false;
    const onSignal = (signal: string) => {
      if (stopping) return resolve(1);
      stopping = true;
      logger.info({ signal, in_flight: inFlight() }, "draining");
      void stop().then(() => resolve(0));
    };
    process.on("SIGTERM", () => onSignal("SIGTERM"));
    process.on("SIGINT", () => onSignal("SIGINT"));
    // A bug nothing caught ends the process as Node would, but after the drain: sandboxes are
    // destroyed, never left to the next start's reaper.
    const fatal = (err: unknown) => {
      logger.error({ err }, "internal error: closing");
      if (stopping) return;
      stopping = true;
      void stop()
        .catch(() => {})
        .then(() => resolve(1));
    };
    process.on("uncaughtException", fatal);
    process.on("unhandledRejection", fatal);
  });
}

/** What `scratchrun daemon` adds to serve: its own logger, and a word once it listens. */
export interface ServeHooks {
  logger?: Logger;
  listening?(api: ApiServer, isolation: string): void;
}

/**
 * `scratchrun serve`: with --role all (the default) takes the state directory's lock, marks runs
 * a dead predecessor left running as failed, destroys its orphaned sandboxes, then serves until
 * SIGTERM/SIGINT, when it drains calls in flight before exiting. --role api and --role worker
 * split that between API replicas (Postgres) and workers (sandboxes); see src/cluster/.
 */
export async function runServe(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
  hooks: ServeHooks = {},
): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      role: { type: "string" },
      workers: { type: "string" },
      host: { type: "string" },
      port: { type: "string" },
      socket: { type: "string" },
      "max-concurrent": { type: "string" },
      "max-queued": { type: "string" },
      "queue-deadline-ms": { type: "string" },
      "key-concurrency": { type: "string" },
      "key-rate": { type: "string" },
      "body-cap-bytes": { type: "string" },
      "image-config": { type: "string" },
      "max-timeout-ms": { type: "string" },
      "max-memory-mb": { type: "string" },
      "egress-allow": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(SERVE_USAGE);
    return 0;
  }
  const role = values.role ?? "all";
  if (role !== "all" && role !== "api" && role !== "worker")
    throw new Error(`--role must be all, api or worker (got ${JSON.stringify(role)})`);
  if (values.socket !== undefined && role !== "all")
    throw new Error("--socket is for --role all: the local service runs the sandboxes itself");
  // Raised limits: checked before anything starts (against this host's RAM where sandboxes run).
  const limitFlags = {
    maxTimeoutMs: values["max-timeout-ms"],
    maxMemoryMb: values["max-memory-mb"],
  };
  if (role === "worker" && (limitFlags.maxTimeoutMs ?? limitFlags.maxMemoryMb) !== undefined)
    throw new Error(
      "--max-timeout-ms and --max-memory-mb are for --role all and api: a worker runs what its replicas' policies allow, up to its host's ceiling",
    );
  const limitsEnv = withServerLimits(env, limitFlags);
  const serverLimits = serverLimitsWithin(
    settingsFrom(limitsEnv).serverMaxima,
    role === "api" ? RECORDABLE_CEILING : hostCeiling(),
  );
  // A bad allowlist entry is a configuration error, said before the state directory is touched.
  const egressEnv = withEgressAllow(limitsEnv, values["egress-allow"]);
  egressAllowlistFromEnv(egressEnv);
  const settings = settingsFrom(env);
  const logger = hooks.logger ?? createLogger(settingsFrom(process.env).logLevel);
  const host = values.host ?? "127.0.0.1";
  const limits = {
    maxConcurrent: int(values["max-concurrent"], "max-concurrent", 4),
    maxQueued: int(values["max-queued"], "max-queued", 64, 0),
    queueDeadlineMs: int(values["queue-deadline-ms"], "queue-deadline-ms", 60_000),
  };
  const keyLimits = {
    maxConcurrent: int(values["key-concurrency"], "key-concurrency", 4),
    ratePerMinute: int(values["key-rate"], "key-rate", 120),
  };
  const bodyCapBytes = int(values["body-cap-bytes"], "body-cap-bytes", 16 * 1024 * 1024);
  const publicUrl = publicUrlFromEnv(env);
  const trustedProxies = trustedProxiesFromEnv(env);
  const oidc = trustedIssuerFromEnv(env);
  // The engine's environment (the worker's and --role all's) names the image config, if any.
  const engineEnv = withImageConfig(egressEnv, values["image-config"]);

  if (role === "worker") {
    const token = settings.workerToken;
    const worker = await startWorkerRole({
      home: settings.home,
      logger,
      host,
      port: int(values.port, "port", 8788, 0),
      token,
      createEngine: () => createEngineFromEnv(engineEnv, limits),
    });
    process.stderr.write(
      `scratchrun: worker serving on ${worker.server.url} (isolation ${worker.isolation})\n`,
    );
    return untilSignal(
      logger,
      () => worker.stop(),
      () => worker.server.active,
    );
  }

  if (role === "api") {
    const spec = values.workers ?? setting("SCRATCHRUN_WORKERS", env);
    if (!spec) throw new Error("--role api needs --workers NAME:PORT (or SCRATCHRUN_WORKERS)");
    if (settings.databaseUrl === null)
      throw new Error("--role api keeps its records in Postgres: set SCRATCHRUN_DATABASE_URL");
    const token = settings.workerToken;
    const leaseTtl = setting("SCRATCHRUN_LEASE_TTL_MS", env);
    const pollEvery = setting("SCRATCHRUN_WORKER_POLL_MS", env);
    const store = await openStore(settings, {
      onError: (e) => logger.warn({ err: e.message }, "database connection dropped"),
    });
    const replica = await startApiReplica({
      store,
      logger,
      host,
      port: int(values.port, "port", 8787, 0),
      discover: discovery(spec, settings.workersDnsServer),
      token,
      keyLimits,
      policy: serverPolicy(serverLimits),
      bodyCapBytes,
      ...(publicUrl ? { publicUrl } : {}),
      ...(trustedProxies ? { trustedProxies } : {}),
      ...(oidc ? { oidc } : {}),
      taskAfterMs: settings.taskAfterMs,
      sessions: sessionLimitsFromEnv(env),
      ...(leaseTtl ? { leaseTtlMs: int(leaseTtl, "lease-ttl-ms", 15_000, 100) } : {}),
      ...(pollEvery ? { pollMs: int(pollEvery, "worker-poll-ms", 1000, 50) } : {}),
    });
    process.stderr.write(
      `scratchrun: api replica ${replica.replicaId} serving on ${replica.api.url}\n`,
    );
    return untilSignal(
      logger,
      async () => {
        await replica.close();
        await store.close();
      },
      () => replica.api.service.active,
    );
  }

  // The local socket: its group and the addon that reads callers' uids, before anything starts.
  let socket: { path: string; gid: number } | undefined;
  if (values.socket !== undefined) {
    loadPeerCredentials();
    socket = { path: values.socket, gid: ensureServiceGroup() };
    await prepareSocketPath(socket.path);
  }
  const tcp = !socket || values.port !== undefined || values.host !== undefined;
  const home = settings.home;
  const db = openDatabase(home);
  const lock = acquireHomeLock(home);
  const interrupted = await new RunStore(db).markInterrupted();
  // Sessions a killed predecessor held: their sandboxes are reaped just below.
  const lostSessions = await new SessionStore(db).markLost();
  const sandboxes = new SandboxStore(db);
  const reaped = await reapOrphanSandboxes({ recorded: sandboxes.names() });
  sandboxes.clear();
  logger.info(
    {
      home,
      interrupted_runs: interrupted,
      lost_sessions: lostSessions,
      reaped_sandboxes: reaped.cgroups.length,
      reaped_processes: reaped.processes.length,
    },
    "recovered",
  );
  const engine = await createEngineFromEnv(engineEnv, limits);
  const api = await startApiServer({
    engine,
    db,
    logger,
    host,
    port: tcp ? int(values.port, "port", 8787, 0) : null,
    ...(socket ? { socket } : {}),
    keyLimits,
    bodyCapBytes,
    ...(publicUrl ? { publicUrl } : {}),
    ...(trustedProxies ? { trustedProxies } : {}),
    ...(oidc ? { oidc } : {}),
    sessions: { taskAfterMs: settings.taskAfterMs },
  });
  // Where a person opens the console and where an MCP client is pointed (the public URL, if set).
  const base = (publicUrl ?? api.url).replace(/\/+$/, "");
  const where = tcp ? `; console ${base}/console, MCP ${base}/mcp` : "";
  process.stderr.write(
    `scratchrun: serving on ${[...(tcp ? [api.url] : []), ...(socket ? [`unix:${socket.path}`] : [])].join(" and ")} (isolation ${engine.backend.isolation})${where}\n`,
  );
  hooks.listening?.(api, engine.backend.isolation);
  logWhenPoolsFull(engine.backend, (ms) => logger.info({ after_ms: ms }, "every warm pool full"));
  return untilSignal(
    logger,
    async () => {
      await api.close();
      await engine.close();
      db.close();
      lock.release();
    },
    () => api.service.active,
  );
}

/**
 * SCRATCHRUN_TRUSTED_PROXIES: the addresses and CIDR ranges of the proxies in front (a TLS front
 * door, a load balancer), whose X-Forwarded-For names the client the per-address limits count;
 * a bad entry is refused at start, naming it. Unset: none (every peer is the client).
 */
export function trustedProxiesFromEnv(env: NodeJS.ProcessEnv): TrustedProxies | undefined {
  const v = setting("SCRATCHRUN_TRUSTED_PROXIES", env);
  if (!v) return undefined;
  try {
    return parseTrustedProxies(v.split(","));
  } catch (e) {
    throw new Error(e instanceof Error ? e.message : String(e));
  }
}

/** SCRATCHRUN_PUBLIC_URL, checked: an http(s) origin, nothing after it but an optional "/". */
export function publicUrlFromEnv(env: NodeJS.ProcessEnv): string | undefined {
  const v = setting("SCRATCHRUN_PUBLIC_URL", env);
  if (!v) return undefined;
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    u = new URL("invalid:");
  }
  if (!/^https?:$/.test(u.protocol) || u.pathname !== "/" || u.search || u.hash || u.username)
    throw new Error(
      `SCRATCHRUN_PUBLIC_URL must be an origin like https://scratchrun.example.com, not ${JSON.stringify(v)}`,
    );
  return u.origin;
}

/**
 * The OIDC settings (SCRATCHRUN_OIDC_ISSUER and the three beside it, decision 0016): the external issuer trusted beside the built-in one, its
 * tokens' audience, and the console's client at it. A bad URL or a secret without a client ID is
 * refused at start, naming the setting.
 */
export function trustedIssuerFromEnv(env: NodeJS.ProcessEnv): TrustedIssuer | undefined {
  const issuer = setting("SCRATCHRUN_OIDC_ISSUER", env);
  const audience = setting("SCRATCHRUN_OIDC_AUDIENCE", env);
  const clientId = setting("SCRATCHRUN_OIDC_CLIENT_ID", env);
  const clientSecret = setting("SCRATCHRUN_OIDC_CLIENT_SECRET", env);
  if (!issuer) {
    if (audience || clientId || clientSecret)
      throw new Error(
        "SCRATCHRUN_OIDC_AUDIENCE, SCRATCHRUN_OIDC_CLIENT_ID and SCRATCHRUN_OIDC_CLIENT_SECRET need SCRATCHRUN_OIDC_ISSUER",
      );
    return undefined;
  }
  const bad = checkIssuerUrl(issuer, "SCRATCHRUN_OIDC_ISSUER");
  if (bad) throw new Error(bad);
  if (clientSecret && !clientId)
    throw new Error("SCRATCHRUN_OIDC_CLIENT_SECRET needs SCRATCHRUN_OIDC_CLIENT_ID");
  return new TrustedIssuer({
    issuer,
    ...(audience ? { audience } : {}),
    ...(clientId ? { clientId } : {}),
    ...(clientSecret ? { clientSecret } : {}),
  });
}
