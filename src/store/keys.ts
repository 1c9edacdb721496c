import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import type { Db } from "./db.js";

/**
 * API keys: `srk_<id>_<secret>`. The id (12 hex) finds the row; the secret is 32 random bytes.
 * Only SHA-256 of the whole key is stored (a high-entropy secret needs no slow hash); the
 * presented key's hash is compared in constant time, also when the id is unknown.
 */
const KEY_FORMAT = /^srk_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$/;

export interface KeyInfo {
  id: string;
  name: string;
  createdAt: number;
  revokedAt: number | null;
  lastUsedAt: number | null;
}

export const hashKey = (key: string): Buffer => createHash("sha256").update(key, "utf8").digest();

/** The id part of a well-formed key, or null: a pure check, no database access. */
export function parseKeyId(key: string): string | null {
  return KEY_FORMAT.exec(key)?.[1] ?? null;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9 ._@-]{0,63}$/;

export class KeyStore {
  private readonly dummy = hashKey(`srk_000000000000_${"A".repeat(43)}`);

  constructor(private readonly db: Db) {}

  /** Creates a key; the returned `key` is shown once and never stored. */
  create(name: string, now = Date.now()): { id: string; key: string } {
    if (!NAME.test(name))
      throw new Error(
        `key name ${JSON.stringify(name)} must be 1-64 letters, digits, space, . _ @ or -`,
      );
    const id = randomBytes(6).toString("hex");
    const key = `srk_${id}_${randomBytes(32).toString("base64url")}`;
    this.db
      .prepare("INSERT INTO keys (id, name, hash, created_at) VALUES (?, ?, ?, ?)")
      .run(id, name, hashKey(key), now);
    return { id, key };
  }

  list(): KeyInfo[] {
    const rows = this.db
      .prepare(
        "SELECT id, name, created_at, revoked_at, last_used_at FROM keys ORDER BY created_at, id",
      )
      .all() as {
      id: string;
      name: string;
      created_at: number;
      revoked_at: number | null;
      last_used_at: number | null;
    }[];
    return rows.map((r) => ({
      id: r.id,
      name: r.name,
      createdAt: r.created_at,
      revokedAt: r.revoked_at,
      lastUsedAt: r.last_used_at,
    }));
  }

  /** Revokes by id or by name; returns the ids revoked (none if nothing matched). */
  revoke(idOrName: string, now = Date.now()): string[] {
    const rows = this.db
      .prepare("SELECT id FROM keys WHERE (id = ? OR name = ?) AND revoked_at IS NULL")
      .all(idOrName, idOrName) as { id: string }[];
    const stmt = this.db.prepare("UPDATE keys SET revoked_at = ? WHERE id = ?");
    for (const r of rows) stmt.run(now, r.id);
    return rows.map((r) => r.id);
  }

  /** The key's id when it is valid and not revoked, else null. */
  verify(presented: string): { id: string; name: string } | null {
    const id = parseKeyId(presented);
    const row =
      id === null
        ? undefined
        : (this.db.prepare("SELECT id, name, hash, revoked_at FROM keys WHERE id = ?").get(id) as
            { id: string; name: string; hash: Buffer; revoked_at: number | null } | undefined);
    const expected = row?.hash.length === 32 ? row.hash : this.dummy;
    const match = timingSafeEqual(hashKey(presented), expected);
    if (!row || !match || row.revoked_at !== null) return null;
    return { id: row.id, name: row.name };
  }

  touch(id: string, now = Date.now()): void {
    this.db.prepare("UPDATE keys SET last_used_at = ? WHERE id = ?").run(now, id);
  }
}
