import { createHash, randomUUID } from "node:crypto";
import { policyFromColumn, type KeyPolicy } from "../policy/key-policy.js";
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

/** A session start admitted against its key's slots, not yet running (SessionStore.reserve). */
export interface SessionReservation {
  keyId: string;
  transport: "rest" | "mcp";
  runtime: string;
  memoryMb: number;
  network: string;
  replicaId?: string | null;
}

/** How long a reservation holds its slot without its session running (a start's longest wait). */
export const START_HOLD_MS = 10 * 60_000;

/** An open session's record with its key's policy as stored now (the policy sweep reads these). */
export interface OpenSessionKey {
  recordId: string;
  digest: string;
  keyId: string;
  runtime: string;
  memoryMb: number;
  network: string;
  worker: string | null;
  /** The key's policy now; null: none of its own. */
  policy: KeyPolicy | null;
  /** The key is revoked or expired (or gone, or its stored policy no longer parses). */
  revoked: boolean;
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

  /**
   * Takes one of the key's session slots before anything starts: the record is written now, open
   * and marked starting (its id_sha256 a placeholder nobody holds), in one step with the count of
   * the key's open records, starting ones included. Returns the record's id, or null when the
   * key has `perKey` already. SQLite runs the one statement alone; Postgres first takes a lock
   * per key for the transaction, so two replicas' starts for one key count one after the other.
   * A start that never finishes (its replica died) stops holding its slot after START_HOLD_MS.
   */
  async reserve(r: SessionReservation, perKey: number, now = Date.now()): Promise<string | null> {
    const id = randomUUID();
    const insert = `INSERT INTO sessions (id, id_sha256, key_id, transport, runtime, memory_mb,
         network, isolation, started_at, replica_id, starting_until)
       SELECT ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?
       WHERE (SELECT count(*) FROM sessions WHERE key_id = ? AND ended_at IS NULL
                AND (starting_until IS NULL OR starting_until > ?)) < ?`;
    const params = [
      id,
      `starting:${id}`,
      r.keyId,
      r.transport,
      r.runtime,
      r.memoryMb,
      r.network,
      now,
      r.replicaId ?? null,
      now + START_HOLD_MS,
      r.keyId,
      now,
      perKey,
    ];
    const inserted =
      this.sql.dialect === "sqlite"
        ? await this.sql.run(insert, params)
        : await this.sql.transaction(async (tx) => {
            await tx.all("SELECT pg_advisory_xact_lock(7250116, ?)", [keyLockId(r.keyId)]);
            return tx.run(insert, params);
          });
    return inserted === 1 ? id : null;
  }

  /** A reserved start's session runs: its record names it (by digest) and where it lives. */
  async placed(
    recordId: string,
    s: Pick<SessionBegin, "sessionId" | "runtime" | "memoryMb" | "network" | "isolation"> & {
      worker?: string | null;
      workerId?: string | null;
    },
  ): Promise<void> {
    await this.sql.run(
      `UPDATE sessions SET id_sha256 = ?, runtime = ?, memory_mb = ?, network = ?, isolation = ?,
         worker = ?, worker_id = ?, starting_until = NULL WHERE id = ?`,
      [
        sessionDigest(s.sessionId),
        s.runtime,
        s.memoryMb,
        s.network,
        s.isolation,
        s.worker ?? null,
        s.workerId ?? null,
        recordId,
      ],
      { retryMs: this.retryMs },
    );
  }

  /** A reserved start that did not start: its slot is free again (the record is dropped). */
  async release(recordId: string): Promise<void> {
    await this.sql.run(
      "DELETE FROM sessions WHERE id = ? AND starting_until IS NOT NULL",
      [recordId],
      { retryMs: this.retryMs },
    );
  }

  /**
   * Every open session (started, not starting) with its key's policy as stored now, for the sweep
   * that ends those their key no longer admits (src/api/session-policy.ts).
   */
  async openWithKeys(now = Date.now()): Promise<OpenSessionKey[]> {
    const rows = await this.sql.all<{
      id: string;
      id_sha256: string;
      key_id: string;
      runtime: string;
      memory_mb: number;
      network: string;
      worker: string | null;
      policy: string | null;
      revoked_at: number | null;
      expires_at: number | null;
      known: string | null;
    }>(
      `SELECT s.id, s.id_sha256, s.key_id, s.runtime, s.memory_mb, s.network, s.worker,
              k.policy, k.revoked_at, k.expires_at, k.id AS known
         FROM sessions s LEFT JOIN keys k ON k.id = s.key_id
        WHERE s.ended_at IS NULL AND s.starting_until IS NULL AND s.key_id IS NOT NULL`,
    );
    return rows.map((r) => {
      let policy: KeyPolicy | null = null;
      let broken = false;
      try {
        policy = policyFromColumn(r.policy);
      } catch {
        broken = true;
      }
      return {
        recordId: r.id,
        digest: r.id_sha256,
        keyId: r.key_id,
        runtime: r.runtime,
        memoryMb: Number(r.memory_mb),
        network: r.network,
        worker: r.worker,
        policy,
        revoked:
          r.known === null ||
          r.revoked_at !== null ||
          (r.expires_at !== null && Number(r.expires_at) <= now) ||
          broken,
      };
    });
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
  async markLost(now = Date.now()): Promise<number> {
    // Starts it never finished are no sessions: their reservations go.
    await this.sql.run(
      "DELETE FROM sessions WHERE ended_at IS NULL AND starting_until IS NOT NULL",
    );
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
  async markOutlived(startedBefore: number, now = Date.now()): Promise<number> {
    // Reservations past their hold (a replica died while starting) go first: no session ran.
    await this.sql.run(
      "DELETE FROM sessions WHERE ended_at IS NULL AND starting_until IS NOT NULL AND starting_until < ?",
      [now],
      { retryMs: this.retryMs },
    );
    return this.sql.run(
      `UPDATE sessions SET ended_at = ?, end_reason = 'lost', calls = ${CALLS_FROM_RUNS}
         WHERE ended_at IS NULL AND started_at < ?`,
      [now, startedBefore],
      { retryMs: this.retryMs },
    );
  }

  /** A key's sessions still open, starting ones included (what `reserve` counts). */
  async openCount(keyId: string, now = Date.now()): Promise<number> {
    const row = await this.sql.get<{ n: number | string }>(
      `SELECT count(*) AS n FROM sessions WHERE key_id = ? AND ended_at IS NULL
         AND (starting_until IS NULL OR starting_until > ?)`,
      [keyId, now],
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

/** A key's lock number for reserve() on Postgres: 31 bits of its id's SHA-256 (a clash waits). */
function keyLockId(keyId: string): number {
  return createHash("sha256").update(keyId, "utf8").digest().readInt32BE(0);
}
