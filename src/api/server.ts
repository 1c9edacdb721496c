import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { taskAfterMsFromEnv } from "../mcp/tasks.js";
import type { Engine } from "../engine/engine.js";
import { isScratchRunError } from "../errors.js";
import { RUNTIMES, type RuntimeName } from "../schema/exec.js";
import { parseExecRequest } from "../schema/validate.js";
import type { Db } from "../store/db.js";
import { KeyStore, type VerifiedKey } from "../store/keys.js";
import { RunStore } from "../store/runs.js";
import { SandboxStore } from "../store/sandboxes.js";
import { SessionStore } from "../store/sessions.js";
import { OAuthStore } from "../store/oauth.js";
import { UserStore } from "../store/users.js";
import { bearerChallenge, oauthConfig, type OAuthConfig } from "../oauth/authorization.js";
import { looksLikeJwt } from "../oauth/jwt.js";
import type { TrustedIssuer } from "../oauth/oidc.js";
import { METADATA_FETCH, type MetadataFetchOptions } from "../oauth/client-metadata.js";
import { oauthRoutes } from "../oauth/routes.js";
import { consoleRoutes } from "../console/routes.js";
import { consoleApi } from "../console/api.js";
import { messagePage, pageHeaders } from "../console/pages.js";
import { SandboxTracker } from "../store/sandbox-tracker.js";
import { VERSION } from "../version.js";
import { FailureLimiter, parseBearer } from "../http/auth.js";
import { readJsonBody } from "../http/body.js";
import { listen, routedServer } from "../http/json-server.js";
import { answerError, refuse, sendError, sendJson } from "../http/respond.js";
import type { Logger } from "../http/log.js";
import { McpSessions, type McpSessionLimits } from "./mcp-http.js";
import { Metrics, type GaugeSource } from "../http/metrics.js";
import { buildOpenApiDocument } from "./openapi.js";
import { checkHostOrigin } from "./origin.js";
import { KeyQuota, type KeyLimits } from "../policy/quota.js";
import {
  ExecService,
  localAdmission,
  type CallAdmission,
  type Caller,
  type ServiceEngine,
} from "./service.js";
import { limitsToWire, outcomeToWire } from "./wire.js";

/**
 * What an API replica (`serve --role api`) serves from instead of a local engine and SQLite: the
 * dispatcher to workers, the shared store, and its own readiness and gauges.
 */
export interface ReplicaBacking {
  keys: KeyStore;
  runs: RunStore;
  sessions: SessionStore;
  users: UserStore;
  oauth: OAuthStore;
  replicaId: string;
  admission: CallAdmission;
  readiness(): { ready: boolean; status: string };
  gauges: GaugeSource[];
  /** Admission records the key's last use itself (one database round trip less per call). */
  admissionTouchesKey?: boolean;
}

export type ApiServerOptions = ApiServerCommon &
  ({ engine: Engine; db: Db } | { engine: ServiceEngine; replica: ReplicaBacking });

export interface ApiServerCommon {
  logger: Logger;
  host: string;
  /** 0 picks a free port. */
  port: number;
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

/** Starts the HTTP service (REST, MCP, health, metrics) on one engine. */
export async function startApiServer(options: ApiServerOptions): Promise<ApiServer> {
  const { engine, logger } = options;
  const metrics = new Metrics();
  const replica = "replica" in options ? options.replica : null;
  const local = "db" in options ? { engine: options.engine, db: options.db } : null;
  const keys = replica?.keys ?? new KeyStore(local!.db);
  const runs = replica?.runs ?? new RunStore(local!.db);
  const users = replica?.users ?? new UserStore(local!.db);
  const oauth = replica?.oauth ?? new OAuthStore(local!.db);
  let service: ExecService;
  let untrack = () => {};
  const keyLimits: KeyLimits = { ...DEFAULT_KEY_LIMITS, ...options.keyLimits };
  if (local) {
    const quota = new KeyQuota(keyLimits);
    const tracker = new SandboxTracker(new SandboxStore(local.db));
    // Warm-pool sandboxes are this server's too: recorded as they become ready (and those already
    // ready now), so a crash before any call still leaves nothing a restart cannot find.
    untrack = local.engine.backend.onSandboxReady(() => void tracker.sandboxRunning());
    void tracker.sandboxRunning();
    const admission = localAdmission(quota, runs);
    service = new ExecService({
      engine,
      runs,
      admission,
      metrics,
      log: logger,
      keyLimits,
      tracker,
      sessions: new SessionStore(local.db),
    });
  } else {
    const admission = replica!.admission;
    service = new ExecService({
      engine,
      runs,
      admission,
      metrics,
      log: logger,
      keyLimits,
      sessions: replica!.sessions,
      replicaId: replica!.replicaId,
    });
  }
  const bodyCap = options.bodyCapBytes ?? DEFAULT_BODY_CAP_BYTES;
  const sessions = new McpSessions(service, {
    maxPerKey: 32,
    maxTotal: 1024,
    idleMs: 15 * 60_000,
    maxBodyBytes: bodyCap,
    taskAfterMs: taskAfterMsFromEnv({}),
    ...options.sessions,
  });
  const failures = new FailureLimiter();
  // Sign-ins: 10 wrong at once per address, then one per 6 s (each account also locks itself).
  const signinFailures = new FailureLimiter(10, 6000);
  // Client registrations are open to anyone: 20 at once per address, then one per 30 s.
  const registrations = new FailureLimiter(20, 30_000);
  if (local) {
    const pooled = (r: RuntimeName) => local.engine.backend.pooled(r);
    metrics.addGauge({
      name: "scratchrun_sandboxes_active",
      help: "Calls holding a sandbox slot.",
      read: () => [{ labels: {}, value: local.engine.admission.active }],
    });
    metrics.addGauge({
      name: "scratchrun_queue_depth",
      help: "Calls waiting for a sandbox slot.",
      read: () => [{ labels: {}, value: local.engine.admission.queued }],
    });
    metrics.addGauge({
      name: "scratchrun_pool_ready",
      help: "Warm sandboxes ready per runtime (the namespace backend's jails serve every runtime).",
      labelNames: ["runtime"],
      read: () => RUNTIMES.map((r) => ({ labels: { runtime: r }, value: pooled(r).ready })),
    });
  }
  for (const g of replica?.gauges ?? []) metrics.addGauge(g);
  metrics.addGauge({
    name: "scratchrun_calls_in_flight",
    help: "Calls this server has admitted and not yet answered (what the API's HPA scales on).",
    read: () => [{ labels: {}, value: service.active }],
  });
  metrics.addGauge({
    name: "scratchrun_mcp_sessions",
    help: "Open MCP sessions.",
    read: () => [{ labels: {}, value: sessions.size }],
  });

  let port = options.port;

  const authenticate = async (
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<VerifiedKey | null> => {
    const addr = req.socket.remoteAddress ?? "unknown";
    const wait = failures.retryAfterS(addr);
    if (wait > 0) {
      sendError(res, 429, "UNAUTHORIZED", "Too many failed authentications; wait and retry", {
        "Retry-After": String(wait),
      });
      return null;
    }
    const token = parseBearer(req.headers.authorization);
    let key: VerifiedKey | null;
    try {
      key = token === null ? null : await verifyBearer(token);
    } catch (e) {
      // The shared database is away (failover): not the caller's fault, retry shortly.
      if (isScratchRunError(e) && e.code === "NOT_READY") {
        sendError(res, 503, "NOT_READY", e.message, { "Retry-After": "2" });
        return null;
      }
      throw e;
    }
    if (!key) {
      failures.recordFailure(addr);
      // /mcp's 401 names its protected-resource metadata: how an MCP client finds OAuth.
      const mcp = (req.url ?? "").split("?")[0] === "/mcp";
      sendError(
        res,
        401,
        "UNAUTHORIZED",
        "A valid API key or OAuth access token is required (Authorization: Bearer)",
        {
          "WWW-Authenticate": mcp
            ? bearerChallenge(config, token === null ? undefined : "invalid_token")
            : 'Bearer realm="scratchrun"',
        },
      );
      return null;
    }
    if (!replica?.admissionTouchesKey) keys.touch(key.id).catch(() => {});
    return key;
  };

  /**
   * An API key, or an OAuth access token (`sra_…`): the key its grant names, when the token is
   * live and was issued for this server's /mcp (RFC 8707: a token for another resource is no
   * token here). Either way the caller is exactly one key, with its policy, quota and records.
   */
  const verifyBearer = async (token: string): Promise<VerifiedKey | null> => {
    // A trusted issuer's token: the one active key bound to its subject (keys create
    // --oidc-subject); a subject no key is bound to is no caller.
    if (options.oidc && looksLikeJwt(token)) {
      const r = await options.oidc.verifyAccess(token, config.resource);
      return r.ok ? keys.bySubject(r.subject) : null;
    }
    if (!token.startsWith("sra_")) return keys.verify(token);
    const granted = await oauth.verifyAccess(token);
    if (!granted || granted.resource !== config.resource) return null;
    return keys.active(granted.keyId);
  };

  const exec = async (req: IncomingMessage, res: ServerResponse, caller: Caller) => {
    const body = await readJsonBody(req, bodyCap);
    if (!body.ok) return refuse(res, body.refusal);
    const controller = new AbortController();
    res.once("close", () => {
      if (!res.writableFinished) controller.abort();
    });
    try {
      const request = parseExecRequest(body.value, caller.policy.call);
      const outcome = await service.run(caller, request, {
        signal: controller.signal,
      });
      if (!res.destroyed) sendJson(res, 200, outcomeToWire(outcome));
    } catch (e) {
      answerError(res, e);
    }
  };

  /** POST /v1/sessions and DELETE /v1/sessions/{id}: the caller's sessions. */
  const sessionRoute = async (
    req: IncomingMessage,
    res: ServerResponse,
    caller: Caller,
    id: string | null,
  ) => {
    const ops = service.sessionsFor(() => caller);
    if (!ops)
      return sendError(
        res,
        400,
        "INVALID_INPUT",
        "sessions are off on this server (SCRATCHRUN_SESSIONS_MAX=0)",
      );
    try {
      if (id === null) {
        const body = await readJsonBody(req, bodyCap);
        if (!body.ok) return refuse(res, body.refusal);
        const controller = new AbortController();
        res.once("close", () => {
          if (!res.writableFinished) controller.abort();
        });
        sendJson(res, 201, await ops.start(body.value, controller.signal));
      } else sendJson(res, 200, await ops.end(id));
    } catch (e) {
      answerError(res, e);
    }
  };

  /** What /readyz answers (and the console's health page shows). */
  const readiness = () => {
    let status: string;
    if (service.isDraining) status = "draining";
    else if (local) {
      // Warming: a pool is configured and nothing in it is ready yet (a pool of 0 never warms).
      const pooled = (r: RuntimeName) => local.engine.backend.pooled(r);
      const warming =
        RUNTIMES.some((r) => pooled(r).target > 0) && RUNTIMES.every((r) => pooled(r).ready === 0);
      status = warming ? "warming" : "ready";
    } else status = replica!.readiness().status;
    return {
      status,
      isolation: engine.backend.isolation,
      ...(local ? { pools: local.engine.backend.pools() } : {}),
    };
  };

  /** The console's run: as /v1/exec, as one of the signed-in user's keys. */
  const execAs = async (
    req: IncomingMessage,
    res: ServerResponse,
    keyId: string,
    request: unknown,
  ) => {
    if (service.isDraining)
      return sendError(res, 503, "NOT_READY", "The server is shutting down", {
        Connection: "close",
      });
    const key = await keys.active(keyId);
    if (!key) return sendError(res, 404, "NOT_FOUND", "None of your active keys has this id");
    if (!replica?.admissionTouchesKey) keys.touch(key.id).catch(() => {});
    const policy = service.policyFor(key.policy);
    const controller = new AbortController();
    res.once("close", () => {
      if (!res.writableFinished) controller.abort();
    });
    try {
      const parsed = parseExecRequest(request, policy.call);
      const outcome = await service.run({ keyId: key.id, transport: "rest", policy }, parsed, {
        signal: controller.signal,
      });
      if (!res.destroyed) sendJson(res, 200, outcomeToWire(outcome));
    } catch (e) {
      answerError(res, e);
    }
  };

  const health = () => {
    const workers = replica?.gauges.find((g) => g.name === "scratchrun_workers");
    return {
      version: VERSION,
      ...readiness(),
      ...(workers
        ? { workers: Object.fromEntries(workers.read().map((w) => [w.labels.state, w.value])) }
        : {}),
      calls_in_flight: service.active,
      ...(engine.options.runtimes ? { runtimes: engine.options.runtimes } : {}),
    };
  };

  const route = async (req: IncomingMessage, res: ServerResponse): Promise<string> => {
    const path = (req.url ?? "/").split("?")[0]!;
    const check = checkHostOrigin(
      { host: req.headers.host, origin: req.headers.origin },
      { bindHost: options.host, port },
    );
    if (!check.ok) {
      sendError(res, 403, "FORBIDDEN", check.reason);
      return "forbidden";
    }
    const method = req.method ?? "GET";
    if (path === "/healthz" && method === "GET") {
      sendJson(res, 200, { status: "ok" });
      return path;
    }
    if (path === "/readyz" && method === "GET") {
      const r = readiness();
      sendJson(res, r.status === "ready" ? 200 : 503, r);
      return path;
    }
    if (path === "/metrics" && method === "GET") {
      const text = await metrics.render();
      res.writeHead(200, { "Content-Type": metrics.contentType });
      res.end(text);
      return path;
    }
    if (path === "/openapi.json" && method === "GET") {
      sendJson(res, 200, buildOpenApiDocument());
      return path;
    }
    const authLabel =
      (await oauthRoute(req, res, path, method)) ?? (await consoleRoute(req, res, path, method));
    if (authLabel !== null) return authLabel;
    const sessionId = path.startsWith("/v1/sessions/") ? path.slice("/v1/sessions/".length) : null;
    const known =
      path === "/v1/exec" ||
      path === "/v1/info" ||
      path === "/mcp" ||
      path === "/v1/sessions" ||
      sessionId !== null;
    if (!known) {
      sendError(res, 404, "NOT_FOUND", `No route ${path}`);
      return "unknown";
    }
    if (service.isDraining) {
      sendError(res, 503, "NOT_READY", "The server is shutting down", { Connection: "close" });
      return path;
    }
    const key = await authenticate(req, res);
    if (!key) return path;
    const policy = service.policyFor(key.policy);
    if (path === "/v1/info" && method === "GET") {
      sendJson(res, 200, {
        version: VERSION,
        isolation: engine.backend.isolation,
        network_note: policy.networkNote ?? engine.networkNote,
        sessions: engine.sessionsOn === true && engine.startSession !== undefined,
        limits: limitsToWire(policy),
        ...(engine.options.runtimes ? { runtimes: engine.options.runtimes } : {}),
      });
    } else if (path === "/v1/exec" && method === "POST") {
      await exec(req, res, { keyId: key.id, transport: "rest", policy });
    } else if (path === "/v1/sessions" && method === "POST") {
      await sessionRoute(req, res, { keyId: key.id, transport: "rest", policy }, null);
    } else if (sessionId !== null && method === "DELETE") {
      await sessionRoute(req, res, { keyId: key.id, transport: "rest", policy }, sessionId);
      return "/v1/sessions/{id}";
    } else if (path === "/mcp") {
      let body: unknown;
      if (method === "POST") {
        const parsed = await readJsonBody(req, bodyCap);
        if (!parsed.ok) {
          refuse(res, parsed.refusal);
          return path;
        }
        body = parsed.value;
      }
      await sessions.handle(req, res, { keyId: key.id, transport: "mcp", policy }, body);
    } else {
      sendError(res, 405, "NOT_FOUND", `${method} is not allowed on ${path}`);
    }
    return path;
  };

  // POST requests whose response has not ended: shutdown waits for them after the drain, so
  // the last results are flushed before connections close.
  let openPosts = 0;
  let postsIdle: (() => void) | undefined;
  const server: Server = routedServer(route, metrics, logger, (req, res) => {
    if (req.method === "POST") {
      openPosts++;
      res.once("close", () => {
        if (--openPosts === 0) postsIdle?.();
      });
    }
  });
  const listening = await listen(server, options.host, options.port);
  port = listening.port;
  // Known once the port is (the issuer defaults to the listening URL); requests come after.
  const config: OAuthConfig = oauthConfig(
    options.publicUrl ?? listening.url,
    { ...METADATA_FETCH, ...options.metadataFetch },
    options.oidc?.issuer,
  );
  const oauthRoute = oauthRoutes({
    config,
    oauth,
    keys,
    failures,
    registrations,
    authorizePage: (res, status, message) => {
      res.writeHead(status, pageHeaders());
      res.end(messagePage("Authorization refused", message));
    },
  });
  const consoleRoute = consoleRoutes({
    config,
    users,
    oauth,
    keys,
    signinFailures,
    ...(options.oidc ? { oidc: options.oidc } : {}),
    api: consoleApi({ keys, runs, oauth, execAs, health, bodyCapBytes: bodyCap }),
  });
  logger.info({ host: options.host, port, isolation: engine.backend.isolation }, "listening");

  let closing: Promise<void> | undefined;
  return {
    url: listening.url,
    port,
    metrics,
    service,
    close: () =>
      (closing ??= (async () => {
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        const drained = service.drain();
        const bound = options.drainTimeoutMs ?? drainBoundMs(service.latestDeadline());
        let timer: NodeJS.Timeout | undefined;
        const flushed = drained.then(
          () => new Promise<void>((r) => (openPosts === 0 ? r() : (postsIdle = r))),
        );
        await Promise.race([flushed, new Promise((r) => (timer = setTimeout(r, bound)))]);
        clearTimeout(timer);
        // The sessions this process holds end now, their records closed (reason "shutdown").
        await service.closeSessions();
        await sessions.closeAll();
        server.closeAllConnections();
        await stopped;
        untrack();
        logger.info({}, "stopped");
      })()),
  };
}
