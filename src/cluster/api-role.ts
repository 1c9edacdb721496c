import { randomBytes } from "node:crypto";
import type { TrustedIssuer } from "../oauth/oidc.js";
import { hostname } from "node:os";
import type { TrustedProxies } from "../http/client-address.js";
import type { Logger } from "../http/log.js";
import type { KeyLimits } from "../policy/quota.js";
import { DEFAULT_KEY_LIMITS, startApiServer, type ApiServer } from "../api/server.js";
import type { CallAdmission } from "../api/service.js";
import type { CallPolicy } from "../schema/policy.js";
import { KeyStore } from "../store/keys.js";
import type { Store } from "../store/open.js";
import { admitShared } from "../store/shared-quota.js";
import { ClusterEngine } from "./dispatch.js";
import type { SessionLimits } from "../engine/sessions.js";
import { LIMITS } from "../schema/limits.js";
import { WorkerTable } from "./workers.js";

/** How long a replica trusts a key it verified (SECURITY.md, Trust zones: "HTTP API clients"). */
export const VERIFIED_KEY_CACHE_MS = 1000;

export interface ApiReplicaOptions {
  store: Store;
  logger: Logger;
  host: string;
  port: number;
  discover: () => Promise<string[]>;
  token: string;
  keyLimits?: Partial<KeyLimits>;
  /** The server-wide policy (an operator's raised maxima); default: the product's. */
  policy?: CallPolicy;
  bodyCapBytes?: number;
  /** The origin clients reach the service at (the OAuth issuer; src/api/server.ts). */
  publicUrl?: string;
  /** A trusted external OIDC issuer (src/oauth/oidc.ts). */
  oidc?: TrustedIssuer;
  /** The proxies in front, whose X-Forwarded-For names the client (SCRATCHRUN_TRUSTED_PROXIES). */
  trustedProxies?: TrustedProxies;
  /** How long a 2026 call with the tasks extension runs before it becomes a task. */
  taskAfterMs?: number;
  /** A replica that has not renewed its lease for this long is dead; its runs are interrupted. */
  leaseTtlMs?: number;
  pollMs?: number;
  replicaId?: string;
  drainTimeoutMs?: number;
  /**
   * Sessions (SCRATCHRUN_SESSIONS_MAX, SCRATCHRUN_SESSIONS_PER_KEY): 0 per server turns them off
   * here; per caller holds across the cluster (open records of the key).
   */
  sessions?: SessionLimits;
}

/** A replica's lease without `leaseTtlMs` (SCRATCHRUN_LEASE_TTL_MS). */
export const DEFAULT_LEASE_TTL_MS = 15_000;

export interface ApiReplica {
  readonly api: ApiServer;
  readonly replicaId: string;
  readonly table: WorkerTable;
  close(): Promise<void>;
}

/**
 * `scratchrun serve --role api`: the HTTP service with Postgres for records and a dispatcher to
 * workers instead of a local engine. Keeps a lease in the database, renewed every third of its
 * TTL; a replica sweeps the runs of expired leases only after its own database connection has
 * been good for a whole TTL (after an outage every live replica has had its chance to renew).
 */
export async function startApiReplica(o: ApiReplicaOptions): Promise<ApiReplica> {
  const replicaId = o.replicaId ?? `${hostname()}-${randomBytes(4).toString("hex")}`;
  const ttl = o.leaseTtlMs ?? DEFAULT_LEASE_TTL_MS;
  const { store, logger } = o;
  await store.leases.renew(replicaId, ttl);
  let goodSince: number | null = Date.now();
  let databaseUp = true;
  const renew = async () => {
    try {
      await store.leases.renew(replicaId, ttl);
      databaseUp = true;
      goodSince ??= Date.now();
      if (Date.now() - goodSince >= ttl) {
        const interrupted = await store.leases.sweep();
        if (interrupted > 0) logger.warn({ interrupted }, "runs of a lost replica interrupted");
      }
    } catch (e) {
      if (databaseUp)
        logger.warn({ err: e instanceof Error ? e.message : String(e) }, "database unreachable");
      databaseUp = false;
      goodSince = null;
    }
  };
  let renewing = false;
  const leaseTimer = setInterval(
    () => {
      if (renewing) return;
      renewing = true;
      void renew().finally(() => (renewing = false));
    },
    Math.max(100, Math.floor(ttl / 3)),
  );
  leaseTimer.unref();

  // The table tells the engine's sessions of workers lost and sessions ended (set just below).
  const late: { engine?: ClusterEngine } = {};
  const table = new WorkerTable({
    discover: o.discover,
    token: o.token,
    logger,
    ...(o.pollMs ? { pollMs: o.pollMs } : {}),
    // Sessions live on workers: a lost one takes its sessions along, and what ended on a worker
    // reaches the records through its status.
    onLost: (addr, keep) => void late.engine?.sessions?.workerLost(addr, keep),
    onStatus: (addr, status) =>
      void late.engine?.sessions?.status(addr, status.worker_id, status.sessions?.ended ?? []),
  });
  await table.start();
  const engine = new ClusterEngine(table, {
    token: o.token,
    replicaId,
    ...(o.policy ? { policy: o.policy } : {}),
    sessions: {
      store: store.sessions,
      on: (o.sessions?.perServer ?? LIMITS.session.perServer) !== 0,
      logger,
    },
  });
  late.engine = engine;
  const limits: KeyLimits = { ...DEFAULT_KEY_LIMITS, ...o.keyLimits };
  const admission: CallAdmission = {
    async admit(caller, req, now, sessionRecord = null) {
      const r = await admitShared(
        store.sql,
        {
          keyId: caller.keyId,
          transport: caller.transport,
          req,
          replicaId,
          limits: caller.policy.quota,
          sessionRecord,
        },
        now,
      );
      return r.ok ? { ...r, release: () => {} } : r;
    },
  };
  const api = await startApiServer({
    engine,
    replica: {
      // A key verified in the last second skips the database (one round trip less per call);
      // a revocation or a policy change reaches every replica within that second.
      keys: new KeyStore(store.sql, { verifiedCacheMs: VERIFIED_KEY_CACHE_MS }),
      runs: store.runs,
      sessions: store.sessions,
      users: store.users,
      oauth: store.oauth,
      replicaId,
      admission,
      readiness: () => ({ status: "ready" }),
      admissionTouchesKey: true,
      // A key's sessions across the cluster: their records, each start's taken before it runs.
      sessionsPerKey: o.sessions?.perCaller ?? LIMITS.session.perCaller,
      endSessionFor: async (s) => {
        if (s.worker) await engine.sessions?.endByDigest(s.worker, s.keyId, s.digest);
      },
      gauges: [
        {
          name: "scratchrun_workers",
          help: "Workers this replica sees, by state (up: answering its polls; draining).",
          labelNames: ["state"],
          read: () => {
            const c = table.counts();
            return [
              { labels: { state: "up" }, value: c.up },
              { labels: { state: "draining" }, value: c.draining },
            ];
          },
        },
        {
          name: "scratchrun_database_up",
          help: "1 while this replica's last lease renewal reached the database.",
          read: () => [{ labels: {}, value: databaseUp ? 1 : 0 }],
        },
      ],
    },
    logger,
    host: o.host,
    port: o.port,
    keyLimits: limits,
    ...(o.bodyCapBytes ? { bodyCapBytes: o.bodyCapBytes } : {}),
    ...(o.publicUrl ? { publicUrl: o.publicUrl } : {}),
    ...(o.oidc ? { oidc: o.oidc } : {}),
    ...(o.trustedProxies ? { trustedProxies: o.trustedProxies } : {}),
    ...(o.taskAfterMs !== undefined ? { sessions: { taskAfterMs: o.taskAfterMs } } : {}),
    ...(o.drainTimeoutMs ? { drainTimeoutMs: o.drainTimeoutMs } : {}),
  });
  logger.info({ replica: replicaId, workers: table.counts().up }, "api replica ready");
  let closing: Promise<void> | undefined;
  return {
    api,
    replicaId,
    table,
    close: () =>
      (closing ??= (async () => {
        await api.close();
        table.stop();
        clearInterval(leaseTimer);
        await store.leases.release(replicaId).catch(() => {});
      })()),
  };
}
