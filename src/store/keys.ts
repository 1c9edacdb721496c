import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { ScratchRunError } from "../errors.js";
import {
  applyPatch,
  policyFromColumn,
  policyToColumn,
  type KeyPolicy,
  type PolicyPatch,
} from "../policy/key-policy.js";
import type { Db } from "./db.js";
import { asDriver, type SqlDriver } from "./sql.js";

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
  /** When the key stops authenticating (ms); null: never. */
  expiresAt: number | null;
  lastUsedAt: number | null;
  /** The key's own policy (src/policy/key-policy.ts); null: the server's settings. */
  policy: KeyPolicy | null;
  /** The console user it belongs to; null: made by the CLI without --owner (admins see it). */
  ownerId: string | null;
}

/** A verified key: who it is and what it may do. */
export interface VerifiedKey {
  id: string;
  name: string;
  policy: KeyPolicy | null;
}

export const hashKey = (key: string): Buffer => createHash("sha256").update(key, "utf8").digest();

/** The id part of a well-formed key, or null: a pure check, no database access. */
export function parseKeyId(key: string): string | null {
  return KEY_FORMAT.exec(key)?.[1] ?? null;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9 ._@-]{0,63}$/;

/** A key that has not expired, as of the statement's next parameter (now, ms). */
const LIVE = "(expires_at IS NULL OR expires_at > ?)";

/**
 * A local user's principal (decision 0018): `uid:N`, N a uid in decimal. A key's name cannot
 * hold a colon (NAME), so no key can be created, or renamed, into one.
 */
export const PRINCIPAL = /^uid:(0|[1-9][0-9]{0,9})$/;

export class KeyStore {
  private readonly dummy = hashKey(`srk_000000000000_${"A".repeat(43)}`);
  private readonly sql: SqlDriver;

  /**
   * verifiedCacheMs > 0 (API replicas): a key verified within that long is taken as verified
   * again without a database round trip, so a revocation or a policy change reaches a replica
   * within that time. Only successes are kept, by the presented key's hash.
   */
  constructor(
    db: Db | SqlDriver,
    private readonly options: { verifiedCacheMs?: number } = {},
  ) {
    this.sql = asDriver(db);
  }

  private readonly verified = new Map<string, { key: VerifiedKey; until: number }>();

  /**
   * Creates a key, with its own policy if given (checked: a TypeError names a bad field) and an
   * expiry if given (ms, after `now`); the returned `key` is shown once and never stored.
   */
  async create(
    name: string,
    policy: PolicyPatch | null = null,
    now = Date.now(),
    ownerId: string | null = null,
    oidcSubject: string | null = null,
    expiresAt: number | null = null,
  ): Promise<{ id: string; key: string; policy: KeyPolicy | null; expiresAt: number | null }> {
    if (!NAME.test(name))
      throw new TypeError(
        `key name ${JSON.stringify(name)} must be 1-64 letters, digits, space, . _ @ or -`,
      );
    if (expiresAt !== null && (!Number.isSafeInteger(expiresAt) || expiresAt <= now))
      throw new TypeError("a key's expiry is a time in the future (ms since the epoch)");
    const checked = policy ? applyPatch(null, policy) : null;
    if (oidcSubject !== null) {
      checkSubject(oidcSubject);
      if (await this.bySubject(oidcSubject))
        throw new TypeError(
          `an active key is bound to OIDC subject ${JSON.stringify(oidcSubject)} already (revoke it first)`,
        );
    }
    const id = randomBytes(6).toString("hex");
    const key = `srk_${id}_${randomBytes(32).toString("base64url")}`;
    await this.sql.run(
      "INSERT INTO keys (id, name, hash, created_at, policy, owner_id, oidc_subject, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
      [id, name, hashKey(key), now, policyToColumn(checked), ownerId, oidcSubject, expiresAt],
    );
    return { id, key, policy: checked, expiresAt };
  }

  /**
   * Changes the policy of the active key with this id or name (fields in `patch` set, null ones
   * cleared); the key's next request is held to it. Throws a TypeError for a bad field or a name
   * that matches several keys; returns null when no active key matches. `admit` sees the new
   * policy inside the same transaction and may throw to refuse it (a console member's ceiling).
   */
  async updatePolicy(
    idOrName: string,
    patch: PolicyPatch,
    admit?: (policy: KeyPolicy | null) => void,
  ): Promise<{ id: string; policy: KeyPolicy | null } | null> {
    return this.sql.transaction(async (tx) => {
      const rows = await tx.all<{ id: string; policy: string | null }>(
        `SELECT id, policy FROM keys WHERE (id = ? OR name = ?) AND revoked_at IS NULL AND ${LIVE}`,
        [idOrName, idOrName, Date.now()],
      );
      if (rows.length === 0) return null;
      if (rows.length > 1)
        throw new TypeError(
          `${rows.length} active keys are named ${JSON.stringify(idOrName)}: give the id (${rows.map((r) => r.id).join(", ")})`,
        );
      const row = rows[0]!;
      const policy = applyPatch(this.readPolicy(row.id, row.policy), patch);
      admit?.(policy);
      await tx.run("UPDATE keys SET policy = ? WHERE id = ?", [policyToColumn(policy), row.id]);
      return { id: row.id, policy };
    });
  }

  /** A stored policy; one that no longer parses refuses the key (fail closed) and says why. */
  private readPolicy(id: string, text: string | null): KeyPolicy | null {
    try {
      return policyFromColumn(text);
    } catch (e) {
      throw new ScratchRunError(
        "INTERNAL",
        `the stored policy of API key ${id} is not valid: ${e instanceof Error ? e.message : String(e)}`,
        { fix: `Set it again: scratchrun keys update ${id} --… (or revoke the key)` },
      );
    }
  }

  /** Every key, or (`ownerId`) the keys of one console user. */
  async list(ownerId?: string): Promise<KeyInfo[]> {
    const rows = await this.sql.all<{
      id: string;
      name: string;
      created_at: number;
      revoked_at: number | null;
      expires_at: number | null;
      last_used_at: number | null;
      policy: string | null;
      owner_id: string | null;
    }>(
      `SELECT id, name, created_at, revoked_at, expires_at, last_used_at, policy, owner_id FROM keys
       ${ownerId === undefined ? "" : "WHERE owner_id = ?"} ORDER BY created_at, id`,
      ownerId === undefined ? [] : [ownerId],
    );
    return rows.map((r) => ({
      id: r.id,
      name: r.name,
      createdAt: r.created_at,
      revokedAt: r.revoked_at,
      expiresAt: r.expires_at === null ? null : Number(r.expires_at),
      lastUsedAt: r.last_used_at,
      policy: this.readPolicy(r.id, r.policy),
      ownerId: r.owner_id,
    }));
  }

  /**
   * The active key with this id, as `verify` gives it: what an OAuth access token acts as (its
   * grant names the key; the key's revocation or new policy holds from the next request).
   */
  async active(id: string, now = Date.now()): Promise<VerifiedKey | null> {
    const row = await this.sql.get<{ id: string; name: string; policy: string | null }>(
      `SELECT id, name, policy FROM keys WHERE id = ? AND revoked_at IS NULL AND ${LIVE}`,
      [id, now],
    );
    return row ? { id: row.id, name: row.name, policy: this.readPolicy(row.id, row.policy) } : null;
  }

  /**
   * The active key bound to a trusted OIDC issuer's subject (`keys create --oidc-subject`): what
   * that issuer's access token for /mcp acts as. Null when none is.
   */
  async bySubject(subject: string, now = Date.now()): Promise<VerifiedKey | null> {
    const row = await this.sql.get<{ id: string; name: string; policy: string | null }>(
      `SELECT id, name, policy FROM keys WHERE oidc_subject = ? AND revoked_at IS NULL AND ${LIVE}`,
      [subject, now],
    );
    return row ? { id: row.id, name: row.name, policy: this.readPolicy(row.id, row.policy) } : null;
  }

  /**
   * The local user `uid:N` (PRINCIPAL) as a key: the local service's caller, whose uid the
   * kernel proved (src/api/peer-auth.ts). Made the first time it is asked for, with no policy of
   * its own (the server's) and a hash of 32 random bytes that no presented key can match, so it
   * is never a bearer; `keys update uid:N` gives it a policy. Null once root revoked it: a
   * revoked principal is never made again.
   */
  async principal(name: string, now = Date.now()): Promise<VerifiedKey | null> {
    if (!PRINCIPAL.test(name)) throw new TypeError(`${JSON.stringify(name)} is not uid:N`);
    // One statement: two first calls at once make one row.
    await this.sql.run(
      `INSERT INTO keys (id, name, hash, created_at) SELECT ?, ?, ?, ?
       WHERE NOT EXISTS (SELECT 1 FROM keys WHERE name = ?)`,
      [randomBytes(6).toString("hex"), name, randomBytes(32), now, name],
    );
    const row = await this.sql.get<{
      id: string;
      name: string;
      policy: string | null;
      revoked_at: number | null;
    }>("SELECT id, name, policy, revoked_at FROM keys WHERE name = ? ORDER BY created_at, id", [
      name,
    ]);
    if (!row || row.revoked_at !== null) return null;
    return { id: row.id, name: row.name, policy: this.readPolicy(row.id, row.policy) };
  }

  /** Revokes by id or by name; returns the ids revoked (none if nothing matched). */
  async revoke(idOrName: string, now = Date.now()): Promise<string[]> {
    const rows = await this.sql.all<{ id: string }>(
      "SELECT id FROM keys WHERE (id = ? OR name = ?) AND revoked_at IS NULL",
      [idOrName, idOrName],
    );
    for (const r of rows)
      await this.sql.run("UPDATE keys SET revoked_at = ? WHERE id = ?", [now, r.id]);
    return rows.map((r) => r.id);
  }

  /** The key's id, name and policy when it is valid and not revoked, else null. */
  async verify(presented: string, now = Date.now()): Promise<VerifiedKey | null> {
    const ttl = this.options.verifiedCacheMs ?? 0;
    if (ttl <= 0) return (await this.lookUp(presented, now))?.key ?? null;
    const digest = hashKey(presented).toString("base64");
    const hit = this.verified.get(digest);
    if (hit && hit.until > now) return hit.key;
    const found = await this.lookUp(presented, now);
    const key = found?.key ?? null;
    if (this.verified.size >= 1024) this.verified.clear();
    // Never kept past the key's expiry.
    if (found)
      this.verified.set(digest, {
        key: found.key,
        until: Math.min(now + ttl, found.expiresAt ?? Infinity),
      });
    else this.verified.delete(digest);
    return key;
  }

  private async lookUp(
    presented: string,
    now: number,
  ): Promise<{ key: VerifiedKey; expiresAt: number | null } | null> {
    const id = parseKeyId(presented);
    const row =
      id === null
        ? undefined
        : await this.sql.get<{
            id: string;
            name: string;
            hash: Buffer;
            revoked_at: number | null;
            expires_at: number | null;
            policy: string | null;
          }>("SELECT id, name, hash, revoked_at, expires_at, policy FROM keys WHERE id = ?", [id]);
    const expected = row?.hash.length === 32 ? row.hash : this.dummy;
    const match = timingSafeEqual(hashKey(presented), expected);
    if (!row || !match || row.revoked_at !== null) return null;
    const expiresAt = row.expires_at === null ? null : Number(row.expires_at);
    if (expiresAt !== null && expiresAt <= now) return null;
    return {
      key: { id: row.id, name: row.name, policy: this.readPolicy(row.id, row.policy) },
      expiresAt,
    };
  }

  async touch(id: string, now = Date.now()): Promise<void> {
    await this.sql.run("UPDATE keys SET last_used_at = ? WHERE id = ?", [now, id]);
  }
}

/** An OIDC subject as an operator names it: 1-255 printable ASCII characters (OIDC Core §2). */
export function checkSubject(subject: string): void {
  if (!/^[\x21-\x7e]{1,255}$/.test(subject))
    throw new TypeError(
      `an OIDC subject is 1-255 printable ASCII characters without spaces, not ${JSON.stringify(subject)}`,
    );
}
