import { randomBytes } from "node:crypto";
import type { Db } from "./db.js";
import { asDriver, type SqlDriver } from "./sql.js";

/**
 * The audit log: every change to a person, a key, a grant or a policy made through the console
 * (who, what, when, from which address). Append only: this store has no way to change or remove
 * an entry, and no route or command offers one, so an admin reads it but cannot clean it. What is
 * recorded names ids, names and policy fields; never a secret (a key, a password, a token).
 */
export interface AuditEntry {
  id: string;
  at: number;
  /** The console user who made the change (null: not a console user). */
  actorId: string | null;
  /** Their name as it was then. */
  actor: string;
  /** The client's address (behind a trusted proxy, its client's). */
  address: string | null;
  /** What was done: `key.create`, `key.revoke`, `key.policy`, `grant.revoke`, `user.ceiling`. */
  action: string;
  /** The id of what it was done to. */
  target: string | null;
  /** What changed (JSON: names, policy fields; never a secret). */
  detail: Record<string, unknown> | null;
}

export type AuditRecord = Omit<AuditEntry, "id" | "at">;

/** The most entries one read returns. */
export const AUDIT_PAGE_MAX = 200;

export class AuditStore {
  private readonly sql: SqlDriver;

  constructor(db: Db | SqlDriver) {
    this.sql = asDriver(db);
  }

  async record(e: AuditRecord, now = Date.now()): Promise<void> {
    await this.sql.run(
      `INSERT INTO audit_log (id, at, actor_id, actor, address, action, target, detail)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
      [
        `a_${randomBytes(8).toString("hex")}`,
        now,
        e.actorId,
        e.actor,
        e.address,
        e.action,
        e.target,
        e.detail === null ? null : JSON.stringify(e.detail),
      ],
    );
  }

  /** The newest entries first, `limit` at most, older than `before` when given. */
  async list(limit = 50, before?: number): Promise<AuditEntry[]> {
    const n = Math.max(1, Math.min(AUDIT_PAGE_MAX, Math.floor(limit)));
    const rows = await this.sql.all<{
      id: string;
      at: number;
      actor_id: string | null;
      actor: string;
      address: string | null;
      action: string;
      target: string | null;
      detail: string | null;
    }>(
      `SELECT id, at, actor_id, actor, address, action, target, detail FROM audit_log
       ${before === undefined ? "" : "WHERE at < ?"} ORDER BY at DESC, id DESC LIMIT ${n}`,
      before === undefined ? [] : [before],
    );
    return rows.map((r) => ({
      id: r.id,
      at: Number(r.at),
      actorId: r.actor_id,
      actor: r.actor,
      address: r.address,
      action: r.action,
      target: r.target,
      detail: r.detail === null ? null : (JSON.parse(r.detail) as Record<string, unknown>),
    }));
  }
}
