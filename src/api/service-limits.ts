import type { IncomingMessage } from "node:http";
import type { ConsoleDeps } from "../console/context.js";
import type { Engine } from "../engine/engine.js";
import { FailureLimiter } from "../http/auth.js";
import { clientAddress, NO_TRUSTED_PROXIES, type TrustedProxies } from "../http/client-address.js";
import type { Logger } from "../http/log.js";
import type { Metrics } from "../http/metrics.js";
import type { OAuthRouteDeps } from "../oauth/routes.js";
import type { OpenSessionKey, SessionStore } from "../store/sessions.js";
import type { UserStore } from "../store/users.js";
import type { ExecService } from "./service.js";
import { SessionPolicyWatch } from "./session-policy.js";

/**
 * The service's per-client limits and what holds sessions to their keys (issue 47), made once per
 * server by startApiServer: who a request comes from (the peer, or behind a trusted proxy the
 * client its X-Forwarded-For names), the buckets each open door charges, the watch that ends a
 * session its key no longer admits, and the password checks' gauge.
 */
export interface ClientOptions {
  /** The proxies in front, whose X-Forwarded-For names the client (SCRATCHRUN_TRUSTED_PROXIES). */
  trustedProxies?: TrustedProxies;
}

/** What a backing (ReplicaBacking) gives the session limits. */
export interface SessionHolding {
  /** Sessions one key keeps at once, starting ones included (SCRATCHRUN_SESSIONS_PER_KEY). */
  sessionsPerKey?: number;
  /**
   * Ends a session its key no longer admits where it lives (this server's engine, or the worker
   * holding it); its record is closed already (src/api/session-policy.ts).
   */
  endSessionFor?(s: OpenSessionKey): Promise<void>;
}

/** One server's engine as a SessionHolding: its per-caller limit, its sessions ended by digest. */
export function engineSessionHolding(engine: Engine): SessionHolding {
  return {
    ...(engine.options.sessions?.perCaller !== undefined
      ? { sessionsPerKey: engine.options.sessions.perCaller }
      : {}),
    endSessionFor: async (s) => {
      await engine.sessions.endByDigest(s.keyId, s.digest, "policy");
    },
  };
}

export interface ServiceLimits {
  /** The client's address a request is counted against (http/client-address.ts). */
  clientOf(req: IncomingMessage): string;
  /** Failed keys and tokens (REST, /mcp, /oauth/token): 20 at once per address, then one per 3 s. */
  failures: FailureLimiter;
  /** Ends sessions their key no longer admits; absent where the backing cannot end them. */
  watch: SessionPolicyWatch | undefined;
  /**
   * The OAuth rows' buckets: client registrations, open to anyone (20 at once per address, then
   * one per 30 s), and written authorization requests (30 at once, then one per 2 s).
   */
  oauth: Pick<OAuthRouteDeps, "registrations" | "authorizations" | "clientOf">;
  /**
   * The console's: wrong sign-ins (10 at once per address, then one per 6 s; each name also locks
   * itself), the policies keys and ceilings give, and a key's change, which its sessions hold to.
   */
  console: Pick<ConsoleDeps, "signinFailures" | "clientOf" | "policyFor" | "keyChanged">;
}

export function serviceLimits(
  o: {
    backing: SessionHolding & { sessions: SessionStore; users: UserStore };
    service: ExecService;
    metrics: Metrics;
  },
  options: ClientOptions & { logger: Logger },
): ServiceLimits {
  const { backing, service } = o;
  const proxies = options.trustedProxies ?? NO_TRUSTED_PROXIES;
  const clientOf = (req: IncomingMessage) =>
    clientAddress(req.socket.remoteAddress, req.headers["x-forwarded-for"], proxies);
  const policyFor = service.policyFor.bind(service);
  const endSessionFor = backing.endSessionFor?.bind(backing);
  const watch = endSessionFor
    ? new SessionPolicyWatch({
        records: backing.sessions,
        policyFor,
        end: endSessionFor,
        log: options.logger,
      })
    : undefined;
  watch?.start();
  const checks = backing.users.checks;
  o.metrics.addGauge({
    name: "scratchrun_password_checks",
    help: "Console password checks: running now, waiting, the most at once, done, refused for too many waiting.",
    labelNames: ["state"],
    read: () => [
      { labels: { state: "running" }, value: checks.runningNow },
      { labels: { state: "waiting" }, value: checks.waitingNow },
      { labels: { state: "most_at_once" }, value: checks.counts.mostAtOnce },
      { labels: { state: "done" }, value: checks.counts.done },
      { labels: { state: "refused" }, value: checks.counts.refused },
    ],
  });
  return {
    clientOf,
    failures: new FailureLimiter(),
    watch,
    oauth: {
      registrations: new FailureLimiter(20, 30_000),
      authorizations: new FailureLimiter(30, 2000),
      clientOf,
    },
    console: {
      signinFailures: new FailureLimiter(10, 6000),
      clientOf,
      policyFor,
      keyChanged: () => watch?.poke(),
    },
  };
}
