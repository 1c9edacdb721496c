import { createHash, randomBytes } from "node:crypto";
import type { Db } from "./db.js";
import { asDriver, type SqlDriver } from "./sql.js";

/**
 * Invites and password-reset links: a one-time link an admin copies and hands over. The token is
 * 256 random bits shown once; the store keeps only its SHA-256, so a copy of the database opens
 * nothing. A link is good for `INVITE_MS` and for one acceptance: `consume` marks it used in the
 * same statement that checks it is unused and unexpired, so two acceptances sent at once cannot
 * both win. A join link makes the user it names with the role it names; a reset link sets a new
 * password for the user it names (UserStore.acceptInvite does either).
 *
 * A link works only while the console user who made it is an admin (MAKER_IS_ADMIN): one made by
 * an admin since made a member, or removed, opens nothing, listed or not, without anyone having
 * to find and cancel it; a link the CLI made (no maker) needs no console user. The INSERT of a
 * link checks the same of its maker, so none is added once they are no longer an admin.
 */
export type InvitePurpose = "join" | "reset";

export interface Invite {
  id: string;
  purpose: InvitePurpose;
  /** The user's name: the one a join link makes, or the one a reset link resets. */
  name: string;
  /** A join link's role. */
  role: "admin" | "member" | null;
  /** A reset link's user. */
  userId: string | null;
  /** The console user who made it (null: the CLI). */
  createdBy: string | null;
  createdAt: number;
  expiresAt: number;
  usedAt: number | null;
}

/** How long a link is good for. */
export const INVITE_MS = 24 * 60 * 60_000;

/** A link's token: `sri_` and 43 base64url characters (256 bits). */
export const INVITE_TOKEN = /^sri_[A-Za-z0-9_-]{43}$/;

const sha256 = (s: string) => createHash("sha256").update(s, "utf8").digest("hex");

interface InviteRow {
  id: string;
  purpose: InvitePurpose;
  name: string;
  role: "admin" | "member" | null;
  user_id: string | null;
  created_by: string | null;
  created_at: number;
  expires_at: number;
  used_at: number | null;
}

const COLUMNS = "id, purpose, name, role, user_id, created_by, created_at, expires_at, used_at";

/** Part of every check that a link is open: its maker, if a console user, is an admin now. */
const MAKER_IS_ADMIN = `(invites.created_by IS NULL OR EXISTS (
  SELECT 1 FROM users WHERE users.id = invites.created_by AND users.role = 'admin'))`;

const fromRow = (r: InviteRow): Invite => ({
  id: r.id,
  purpose: r.purpose,
  name: r.name,
  role: r.role,
  userId: r.user_id,
  createdBy: r.created_by,
  createdAt: Number(r.created_at),
  expiresAt: Number(r.expires_at),
  usedAt: r.used_at === null ? null : Number(r.used_at),
});

/** `InviteStore.create` refused: the console user making the link is not an admin (now). */
export class InviteMakerNotAdmin extends Error {
  constructor(readonly userId: string) {
    super(`console user ${userId} is not an admin, so makes no invite or reset link`);
    this.name = "InviteMakerNotAdmin";
  }
}

export class InviteStore {
  private readonly sql: SqlDriver;

  constructor(db: Db | SqlDriver) {
    this.sql = asDriver(db);
  }

  /**
   * Makes a link; its token is returned only here. The caller has checked name and role. A maker
   * (`createdBy`) who is not an admin when the row is written gets InviteMakerNotAdmin, nothing
   * stored; a CLI link (no maker) needs no console user.
   */
  async create(
    i: {
      purpose: InvitePurpose;
      name: string;
      role?: "admin" | "member" | null;
      userId?: string | null;
      createdBy: string | null;
    },
    now = Date.now(),
  ): Promise<{ invite: Invite; token: string }> {
    const token = `sri_${randomBytes(32).toString("base64url")}`;
    const invite: Invite = {
      id: `i_${randomBytes(6).toString("hex")}`,
      purpose: i.purpose,
      name: i.name,
      role: i.role ?? null,
      userId: i.userId ?? null,
      createdBy: i.createdBy,
      createdAt: now,
      expiresAt: now + INVITE_MS,
      usedAt: null,
    };
    // The maker's role is checked by the INSERT itself: a request that passed its admin check
    // just before the maker was made a member (which cancels their open links) must not add a
    // link after that cancel, one that would open again should they be an admin later. SQLite
    // writes one at a time; on Postgres FOR SHARE waits for a role change in flight on the
    // maker's row and then reads its new role (a change that comes after waits for this insert,
    // and its cancel then sees the new link).
    const lock = this.sql.dialect === "postgres" ? " FOR SHARE" : "";
    const inserted = await this.sql.run(
      `INSERT INTO invites (id, token_sha256, purpose, name, role, user_id, created_by, created_at, expires_at)
       SELECT ?, ?, ?, ?, ?, ?, CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS BIGINT)
       WHERE CAST(? AS TEXT) IS NULL
          OR EXISTS (SELECT 1 FROM users
                     WHERE users.id = CAST(? AS TEXT) AND users.role = 'admin'${lock})`,
      [
        invite.id,
        sha256(token),
        invite.purpose,
        invite.name,
        invite.role,
        invite.userId,
        invite.createdBy,
        now,
        invite.expiresAt,
        invite.createdBy,
        invite.createdBy,
      ],
    );
    if (inserted !== 1) throw new InviteMakerNotAdmin(i.createdBy!);
    return { invite, token };
  }

  /** The link a token opens while it is unused and unexpired (nothing is changed). */
  async peek(token: string, now = Date.now()): Promise<Invite | undefined> {
    if (!INVITE_TOKEN.test(token)) return undefined;
    const r = await this.sql.get<InviteRow>(
      `SELECT ${COLUMNS} FROM invites
       WHERE token_sha256 = ? AND used_at IS NULL AND expires_at > ? AND ${MAKER_IS_ADMIN}`,
      [sha256(token), now],
    );
    return r ? fromRow(r) : undefined;
  }

  /**
   * Uses the link up, in one statement that also checks it is unused and unexpired and its maker
   * an admin; undefined when it is not (used, expired, cancelled, its maker no longer an admin, or
   * no link's token). Run it in the transaction that
   * does what the link is for, so a failure there leaves the link unused.
   */
  static async consume(tx: SqlDriver, token: string, now: number): Promise<Invite | undefined> {
    if (!INVITE_TOKEN.test(token)) return undefined;
    const r = await tx.get<InviteRow>(
      `UPDATE invites SET used_at = CAST(? AS BIGINT)
       WHERE token_sha256 = ? AND used_at IS NULL AND expires_at > CAST(? AS BIGINT)
         AND ${MAKER_IS_ADMIN}
       RETURNING ${COLUMNS}`,
      [now, sha256(token), now],
    );
    return r ? fromRow(r) : undefined;
  }

  /** The links still open (unused, unexpired, their maker an admin), newest first. */
  async pending(now = Date.now()): Promise<Invite[]> {
    const rows = await this.sql.all<InviteRow>(
      `SELECT ${COLUMNS} FROM invites WHERE used_at IS NULL AND expires_at > ? AND ${MAKER_IS_ADMIN}
       ORDER BY created_at DESC, id DESC LIMIT 200`,
      [now],
    );
    return rows.map(fromRow);
  }

  /** Cancels an open link (it expires now); false when none is open with this id. */
  async cancel(id: string, now = Date.now()): Promise<boolean> {
    return (
      (await this.sql.run(
        "UPDATE invites SET expires_at = ? WHERE id = ? AND used_at IS NULL AND expires_at > ?",
        [now, id, now],
      )) === 1
    );
  }
}
