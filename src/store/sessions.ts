import { createHash, randomUUID } from "node:crypto";
import type { SessionEnd } from "../engine/sessions.js";
import type { Db } from "./db.js";
import { asDriver, type SqlDriver } from "./sql.js";

/**
 * One row per session (docs/decisions/0013-sessions.md): whose, which runtime, memory and
 * network, when it started and ended and why, how many calls it ran. Each call of a session is a
 * run whose `session_record` names the row. As for runs: never code, output or env values.
 *
 * The session_id a caller holds is a bearer capability: whoever has it runs code in the session
 * (under the same key). The row keeps its SHA-256 only (`id_sha256`), so the records, their
 * backups and whoever reads them cannot act on a live session; the row's own id is a fresh UUID.
 *
 * Why a session ended: those of the engine (SessionEnd), and `lost`: the process holding its
 * sandbox died without ending it (a server killed and restarted, a worker that stopped answering
 * or restarted).
 */
export type SessionEndReason = SessionEnd | "lost";

export interface SessionRow {
  id: string;
  id_sha256: string;
  key_id: string | null;
  transport: string;
  runtime: string;
  memory_mb: number;
  network: string;
  isolation: string | null;
  started_at: number;
  ended_at: number | null;
  end_reason: SessionEndReason | null;
  calls: number | null;
  replica_id: string | null;
  worker: string | null;
  worker_id: string | null;
}

export interface SessionBegin {
  /** The caller's session_id (only its digest is stored). */
  sessionId: string;
  keyId: string | null;
  transport: "rest" | "mcp";
  runtime: string;
  memoryMb: number;
  network: string;
  isolation: string | null;
  /** In a cluster: the replica that started it, and the worker (address, worker_id) holding it. */
  replicaId?: string | null;
  worker?: string | null;
  workerId?: string | null;
}

/** The digest a session_id is stored and looked up by. */
export const sessionDigest = (sessionId: string): string =>
  createHash("sha256").update(sessionId, "utf8").digest("hex");

/** A session's calls, when nobody counted them: its runs that ran to a result. */
const CALLS_FROM_RUNS =
  "(SELECT count(*) FROM runs WHERE runs.session_record = sessions.id AND runs.status = 'finished')";

export class SessionStore {
  private readonly sql: SqlDriver;

  constructor(
    db: Db | SqlDriver,
    private readonly retryMs = 0,
  ) {
    this.sql = asDriver(db);
  }

  /** Records a session that has just started; returns its record's id. */
  async begin(s: SessionBegin, now = Date.now()): Promise<string> {
    const id = randomUUID();
    await this.sql.run(
      `INSERT INTO sessions (id, id_sha256, key_id, transport, runtime, memory_mb, network,
           isolation, started_at, replica_id, worker, worker_id)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
      [
        id,
        sessionDigest(s.sessionId),
        s.keyId,
        s.transport,
        s.runtime,
        s.memoryMb,
        s.network,
        s.isolation,
        now,
        s.replicaId ?? null,
        s.worker ?? null,
        s.workerId ?? null,
      ],
      { retryMs: this.retryMs },
    );
    return id;
  }

  /** The record of a session_id (open or ended), or undefined. */
  find(sessionId: string): Promise<SessionRow | undefined> {
    return this.sql.get<SessionRow>("SELECT * FROM sessions WHERE id_sha256 = ?", [
      sessionDigest(sessionId),
    ]);
  }

  /**
   * Closes an open record (a second close changes nothing: the first reason stands). `calls`
   * as the engine counted them; null: counted from the session's runs.
   */
  end(
    recordId: string,
    reason: SessionEndReason,
    calls: number | null,
    now = Date.now(),
  ): Promise<boolean> {
    return this.closeWhere("id", recordId, reason, calls, now);
  }

  /** As `end`, found by the caller's session_id. */
  endById(
    sessionId: string,
    reason: SessionEndReason,
    calls: number | null,
    now = Date.now(),
  ): Promise<boolean> {
    return this.endByDigest(sessionDigest(sessionId), reason, calls, now);
  }

  /** As `end`, found by the session_id's digest (a worker reports its ended sessions so). */
  endByDigest(
    digest: string,
    reason: SessionEndReason,
    calls: number | null,
    now = Date.now(),
  ): Promise<boolean> {
    return this.closeWhere("id_sha256", digest, reason, calls, now);
  }

  private async closeWhere(
    column: "id" | "id_sha256",
    value: string,
    reason: SessionEndReason,
    calls: number | null,
    now: number,
  ): Promise<boolean> {
    const changed = await this.sql.run(
      `UPDATE sessions SET ended_at = ?, end_reason = ?, calls = COALESCE(?, ${CALLS_FROM_RUNS})
         WHERE ${column} = ? AND ended_at IS NULL`,
      [now, reason, calls, value],
      { retryMs: this.retryMs },
    );
    return changed > 0;
  }

  /**
   * At a server's start: every record still open belonged to a process that died (kill -9, a
   * crash, power loss), whose sandboxes the start reaps. They are closed as `lost`.
   */
  markLost(now = Date.now()): Promise<number> {
    return this.sql.run(
      `UPDATE sessions SET ended_at = ?, end_reason = 'lost', calls = ${CALLS_FROM_RUNS}
         WHERE ended_at IS NULL`,
      [now],
    );
  }

  /**
   * A worker was lost (it stopped answering, or answers as a new process): its sessions' records
   * are closed as `lost`. `keep`: the worker_id of its live process, whose sessions stay.
   */
  markWorkerLost(worker: string, keep: string | null, now = Date.now()): Promise<number> {
    const lost = `UPDATE sessions SET ended_at = ?, end_reason = 'lost', calls = ${CALLS_FROM_RUNS}
         WHERE ended_at IS NULL AND worker = ?`;
    return keep === null
      ? this.sql.run(lost, [now, worker], { retryMs: this.retryMs })
      : this.sql.run(`${lost} AND (worker_id IS NULL OR worker_id <> ?)`, [now, worker, keep], {
          retryMs: this.retryMs,
        });
  }

  /**
   * A replica's first status of a worker at `worker` names its process `live`: records open there
   * under another known worker_id belonged to an earlier process at that address, and a worker's
   * sessions die with its process (a replica started after that death never saw the worker lost).
   * Records without a worker_id are left (nothing tells whose they are).
   */
  markEarlierLivesLost(worker: string, live: string, now = Date.now()): Promise<number> {
    return this.sql.run(
      `UPDATE sessions SET ended_at = ?, end_reason = 'lost', calls = ${CALLS_FROM_RUNS}
         WHERE ended_at IS NULL AND worker = ? AND worker_id IS NOT NULL AND worker_id <> ?`,
      [now, worker, live],
      { retryMs: this.retryMs },
    );
  }

  /**
   * Records open since before `startedBefore`: no session lives longer than the schema's largest
   * lifetime, so a record older than that is one whose end nobody saw (its worker gone from the
   * cluster's list while no replica ran). Closed as `lost`.
   */
  markOutlived(startedBefore: number, now = Date.now()): Promise<number> {
    return this.sql.run(
      `UPDATE sessions SET ended_at = ?, end_reason = 'lost', calls = ${CALLS_FROM_RUNS}
         WHERE ended_at IS NULL AND started_at < ?`,
      [now, startedBefore],
      { retryMs: this.retryMs },
    );
  }

  /** A key's sessions still open (the cluster's per-key limit). */
  async openCount(keyId: string): Promise<number> {
    const row = await this.sql.get<{ n: number | string }>(
      "SELECT count(*) AS n FROM sessions WHERE key_id = ? AND ended_at IS NULL",
      [keyId],
    );
    return Number(row?.n ?? 0);
  }

  get(id: string): Promise<SessionRow | undefined> {
    return this.sql.get<SessionRow>("SELECT * FROM sessions WHERE id = ?", [id]);
  }

  all(): Promise<SessionRow[]> {
    return this.sql.all<SessionRow>("SELECT * FROM sessions ORDER BY started_at, id");
  }
}
