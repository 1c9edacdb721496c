import { createHash, randomBytes, scrypt, timingSafeEqual } from "node:crypto";
import type { Db } from "./db.js";
import { checkSubject } from "./keys.js";
import { asDriver, type SqlDriver } from "./sql.js";

/**
 * Console users (`scratchrun users create`) and their signed-in sessions. A password is kept
 * only as its scrypt hash (`scrypt$N$r$p$salt$hash`, base64url); a session's cookie and the
 * key of its CSRF token only as SHA-256. Wrong passwords lock the account for a while
 * (`LOCKOUT`), whoever tries them: the per-address limit in front is the other half.
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

const USER_NAME = /^[a-z0-9][a-z0-9._@-]{0,63}$/;
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

export type SignIn =
  | { ok: true; user: User; session: string; csrf: string }
  | { ok: false; reason: "wrong" | "locked"; retryAfterS?: number };

interface UserRow {
  id: string;
  name: string;
  role: Role;
  password_hash: string;
  failed_count: number;
  locked_until: number | null;
}

/** A locked account's refusal, whatever it was signed in with; null when it is not locked. */
function lockedNow(row: UserRow, now: number): SignIn | null {
  if (row.locked_until === null || Number(row.locked_until) <= now) return null;
  return {
    ok: false,
    reason: "locked",
    retryAfterS: Math.ceil((Number(row.locked_until) - now) / 1000),
  };
}

export class UserStore {
  private readonly sql: SqlDriver;
  /** Checked for unknown names, so a miss costs what a wrong password does. */
  private dummy: Promise<string> | undefined;

  constructor(db: Db | SqlDriver) {
    this.sql = asDriver(db);
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
    if (!USER_NAME.test(name))
      throw new TypeError(
        `user name ${JSON.stringify(name)} must be 1-64 lowercase letters, digits, . _ @ or -`,
      );
    if (role !== "admin" && role !== "member")
      throw new TypeError(`role must be admin or member, not ${JSON.stringify(role)}`);
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

  /**
   * Checks a password and opens a session. A locked account is refused whatever the password;
   * each wrong password counts, and the `LOCKOUT.failures`-th in a row locks the account.
   */
  async signIn(name: string, password: string, now = Date.now()): Promise<SignIn> {
    const row = await this.sql.get<UserRow>(
      "SELECT id, name, role, password_hash, failed_count, locked_until FROM users WHERE name = ?",
      [name],
    );
    if (!row) {
      await checkPassword(password, await (this.dummy ??= hashPassword("not a password, ever")));
      return { ok: false, reason: "wrong" };
    }
    const locked = lockedNow(row, now);
    if (locked) return locked;
    if (!(await checkPassword(password, row.password_hash))) {
      const failed = Number(row.failed_count) + 1;
      const lock = failed >= LOCKOUT.failures ? now + LOCKOUT.lockMs : null;
      await this.sql.run("UPDATE users SET failed_count = ?, locked_until = ? WHERE id = ?", [
        lock === null ? failed : 0,
        lock,
        row.id,
      ]);
      return lock === null
        ? { ok: false, reason: "wrong" }
        : { ok: false, reason: "locked", retryAfterS: LOCKOUT.lockMs / 1000 };
    }
    await this.sql.run("UPDATE users SET failed_count = 0, locked_until = NULL WHERE id = ?", [
      row.id,
    ]);
    return this.openSession({ id: row.id, name: row.name, role: row.role }, now);
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
      "SELECT id, name, role, password_hash, failed_count, locked_until FROM users WHERE oidc_subject = ?",
      [subject],
    );
    if (!row) return { ok: false, reason: "wrong" };
    return (
      lockedNow(row, now) ?? this.openSession({ id: row.id, name: row.name, role: row.role }, now)
    );
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
