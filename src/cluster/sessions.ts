import { sessionLost } from "../api/session-records.js";
import { wireToError } from "../api/wire.js";
import type { Logger } from "../http/log.js";
import type { ExecuteOptions } from "../engine/engine.js";
import { ScratchRunError } from "../errors.js";
import type { CallPolicy } from "../schema/policy.js";
import { parseSessionStart, sessionInfoSchema, type SessionInfo } from "../schema/session.js";
import type { SessionStore } from "../store/sessions.js";
import { LIMITS } from "../schema/limits.js";
import { choose } from "./choose.js";
import { WORKER_PATHS, type EndedSession, type WorkerSessionStart } from "./protocol.js";
import type { WorkerTable } from "./workers.js";

/** How an API replica reaches a worker: one JSON request, answered with status and body. */
export type WorkerRequest = (
  addr: string,
  path: string,
  body: unknown,
  signal?: AbortSignal,
) => Promise<{ status: number; body: unknown }>;

export interface ClusterSessionOptions {
  store: SessionStore;
  /** False: sessions are off here (SCRATCHRUN_SESSIONS_MAX=0), the tools are not listed. */
  on: boolean;
  logger: Logger;
  replicaId: string;
  random?: () => number;
}

const notFound = () =>
  new ScratchRunError(
    "SESSION_NOT_FOUND",
    "session_id: no such session (it ended, expired, or was never started by you)",
    { fix: "Start one with scratchrun_session_start, or leave out session_id for a fresh sandbox" },
  );

/**
 * An API replica's sessions (docs/decisions/0013-sessions.md, "Cluster mode"). A session lives
 * on the worker that started it; its record in the shared store names that worker (address and
 * worker_id), and every replica routes the session's calls there by it. Nothing is ever moved or
 * re-created: a worker that is lost (stopped answering, or answers as a new process) takes its
 * sessions with it, their records are closed as `lost`, and their next call is SESSION_LOST.
 * Ends on the worker (idle, lifetime, crashed, its shutdown) reach the records through the
 * worker's status, which every replica polls.
 */
/** What a session's start carries besides its input: the caller, its policy, where it may reach. */
export interface SessionStartOptions {
  owner?: string;
  policy?: CallPolicy;
  egressAllow?: readonly string[] | null;
  signal?: AbortSignal;
}

export class ClusterSessions {
  /** Ended sessions already written by this replica (digest → when the worker reported it). */
  private readonly closed = new Map<string, number>();
  /** Workers whose status this replica has seen (their earlier processes' records swept). */
  private readonly seen = new Set<string>();
  /** When records past the longest lifetime were last swept. */
  private outlivedAt = 0;

  constructor(
    private readonly table: WorkerTable,
    private readonly send: WorkerRequest,
    private readonly o: ClusterSessionOptions,
  ) {}

  /** Picks a worker with room and starts the session there; refusals move on as calls do. */
  async start(
    input: unknown,
    options: SessionStartOptions,
    policy: CallPolicy,
  ): Promise<SessionInfo & { placement: { worker: string; workerId: string | null } }> {
    const req = parseSessionStart(input, options.policy ?? policy);
    // The key's slot across the cluster was taken by the service before this start (its record,
    // reserved in the shared store: src/store/sessions.ts reserve); each worker keeps its own.
    const owner = options.owner ?? "local";
    const body: WorkerSessionStart = {
      replica_id: this.o.replicaId,
      owner,
      request: req,
      ...(options.egressAllow ? { egress_allow: [...options.egressAllow] } : {}),
    };
    const tried = new Set<string>();
    let refusal: ScratchRunError | undefined;
    for (let i = 0; i < 3; i++) {
      // A session starts cold (never from a pool): the lighter worker, whatever is warm.
      const candidates = this.table.candidates(req.runtime).map((c) => ({ ...c, warm: 0 }));
      const pick = choose(candidates, this.o.random ?? Math.random, tried);
      if (!pick) break;
      tried.add(pick.id);
      let res: { status: number; body: unknown };
      try {
        res = await this.send(pick.id, WORKER_PATHS.sessions, body, options.signal);
      } catch (e) {
        if (options.signal?.aborted) throw e;
        refusal = new ScratchRunError("NOT_READY", `Worker ${pick.id} is not reachable`);
        continue;
      }
      if (res.status === 201) {
        const answer = res.body as { session?: unknown; worker_id?: unknown };
        const info = sessionInfoSchema.parse(answer.session);
        return {
          ...info,
          placement: {
            worker: pick.id,
            workerId: typeof answer.worker_id === "string" ? answer.worker_id : null,
          },
        };
      }
      const error = wireToError(res.status, res.body);
      if (res.status !== 429 && res.status !== 503) throw error;
      if (!refusal || error.code === "BUSY") refusal = error;
    }
    if (refusal) throw refusal;
    throw new ScratchRunError("NOT_READY", "No worker is available", {
      fix: "Check that worker pods run and are ready (kubectl get pods -l app.kubernetes.io/component=worker)",
    });
  }

  /** Ends the owner's session on its worker and closes its record. */
  async end(id: string, owner: string): Promise<SessionInfo> {
    const row = await this.o.store.find(id);
    if (!row || row.key_id !== owner) throw notFound();
    if (row.end_reason === "lost") throw sessionLost();
    if (row.ended_at !== null || !row.worker) throw notFound();
    const placement = { worker: row.worker, workerId: row.worker_id, record: row.id };
    if (!(await this.reachable(placement))) throw sessionLost();
    let res: { status: number; body: unknown };
    try {
      res = await this.send(row.worker, WORKER_PATHS.sessionEnd, { owner, session_id: id });
    } catch {
      await this.lose(placement);
      throw sessionLost();
    }
    // Gone on its worker already (it expired a moment ago): its record closes from the status.
    if (res.status !== 200) throw wireToError(res.status, res.body);
    const info = sessionInfoSchema.parse((res.body as { session?: unknown }).session);
    await this.o.store.end(row.id, "ended", info.calls);
    return info;
  }

  /**
   * Ends the owner's session known by its digest on `worker`, for `reason` policy (its key no
   * longer admits it: src/api/session-policy.ts). Its record was closed already; a worker that
   * does not answer is left to its status and lease as any lost worker is.
   */
  async endByDigest(worker: string, owner: string, digest: string): Promise<void> {
    try {
      await this.send(worker, WORKER_PATHS.sessionEnd, {
        owner,
        id_sha256: digest,
        reason: "policy",
      });
    } catch (e) {
      this.o.logger.warn(
        { worker, err: e instanceof Error ? e.message : String(e) },
        "ending a session its key no longer admits failed",
      );
    }
  }

  /**
   * Whether the session's worker is still the process that started it: up in this replica's
   * table with the same worker_id. If not, the session's record is closed as lost.
   */
  async reachable(p: NonNullable<ExecuteOptions["sessionPlacement"]>): Promise<boolean> {
    const w = this.table.workers.get(p.worker);
    const id = w?.status?.worker_id;
    if (w?.up && (p.workerId === null || id === p.workerId)) return true;
    // Not seen yet by a replica that just started: its status will tell within a poll.
    if (w && !w.status && w.misses < 3) return true;
    await this.lose(p);
    return false;
  }

  /** The session's record closed as lost (its worker died under it or restarted). */
  async lose(p: { record: string }): Promise<void> {
    await this.o.store
      .end(p.record, "lost", null)
      .catch((e: unknown) =>
        this.o.logger.warn(
          { err: e instanceof Error ? e.message : String(e) },
          "session record write failed",
        ),
      );
  }

  /** A worker was lost: the records of its sessions (not those of `keep`, its new process). */
  async workerLost(addr: string, keep: string | null): Promise<void> {
    try {
      const n = await this.o.store.markWorkerLost(addr, keep);
      if (n > 0) this.o.logger.warn({ worker: addr, sessions: n }, "sessions lost with worker");
    } catch (e) {
      this.o.logger.warn(
        { err: e instanceof Error ? e.message : String(e) },
        "session record write failed",
      );
    }
  }

  /**
   * A worker's status, as this replica polls it. The first of each worker closes the records its
   * earlier processes left open (markEarlierLivesLost); at most once a minute, records older than
   * the largest lifetime close too (markOutlived). Then the sessions it says ended.
   */
  async status(addr: string, workerId: string, ended: readonly EndedSession[], now = Date.now()) {
    const sweeps: [string, () => Promise<number>][] = [];
    if (!this.seen.has(addr)) {
      this.seen.add(addr);
      sweeps.push([
        "earlier process",
        () => this.o.store.markEarlierLivesLost(addr, workerId, now),
      ]);
    }
    if (now - this.outlivedAt >= 60_000) {
      this.outlivedAt = now;
      const before = now - LIMITS.session.lifetimeMs.max - 60_000;
      sweeps.push(["past the longest lifetime", () => this.o.store.markOutlived(before, now)]);
    }
    for (const [why, sweep] of sweeps) {
      try {
        const n = await sweep();
        if (n > 0)
          this.o.logger.warn(
            { worker: addr, sessions: n, why },
            "stale session records closed as lost",
          );
      } catch (e) {
        if (why === "earlier process") this.seen.delete(addr);
        this.o.logger.warn(
          { err: e instanceof Error ? e.message : String(e) },
          "session record write failed",
        );
      }
    }
    if (ended.length) await this.ended(ended, now);
  }

  /** A worker's status listed these ended sessions: their records close (once per replica). */
  async ended(list: readonly EndedSession[], now = Date.now()): Promise<void> {
    for (const [digest, at] of this.closed) if (now - at > 120_000) this.closed.delete(digest);
    for (const e of list) {
      if (this.closed.has(e.id_sha256)) continue;
      this.closed.set(e.id_sha256, now);
      try {
        await this.o.store.endByDigest(e.id_sha256, e.reason, e.calls, e.at);
      } catch (err) {
        this.closed.delete(e.id_sha256);
        this.o.logger.warn(
          { err: err instanceof Error ? err.message : String(err) },
          "session record write failed",
        );
      }
    }
  }

  get on(): boolean {
    return this.o.on;
  }
}

export { notFound as sessionNotFound };
