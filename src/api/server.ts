import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { DEFAULT_SETTINGS } from "../schema/settings/values.js";
import type { Engine } from "../engine/engine.js";
import { engineGauges, engineReadiness } from "../engine/health.js";
import type { Db } from "../store/db.js";
import { KeyStore } from "../store/keys.js";
import { RunStore } from "../store/runs.js";
import { SandboxStore } from "../store/sandboxes.js";
import { SessionStore } from "../store/sessions.js";
import { OAuthStore } from "../store/oauth.js";
import { UserStore } from "../store/users.js";
import { SandboxTracker } from "../store/sandbox-tracker.js";
import { oauthConfig } from "../oauth/authorization.js";
import type { TrustedIssuer } from "../oauth/oidc.js";
import { METADATA_FETCH, type MetadataFetchOptions } from "../oauth/client-metadata.js";
import { oauthRoutes } from "../oauth/routes.js";
import { consoleRoutes } from "../console/routes.js";
import { messagePage, pageHeaders } from "../console/pages.js";
import { listen, routedServer } from "../http/listener.js";
import type { Logger } from "../http/log.js";
import { Metrics, type GaugeSource } from "../http/metrics.js";
import { probeRoutes } from "../http/probes.js";
import { sendError } from "../http/respond.js";
import { router } from "../http/router.js";
import { KeyQuota, type KeyLimits } from "../policy/quota.js";
import type { UnixSocketSpec } from "../http/unix-listener.js";
import { bearerAuth } from "./bearer.js";
import { listenLocalSocket } from "./local-socket.js";
import { McpSessions, type McpSessionLimits } from "./mcp-http.js";
import { checkHostOrigin } from "./origin.js";
import { serviceHealth } from "./health.js";
import { restRoutes } from "./rest.js";
import { ExecService, localAdmission, type CallAdmission, type ServiceEngine } from "./service.js";
import { engineSessionHolding, serviceLimits } from "./service-limits.js";
import type { ClientOptions, SessionHolding } from "./service-limits.js";

/**
 * What the service serves from: an API replica's (`serve --role api`) dispatcher to workers,
 * shared store and its own readiness and gauges; or one server's engine and SQLite
 * (`localBacking`).
 */
export interface ReplicaBacking extends SessionHolding {
  keys: KeyStore;
  runs: RunStore;
  sessions: SessionStore;
  users: UserStore;
  oauth: OAuthStore;
  replicaId: string;
  admission: CallAdmission;
  /** What /readyz says while the server is not draining. */
  readiness(): { status: string };
  gauges: GaugeSource[];
  /** Admission records the key's last use itself (one database round trip less per call). */
  admissionTouchesKey?: boolean;
}

type Backing = Omit<ReplicaBacking, "replicaId"> & {
  replicaId?: string;
  tracker?: SandboxTracker;
  /** Stops what the backing started. */
  close?(): void;
};

export type ApiServerOptions = ApiServerCommon &
  ({ engine: Engine; db: Db } | { engine: ServiceEngine; replica: ReplicaBacking });

export interface ApiServerCommon extends ClientOptions {
  logger: Logger;
  host: string;
  /** 0 picks a free port; null: no TCP listener (the local service on its socket alone). */
  port: number | null;
  /**
   * The local service's unix socket (decision 0018): the service's own rows (probes, REST, /mcp)
   * on a second listener, each request's caller the uid the kernel proves (`uid:N`), not a key.
   */
  socket?: UnixSocketSpec;
  keyLimits?: Partial<KeyLimits>;
  sessions?: Partial<McpSessionLimits>;
  /** Largest accepted request body. */
  bodyCapBytes?: number;
  /** Upper bound on how long shutdown waits for calls in flight. */
  drainTimeoutMs?: number;
  /**
   * The origin clients reach this service at (SCRATCHRUN_PUBLIC_URL, `https://…` behind TLS): the
   * OAuth issuer, and `${publicUrl}/mcp` the one resource its tokens are for. Unset: the
   * listening URL (right for loopback only).
   */
  publicUrl?: string;
  /** The bounds of client ID metadata document fetches (tests: `allowLoopback` and a CA). */
  metadataFetch?: Partial<MetadataFetchOptions>;
  /**
   * A trusted external OIDC issuer (SCRATCHRUN_OIDC_ISSUER): its JWT access tokens for /mcp act
   * as the key bound to their subject, clients are sent to it, and the console signs in with it.
   */
  oidc?: TrustedIssuer;
}

export interface ApiServer {
  /** The TCP listener's URL; `unix:PATH` when only the socket listens. */
  readonly url: string;
  readonly port: number;
  readonly metrics: Metrics;
  readonly service: ExecService;
  /** Stops accepting, drains calls in flight, closes MCP sessions. Does not close engine or db. */
  close(): Promise<void>;
}

/** Code (1 MiB) plus files (10 MiB) as JSON, with room for escaping and the other fields. */
export const DEFAULT_BODY_CAP_BYTES = 16 * 1024 * 1024;
export const DEFAULT_KEY_LIMITS: KeyLimits = { maxConcurrent: 4, ratePerMinute: 120, burst: 30 };

/** How long shutdown waits for calls in flight: 90 s, or the latest call's deadline and 15 s. */
export function drainBoundMs(latestDeadline: number, now = Date.now()): number {
  return Math.max(90_000, latestDeadline - now + 15_000);
}

/** Starts the HTTP service (REST, MCP, OAuth, the console, health, metrics) on one engine. */
export async function startApiServer(options: ApiServerOptions): Promise<ApiServer> {
  const { engine, logger } = options;
  const metrics = new Metrics();
  const keyLimits: KeyLimits = { ...DEFAULT_KEY_LIMITS, ...options.keyLimits };
  const backing: Backing =
    "replica" in options ? options.replica : localBacking(options.engine, options.db, keyLimits);
  const { keys, runs, users, oauth } = backing;
  const service = new ExecService({
    engine,
    runs,
    admission: backing.admission,
    metrics,
    log: logger,
    keyLimits,
    sessions: backing.sessions,
    sessionsPerKey: backing.sessionsPerKey,
    ...(backing.tracker ? { tracker: backing.tracker } : {}),
    ...(backing.replicaId ? { replicaId: backing.replicaId } : {}),
  });
  const bodyCapBytes = options.bodyCapBytes ?? DEFAULT_BODY_CAP_BYTES;
  const sessions = new McpSessions(service, {
    maxPerKey: 32,
    maxTotal: 1024,
    idleMs: 15 * 60_000,
    maxBodyBytes: bodyCapBytes,
    taskAfterMs: DEFAULT_SETTINGS.taskAfterMs,
    ...options.sessions,
  });
  const { readiness, health } = serviceHealth({ engine, backing, service, sessions, metrics });

  // The routes are made once the port is known (the OAuth issuer defaults to the listening URL);
  // requests come after.
  let front: (req: IncomingMessage, res: ServerResponse) => Promise<string> = () => {
    throw new Error("a request before the server listened");
  };
  const posts = postsInFlight();
  const server: Server = routedServer((q, s) => front(q, s), metrics, logger, posts.onRequest);
  const listening = options.port === null ? null : await listen(server, options.host, options.port);
  const port = listening?.port ?? 0;
  const config = oauthConfig(
    options.publicUrl ?? listening?.url ?? "http://localhost",
    { ...METADATA_FETCH, ...options.metadataFetch },
    options.oidc?.issuer,
  );
  const oidc = options.oidc ? { oidc: options.oidc } : {};
  const limits = serviceLimits({ backing, service, metrics }, options);
  const touches = backing.admissionTouchesKey === true;
  const rest = restRoutes({
    service,
    engine,
    keys,
    mcp: sessions,
    bodyCapBytes,
    authenticate: bearerAuth({
      keys,
      oauth,
      config,
      failures: limits.failures,
      clientOf: limits.clientOf,
      admissionTouchesKey: touches,
      ...oidc,
    }),
    admissionTouchesKey: touches,
  });
  const routes = router([
    ...probeRoutes(metrics, readiness),
    ...oauthRoutes({
      config,
      oauth,
      keys,
      failures: limits.failures,
      ...limits.oauth,
      authorizePage: (res, status, message) => {
        res.writeHead(status, pageHeaders());
        res.end(messagePage("Authorization refused", message));
      },
    }),
    ...consoleRoutes({
      config,
      users,
      oauth,
      keys,
      runs,
      ...limits.console,
      execAs: rest.execAs,
      health,
      bodyCapBytes,
      ...oidc,
    }),
    ...rest.routes,
  ]);
  front = async (req, res) => {
    // DNS rebinding: a loopback-bound server answers only its own names and origins.
    const check = checkHostOrigin(
      { host: req.headers.host, origin: req.headers.origin },
      { bindHost: options.host, port },
    );
    if (check.ok) return routes(req, res);
    sendError(res, 403, "FORBIDDEN", check.reason);
    return "forbidden";
  };
  const local = options.socket
    ? await listenLocalSocket({
        ...{ service, engine, keys, mcp: sessions, bodyCapBytes, admissionTouchesKey: touches },
        ...{ socket: options.socket, metrics, readiness, logger, onRequest: posts.onRequest },
      })
    : undefined;
  const { host } = options;
  const socket = options.socket?.path;
  logger.info({ host, port, socket, isolation: engine.backend.isolation }, "listening");

  let closing: Promise<void> | undefined;
  return {
    url: listening?.url ?? `unix:${socket ?? ""}`,
    port,
    metrics,
    service,
    close: () =>
      (closing ??= (async () => {
        const closed = (srv: Server) => new Promise<void>((resolve) => srv.close(() => resolve()));
        const stopped = Promise.all([server, ...(local ? [local] : [])].map(closed));
        const drained = service.drain();
        await limits.watch?.stop();
        const bound = options.drainTimeoutMs ?? drainBoundMs(service.latestDeadline());
        let timer: NodeJS.Timeout | undefined;
        const flushed = drained.then(() => posts.idle());
        await Promise.race([flushed, new Promise((r) => (timer = setTimeout(r, bound)))]);
        clearTimeout(timer);
        // The sessions this process holds end now, their records closed (reason "shutdown").
        await service.closeSessions();
        await sessions.closeAll();
        server.closeAllConnections();
        local?.closeAllConnections();
        await stopped;
        backing.close?.();
        logger.info({}, "stopped");
      })()),
  };
}

/** One server's backing: SQLite, the in-memory quota, and the engine's gauges and readiness. */
function localBacking(engine: Engine, db: Db, keyLimits: KeyLimits): Backing {
  const runs = new RunStore(db);
  const tracker = new SandboxTracker(new SandboxStore(db));
  // Warm-pool sandboxes are this server's too: recorded as they become ready (and those already
  // ready now), so a crash before any call still leaves nothing a restart cannot find.
  const untrack = engine.backend.onSandboxReady(() => void tracker.sandboxRunning());
  void tracker.sandboxRunning();
  return {
    keys: new KeyStore(db),
    runs,
    sessions: new SessionStore(db),
    users: new UserStore(db),
    oauth: new OAuthStore(db),
    admission: localAdmission(new KeyQuota(keyLimits), runs),
    ...engineSessionHolding(engine),
    readiness: () => engineReadiness(engine),
    gauges: engineGauges(engine),
    tracker,
    close: untrack,
  };
}

/**
 * POST requests whose response has not ended: shutdown waits for them after the drain, so the
 * last results are flushed before connections close.
 */
function postsInFlight() {
  let open = 0;
  let idle: (() => void) | undefined;
  return {
    onRequest(req: IncomingMessage, res: ServerResponse) {
      if (req.method !== "POST") return;
      open++;
      res.once("close", () => {
        if (--open === 0) idle?.();
      });
    },
    idle: () => new Promise<void>((r) => (open === 0 ? r() : (idle = r))),
  };
}
