import { createHash, randomBytes, scrypt, timingSafeEqual } from "node:crypto";
import {
  applyPatch,
  policyFromColumn,
  policyToColumn,
  type KeyPolicy,
  type PolicyPatch,
} from "../policy/key-policy.js";
import type { Db } from "./db.js";
import { checkSubject } from "./keys.js";
import { AuditStore } from "./audit.js";
import { InviteStore, type Invite } from "./invites.js";
import { PasswordChecks } from "./password-checks.js";
import { asDriver, type SqlDriver } from "./sql.js";

/**
 * Console users (`scratchrun users create`) and their signed-in sessions. A password is kept
 * only as its scrypt hash (`scrypt$N$r$p$salt$hash`, base64url); a session's cookie and the
 * key of its CSRF token only as SHA-256. Wrong passwords lock the name tried for a while
 * (`LOCKOUT`), whoever tries them and whether or not a user has it: the per-address limit in
 * front is the other half. Both are taken before the password is checked, so attempts sent at
 * once count as attempts sent one by one; and the checks themselves take turns (PasswordChecks).
 */
export type Role = "admin" | "member";

export interface User {
  id: string;
  name: string;
  role: Role;
}

export interface ConsoleSession {
  user: User;
  /** The token every form and every JSON write of this session must carry. */
  csrf: string;
  expiresAt: number;
}

/** scrypt's cost: N=2^15, r=8, p=1 (64 MiB of memory at most, tens of ms per check). */
const SCRYPT = { N: 1 << 15, r: 8, p: 1, maxmem: 64 * 1024 * 1024 } as const;
const HASH_BYTES = 32;

/** How many wrong passwords in a row lock an account, and for how long. */
export const LOCKOUT = { failures: 5, lockMs: 15 * 60_000 } as const;
/** How long a console session lasts after sign-in. */
export const SESSION_MS = 12 * 60 * 60_000;

export const USER_NAME = /^[a-z0-9][a-z0-9._@-]{0,63}$/;
export const PASSWORD_MIN = 12;

const sha256 = (s: string) => createHash("sha256").update(s, "utf8").digest("hex");

function scryptAsync(password: string, salt: Buffer, n: number, r: number, p: number) {
  return new Promise<Buffer>((resolve, reject) =>
    scrypt(password, salt, HASH_BYTES, { N: n, r, p, maxmem: SCRYPT.maxmem }, (e, key) =>
      e ? reject(e) : resolve(key),
    ),
  );
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const hash = await scryptAsync(password, salt, SCRYPT.N, SCRYPT.r, SCRYPT.p);
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString("base64url")}$${hash.toString("base64url")}`;
}

/** Whether `password` matches a stored hash (constant time on the hash; false if malformed). */
export async function checkPassword(password: string, stored: string): Promise<boolean> {
  const m = /^scrypt\$(\d+)\$(\d+)\$(\d+)\$([A-Za-z0-9_-]+)\$([A-Za-z0-9_-]+)$/.exec(stored);
  if (!m) return false;
  const [n, r, p] = [Number(m[1]), Number(m[2]), Number(m[3])];
  if (n > 1 << 20 || r > 32 || p > 16) return false;
  const want = Buffer.from(m[5]!, "base64url");
  const got = await scryptAsync(password, Buffer.from(m[4]!, "base64url"), n, r, p);
  return want.length === got.length && timingSafeEqual(want, got);
}

function checkNameAndRole(name: string, role: string): void {
  if (!USER_NAME.test(name))
    throw new TypeError(
      `user name ${JSON.stringify(name)} must be 1-64 lowercase letters, digits, . _ @ or -`,
    );
  if (role !== "admin" && role !== "member")
    throw new TypeError(`role must be admin or member, not ${JSON.stringify(role)}`);
}

/** A link that cannot be accepted: the transaction rolls back and the caller answers `invalid`. */
class InviteRefused extends Error {}

/**
 * A sign-in's outcome. `busy`: too many password checks are waiting (nothing was checked, nothing
 * counted); retry shortly.
 */
export type SignIn =
  | { ok: true; user: User; session: string; csrf: string }
  | { ok: false; reason: "wrong" | "locked" | "busy"; retryAfterS?: number };

interface UserRow {
  id: string;
  name: string;
  role: Role;
  password_hash: string;
}

const locked = (until: number, now: number): SignIn => ({
  ok: false,
  reason: "locked",
  retryAfterS: Math.max(1, Math.ceil((until - now) / 1000)),
});

/**
 * One wrong attempt reserved for `name`, in one statement: a name locked now gets no row back;
 * a lock that is over, or a last failure older than a lock, starts the count again; the
 * `LOCKOUT.failures`-th reservation in a row locks the name at once (its own check still runs).
 * Parameters: name, first lock, now, stale, stale, failures, lock, now, now.
 */
const RESERVE_SQL = `INSERT INTO signin_attempts (name, failed_count, locked_until, last_at)
  VALUES (?, 1, CAST(? AS BIGINT), CAST(? AS BIGINT))
  ON CONFLICT (name) DO UPDATE SET
    failed_count = CASE WHEN signin_attempts.locked_until IS NOT NULL
        OR signin_attempts.last_at <= CAST(? AS BIGINT) THEN 1
      ELSE signin_attempts.failed_count + 1 END,
    locked_until = CASE WHEN signin_attempts.locked_until IS NULL
        AND signin_attempts.last_at > CAST(? AS BIGINT)
        AND signin_attempts.failed_count + 1 >= CAST(? AS INTEGER) THEN CAST(? AS BIGINT)
      ELSE NULL END,
    last_at = CAST(? AS BIGINT)
  WHERE signin_attempts.locked_until IS NULL OR signin_attempts.locked_until <= CAST(? AS BIGINT)
  RETURNING failed_count, locked_until`;

export class UserStore {
  private readonly sql: SqlDriver;
  /** Checked for unknown names, so a miss costs what a wrong password does. */
  private dummy: Promise<string> | undefined;
  /** When stale attempt rows were last removed. */
  private prunedAt = 0;
  /** The audit log of what console users change (in the same database). */
  readonly audit: AuditStore;
  /** Invites and password-reset links (one-time, 24 h, kept hashed). */
  readonly invites: InviteStore;

  constructor(
    db: Db | SqlDriver,
    /** The turns password checks take (one per process: the thread pool is the process's). */
    readonly checks = new PasswordChecks(),
  ) {
    this.sql = asDriver(db);
    this.audit = new AuditStore(this.sql);
    this.invites = new InviteStore(this.sql);
  }

  /**
   * Creates a user; a TypeError names a bad name, role or short password. With `oidcSubject` the
   * user signs in through the trusted OIDC issuer as that subject, and a password is optional
   * (empty: none, so the password form never signs them in).
   */
  async create(
    name: string,
    role: Role,
    password: string,
    now = Date.now(),
    oidcSubject: string | null = null,
  ): Promise<User> {
    checkNameAndRole(name, role);
    const noPassword = oidcSubject !== null && password === "";
    if (!noPassword && (password.length < PASSWORD_MIN || password.length > 1024))
      throw new TypeError(`a password is ${PASSWORD_MIN} to 1024 characters`);
    if (oidcSubject !== null) {
      checkSubject(oidcSubject);
      if (await this.sql.get("SELECT id FROM users WHERE oidc_subject = ?", [oidcSubject]))
        throw new TypeError(
          `a user is linked to OIDC subject ${JSON.stringify(oidcSubject)} already`,
        );
    }
    const existing = await this.sql.get("SELECT id FROM users WHERE name = ?", [name]);
    if (existing) throw new TypeError(`a user named ${name} exists already`);
    const id = `u_${randomBytes(6).toString("hex")}`;
    await this.sql.run(
      "INSERT INTO users (id, name, role, password_hash, created_at, oidc_subject) VALUES (?, ?, ?, ?, ?, ?)",
      // "!" is no scrypt hash: checkPassword is false for every password.
      [id, name, role, noPassword ? "!" : await hashPassword(password), now, oidcSubject],
    );
    return { id, name, role };
  }

  async list(): Promise<User[]> {
    return this.sql.all<User>("SELECT id, name, role FROM users ORDER BY name");
  }

  async byName(name: string): Promise<User | undefined> {
    return this.sql.get<User>("SELECT id, name, role FROM users WHERE name = ?", [name]);
  }

  async byId(id: string): Promise<User | undefined> {
    return this.sql.get<User>("SELECT id, name, role FROM users WHERE id = ?", [id]);
  }

  /**
   * A one-time link that makes the user `name` with `role` once its holder sets a password;
   * a TypeError names a bad name or role, or a name someone has already. `createdBy`: the admin's
   * user id (null: the CLI).
   */
  async invite(
    name: string,
    role: Role,
    createdBy: string | null,
    now = Date.now(),
  ): Promise<{ invite: Invite; token: string }> {
    checkNameAndRole(name, role);
    if (await this.byName(name)) throw new TypeError(`a user named ${name} exists already`);
    return this.invites.create({ purpose: "join", name, role, createdBy }, now);
  }

  /** A one-time link that sets a new password for the user `id`; undefined when nobody has it. */
  async resetLink(
    id: string,
    createdBy: string | null,
    now = Date.now(),
  ): Promise<{ invite: Invite; token: string } | undefined> {
    const user = await this.byId(id);
    if (!user) return undefined;
    return this.invites.create(
      { purpose: "reset", name: user.name, userId: user.id, createdBy },
      now,
    );
  }

  /**
   * Accepts a link with the password its holder chose, and signs them in. A join link makes its
   * user; a reset link sets its user's password, signs them out everywhere else and lifts a lock
   * on their name. The link is used up in the same transaction, so it works once: a used, expired,
   * cancelled or forged one is `invalid`, as is a join link whose name someone took since, or a
   * reset link whose user was removed (those leave the link as it was). A short password is a
   * TypeError, before anything is checked.
   */
  async acceptInvite(
    token: string,
    password: string,
    now = Date.now(),
  ): Promise<
    | { ok: true; invite: Invite; user: User; session: string; csrf: string }
    | { ok: false; reason: "invalid" }
  > {
    if (password.length < PASSWORD_MIN || password.length > 1024)
      throw new TypeError(`a password is ${PASSWORD_MIN} to 1024 characters`);
    if (!(await this.invites.peek(token, now))) return { ok: false, reason: "invalid" };
    const hash = await hashPassword(password);
    const done = await this.sql
      .transaction(async (tx) => {
        const invite = await InviteStore.consume(tx, token, now);
        if (!invite) throw new InviteRefused();
        let user: User | undefined;
        if (invite.purpose === "join") {
          if (await tx.get("SELECT id FROM users WHERE name = ?", [invite.name]))
            throw new InviteRefused();
          user = {
            id: `u_${randomBytes(6).toString("hex")}`,
            name: invite.name,
            role: invite.role!,
          };
          await tx.run(
            "INSERT INTO users (id, name, role, password_hash, created_at) VALUES (?, ?, ?, ?, ?)",
            [user.id, user.name, user.role, hash, now],
          );
        } else {
          user = await tx.get<User>("SELECT id, name, role FROM users WHERE id = ?", [
            invite.userId,
          ]);
          if (!user) throw new InviteRefused();
          await tx.run("UPDATE users SET password_hash = ? WHERE id = ?", [hash, user.id]);
          await tx.run("DELETE FROM console_sessions WHERE user_id = ?", [user.id]);
          await tx.run("DELETE FROM signin_attempts WHERE name = ?", [user.name]);
        }
        return { invite, user };
      })
      .catch((e: unknown) => {
        if (e instanceof InviteRefused) return undefined;
        throw e;
      });
    if (!done) return { ok: false, reason: "invalid" };
    const signed = await this.openSession(done.user, now);
    if (!signed.ok) throw new Error("a session could not be opened");
    return {
      ok: true,
      invite: done.invite,
      user: done.user,
      session: signed.session,
      csrf: signed.csrf,
    };
  }

  /**
   * Checks a password and opens a session. The attempt is reserved first, against the name tried
   * (a locked name is refused with nothing checked), then the password is checked in its turn; a
   * right password removes the name's count, a wrong one leaves its reservation counted. An
   * unknown name, and a user without a password (OIDC only), cost the same check and count and
   * lock the same way, so neither the answers nor their timing tell who exists.
   */
  async signIn(name: string, password: string, now = Date.now()): Promise<SignIn> {
    // No user can have a name outside the pattern (a public rule): nothing to count or check.
    if (!USER_NAME.test(name)) return { ok: false, reason: "wrong" };
    const reserved = await this.reserve(name, now);
    if (!reserved.ok) return locked(reserved.lockedUntil, now);
    const row = await this.sql.get<UserRow>(
      "SELECT id, name, role, password_hash FROM users WHERE name = ?",
      [name],
    );
    const stored =
      row && row.password_hash !== "!"
        ? row.password_hash
        : await (this.dummy ??= hashPassword("not a password, ever"));
    const right = await this.checks.run(() => checkPassword(password, stored));
    if (right === null) {
      await this.unreserve(name);
      return { ok: false, reason: "busy", retryAfterS: 1 };
    }
    if (!right || !row || row.password_hash === "!")
      return reserved.lockedUntil === null
        ? { ok: false, reason: "wrong" }
        : locked(reserved.lockedUntil, now);
    await this.sql.run("DELETE FROM signin_attempts WHERE name = ?", [name]);
    return this.openSession({ id: row.id, name: row.name, role: row.role }, now);
  }

  /** Reserves one wrong attempt for `name` (RESERVE_SQL); refused while the name is locked. */
  private async reserve(
    name: string,
    now: number,
  ): Promise<{ ok: true; lockedUntil: number | null } | { ok: false; lockedUntil: number }> {
    if (now - this.prunedAt > 60_000) {
      this.prunedAt = now;
      await this.sql.run(
        "DELETE FROM signin_attempts WHERE last_at < ? AND (locked_until IS NULL OR locked_until < ?)",
        [now - LOCKOUT.lockMs, now],
      );
    }
    const lockAt = now + LOCKOUT.lockMs;
    const stale = now - LOCKOUT.lockMs;
    const row = await this.sql.get<{ failed_count: number; locked_until: number | null }>(
      RESERVE_SQL,
      [
        name,
        LOCKOUT.failures <= 1 ? lockAt : null,
        now,
        stale,
        stale,
        LOCKOUT.failures,
        lockAt,
        now,
        now,
      ],
    );
    if (row)
      return { ok: true, lockedUntil: row.locked_until === null ? null : Number(row.locked_until) };
    return { ok: false, lockedUntil: (await this.lockedUntil(name, now)) ?? now + 1000 };
  }

  /** Gives back a reservation whose password was never checked (too many checks waiting). */
  private async unreserve(name: string): Promise<void> {
    await this.sql.run(
      `UPDATE signin_attempts SET failed_count = failed_count - 1,
         locked_until = CASE WHEN failed_count - 1 >= ? THEN locked_until ELSE NULL END
       WHERE name = ? AND failed_count > 0`,
      [LOCKOUT.failures, name],
    );
  }

  /** Until when the name is locked, or null when it is not. */
  private async lockedUntil(name: string, now: number): Promise<number | null> {
    const r = await this.sql.get<{ locked_until: number | null }>(
      "SELECT locked_until FROM signin_attempts WHERE name = ?",
      [name],
    );
    const until = r?.locked_until === null || r === undefined ? null : Number(r.locked_until);
    return until !== null && until > now ? until : null;
  }

  /**
   * Changes a user's role; their open console sessions hold to it from their next request (a
   * session reads its user's role each time). Made a member, the invites and reset links they
   * made and that are still open are cancelled (they expire now), so they stay dead should the
   * user be made an admin again. Undefined when no user has the name.
   */
  async setRole(name: string, role: Role, now = Date.now()): Promise<User | undefined> {
    if (role !== "admin" && role !== "member")
      throw new TypeError(`role must be admin or member, not ${JSON.stringify(role)}`);
    const n = await this.sql.transaction(async (tx) => {
      const changed = await tx.run("UPDATE users SET role = ? WHERE name = ?", [role, name]);
      if (changed === 1 && role === "member")
        await tx.run(
          `UPDATE invites SET expires_at = CAST(? AS BIGINT)
           WHERE created_by = (SELECT id FROM users WHERE name = ?) AND used_at IS NULL
             AND expires_at > CAST(? AS BIGINT)`,
          [now, name, now],
        );
      return changed;
    });
    return n === 1 ? this.byName(name) : undefined;
  }

  /**
   * Sets a new password (the checks of `create`), signs the user out everywhere and lifts a lock
   * on their name. Undefined when no user has the name.
   */
  async resetPassword(name: string, password: string): Promise<User | undefined> {
    if (password.length < PASSWORD_MIN || password.length > 1024)
      throw new TypeError(`a password is ${PASSWORD_MIN} to 1024 characters`);
    const user = await this.byName(name);
    if (!user) return undefined;
    await this.sql.run("UPDATE users SET password_hash = ? WHERE id = ?", [
      await hashPassword(password),
      user.id,
    ]);
    await this.sql.run("DELETE FROM console_sessions WHERE user_id = ?", [user.id]);
    await this.sql.run("DELETE FROM signin_attempts WHERE name = ?", [name]);
    return user;
  }

  /**
   * Removes a user: their console sessions end, and the keys they own are revoked (`now`), so
   * nothing made in their name keeps working. The ids of those keys; undefined when no user has
   * the name.
   */
  async remove(
    name: string,
    now = Date.now(),
  ): Promise<{ user: User; revoked: string[] } | undefined> {
    return this.sql.transaction(async (tx) => {
      const user = await tx.get<User>("SELECT id, name, role FROM users WHERE name = ?", [name]);
      if (!user) return undefined;
      const keys = await tx.all<{ id: string }>(
        "SELECT id FROM keys WHERE owner_id = ? AND revoked_at IS NULL",
        [user.id],
      );
      await tx.run("UPDATE keys SET revoked_at = ? WHERE owner_id = ? AND revoked_at IS NULL", [
        now,
        user.id,
      ]);
      await tx.run("DELETE FROM console_sessions WHERE user_id = ?", [user.id]);
      await tx.run("DELETE FROM users WHERE id = ?", [user.id]);
      return { user, revoked: keys.map((k) => k.id) };
    });
  }

  /** The user linked to a trusted OIDC issuer's subject (`users create --oidc-subject`). */
  async bySubject(subject: string): Promise<User | undefined> {
    return this.sql.get<User>("SELECT id, name, role FROM users WHERE oidc_subject = ?", [subject]);
  }

  /**
   * Signs in the user linked to `subject`, whose identity the trusted issuer has just vouched
   * for (a checked ID token); a locked account stays locked.
   */
  async signInSubject(subject: string, now = Date.now()): Promise<SignIn> {
    const row = await this.sql.get<UserRow>(
      "SELECT id, name, role, password_hash FROM users WHERE oidc_subject = ?",
      [subject],
    );
    if (!row) return { ok: false, reason: "wrong" };
    const until = await this.lockedUntil(row.name, now);
    if (until !== null) return locked(until, now);
    return this.openSession({ id: row.id, name: row.name, role: row.role }, now);
  }

  /**
   * The most a user's keys may be given when that user is a member and makes or changes them
   * (a key policy; null: the server's settings). An admin sets it; an admin's own keys have none.
   */
  async keyCeiling(userId: string): Promise<KeyPolicy | null> {
    const r = await this.sql.get<{ key_ceiling: string | null }>(
      "SELECT key_ceiling FROM users WHERE id = ?",
      [userId],
    );
    return policyFromColumn(r?.key_ceiling ?? null);
  }

  /**
   * Changes a user's key ceiling (the patch as `keys update` takes it: null clears a field back
   * to the server's setting); a TypeError names a bad field. Null when no user has the id.
   */
  async setKeyCeiling(userId: string, patch: PolicyPatch): Promise<KeyPolicy | null | undefined> {
    return this.sql.transaction(async (tx) => {
      const r = await tx.get<{ key_ceiling: string | null }>(
        "SELECT key_ceiling FROM users WHERE id = ?",
        [userId],
      );
      if (!r) return undefined;
      const ceiling = applyPatch(policyFromColumn(r.key_ceiling), patch);
      await tx.run("UPDATE users SET key_ceiling = ? WHERE id = ?", [
        policyToColumn(ceiling),
        userId,
      ]);
      return ceiling;
    });
  }

  /** Every user with their key ceiling (the admin's list). */
  async listWithCeilings(): Promise<(User & { keyCeiling: KeyPolicy | null })[]> {
    const rows = await this.sql.all<User & { key_ceiling: string | null }>(
      "SELECT id, name, role, key_ceiling FROM users ORDER BY name",
    );
    return rows.map(({ key_ceiling, ...u }) => ({
      ...u,
      keyCeiling: policyFromColumn(key_ceiling),
    }));
  }

  private async openSession(user: User, now: number): Promise<SignIn> {
    await this.sql.run("DELETE FROM console_sessions WHERE expires_at < ?", [now]);
    const session = randomBytes(32).toString("base64url");
    const csrf = randomBytes(32).toString("base64url");
    await this.sql.run(
      "INSERT INTO console_sessions (id_sha256, user_id, csrf, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
      [sha256(session), user.id, csrf, now, now + SESSION_MS],
    );
    return { ok: true, user, session, csrf };
  }

  /** The session a cookie names, if it is live. */
  async session(cookie: string, now = Date.now()): Promise<ConsoleSession | null> {
    const row = await this.sql.get<{
      id: string;
      name: string;
      role: Role;
      csrf: string;
      expires_at: number;
    }>(
      `SELECT u.id, u.name, u.role, s.csrf, s.expires_at FROM console_sessions s
       JOIN users u ON u.id = s.user_id WHERE s.id_sha256 = ?`,
      [sha256(cookie)],
    );
    if (!row || Number(row.expires_at) <= now) return null;
    return {
      user: { id: row.id, name: row.name, role: row.role },
      csrf: row.csrf,
      expiresAt: Number(row.expires_at),
    };
  }

  async signOut(cookie: string): Promise<void> {
    await this.sql.run("DELETE FROM console_sessions WHERE id_sha256 = ?", [sha256(cookie)]);
  }
}
