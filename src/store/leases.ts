import type { SqlDriver } from "./sql.js";

/**
 * API replicas on one database each hold a lease, renewed every few seconds. A replica that stops
 * renewing (killed, partitioned) loses it after its TTL; any live replica then marks the runs it
 * held as failed with error_code INTERRUPTED, as a single server does for its own runs at restart.
 * Times are the replicas' clocks (ms), which Kubernetes nodes keep in step.
 */
export class LeaseStore {
  constructor(
    private readonly sql: SqlDriver,
    private readonly retryMs = 0,
  ) {}

  async renew(replicaId: string, ttlMs: number, now = Date.now()): Promise<void> {
    await this.sql.run(
      `INSERT INTO replicas (id, started_at, renewed_at, expires_at) VALUES (?, ?, ?, ?)
       ON CONFLICT (id) DO UPDATE SET renewed_at = excluded.renewed_at, expires_at = excluded.expires_at`,
      [replicaId, now, now, now + ttlMs],
      { retryMs: this.retryMs },
    );
  }

  /** A replica that drained and stops gives its lease back at once. */
  async release(replicaId: string): Promise<void> {
    await this.sql.run("DELETE FROM replicas WHERE id = ?", [replicaId], { retryMs: this.retryMs });
  }

  /**
   * Runs held by a replica without a live lease become failed/INTERRUPTED; expired leases go.
   * Returns how many runs were marked.
   */
  async sweep(now = Date.now()): Promise<number> {
    const marked = await this.sql.run(
      `UPDATE runs SET status = 'failed', finished_at = ?, error_code = 'INTERRUPTED'
       WHERE status IN ('queued', 'running') AND replica_id IS NOT NULL
         AND replica_id NOT IN (SELECT id FROM replicas WHERE expires_at >= ?)`,
      [now, now],
    );
    await this.sql.run("DELETE FROM replicas WHERE expires_at < ?", [now]);
    return marked;
  }

  async live(now = Date.now()): Promise<string[]> {
    const rows = await this.sql.all<{ id: string }>(
      "SELECT id FROM replicas WHERE expires_at >= ? ORDER BY id",
      [now],
    );
    return rows.map((r) => r.id);
  }
}
