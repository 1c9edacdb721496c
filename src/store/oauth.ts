import { createHash, randomBytes } from "node:crypto";
import type { Db } from "./db.js";
import { asDriver, type SqlDriver } from "./sql.js";

/**
 * The authorization server's records (docs/decisions/0016-oauth.md): clients, authorization
 * requests with their codes, grants (one client, one key, one resource) and their tokens.
 * Tokens and codes are opaque random strings kept only as SHA-256, like API keys: every use is
 * one look-up, which is also what makes a revocation hold from the next request.
 */
export const OAUTH_TTL = {
  /** From /oauth/authorize to the person's decision on the consent page. */
  requestMs: 10 * 60_000,
  /** From the decision to the code's redemption at /oauth/token. */
  codeMs: 2 * 60_000,
  /** An access token: short, since whoever holds it acts with the key. */
  accessMs: 15 * 60_000,
  /** A refresh token: each use replaces it (rotation). */
  refreshMs: 30 * 24 * 60 * 60_000,
} as const;

const sha256 = (s: string) => createHash("sha256").update(s, "utf8").digest("hex");
const secret = (prefix: string) => `${prefix}${randomBytes(32).toString("base64url")}`;

export interface OAuthClient {
  clientId: string;
  /** "registered": dynamic client registration; "metadata": a client ID metadata document. */
  kind: "registered" | "metadata";
  name: string;
  redirectUris: string[];
}

export interface AuthRequest {
  id: string;
  clientId: string;
  clientName: string;
  redirectUri: string;
  state: string | null;
  codeChallenge: string;
  resource: string;
  scope: string;
  expiresAt: number;
  decidedAt: number | null;
  grantId: string | null;
}

export interface TokenPair {
  access_token: string;
  token_type: "Bearer";
  expires_in: number;
  refresh_token: string;
  scope: string;
}

export interface Grant {
  id: string;
  keyId: string;
  userId: string;
  clientId: string;
  clientName: string;
  resource: string;
  scope: string;
  createdAt: number;
  revokedAt: number | null;
  revokedReason: string | null;
}

/** Why a code or refresh token was refused (`reused`: its grant is revoked now). */
export type Refused = { ok: false; reason: "unknown" | "expired" | "reused" | "revoked" };

interface RequestRow {
  id: string;
  client_id: string;
  client_name: string;
  redirect_uri: string;
  state: string | null;
  code_challenge: string;
  resource: string;
  scope: string;
  expires_at: number;
  decided_at: number | null;
  grant_id: string | null;
  code_used_at: number | null;
}

const toRequest = (r: RequestRow): AuthRequest => ({
  id: r.id,
  clientId: r.client_id,
  clientName: r.client_name,
  redirectUri: r.redirect_uri,
  state: r.state,
  codeChallenge: r.code_challenge,
  resource: r.resource,
  scope: r.scope,
  expiresAt: Number(r.expires_at),
  decidedAt: r.decided_at === null ? null : Number(r.decided_at),
  grantId: r.grant_id,
});

export class OAuthStore {
  private readonly sql: SqlDriver;

  constructor(db: Db | SqlDriver) {
    this.sql = asDriver(db);
  }

  /** Registers a client (RFC 7591); its id is random and names nothing else. */
  async register(name: string, redirectUris: string[], now = Date.now()): Promise<OAuthClient> {
    const client: OAuthClient = {
      clientId: `src_${randomBytes(12).toString("hex")}`,
      kind: "registered",
      name,
      redirectUris,
    };
    await this.saveClient(client, now);
    return client;
  }

  /** Keeps a client's latest metadata (a metadata document's, as fetched just now). */
  async saveClient(c: OAuthClient, now = Date.now()): Promise<void> {
    await this.sql.run(
      `INSERT INTO oauth_clients (client_id, kind, name, redirect_uris, created_at)
       VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (client_id) DO UPDATE SET name = excluded.name, redirect_uris = excluded.redirect_uris`,
      [c.clientId, c.kind, c.name, JSON.stringify(c.redirectUris), now],
    );
  }

  async client(clientId: string): Promise<OAuthClient | null> {
    const r = await this.sql.get<{
      client_id: string;
      kind: OAuthClient["kind"];
      name: string;
      redirect_uris: string;
    }>("SELECT client_id, kind, name, redirect_uris FROM oauth_clients WHERE client_id = ?", [
      clientId,
    ]);
    if (!r) return null;
    return {
      clientId: r.client_id,
      kind: r.kind,
      name: r.name,
      redirectUris: JSON.parse(r.redirect_uris) as string[],
    };
  }

  /** An authorization request, checked already, waiting for the person's decision. */
  async createRequest(
    r: Omit<AuthRequest, "id" | "expiresAt" | "decidedAt" | "grantId">,
    now = Date.now(),
  ): Promise<AuthRequest> {
    const id = randomBytes(16).toString("base64url");
    const expiresAt = now + OAUTH_TTL.requestMs;
    await this.purge(now);
    await this.sql.run(
      `INSERT INTO oauth_requests (id, client_id, client_name, redirect_uri, state, code_challenge,
       resource, scope, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [
        id,
        r.clientId,
        r.clientName,
        r.redirectUri,
        r.state,
        r.codeChallenge,
        r.resource,
        r.scope,
        now,
        expiresAt,
      ],
    );
    return { ...r, id, expiresAt, decidedAt: null, grantId: null };
  }

  /** A request still waiting for its decision (not decided, not expired), or null. */
  async pendingRequest(id: string, now = Date.now()): Promise<AuthRequest | null> {
    const r = await this.sql.get<RequestRow>("SELECT * FROM oauth_requests WHERE id = ?", [id]);
    if (!r || r.decided_at !== null || Number(r.expires_at) <= now) return null;
    return toRequest(r);
  }

  /**
   * The person's decision, taken once: approval makes the grant (this client, this key) and the
   * code; denial only closes the request. Null when the request was decided or expired meanwhile.
   */
  async decide(
    id: string,
    decision: { approve: { userId: string; keyId: string } } | { deny: true },
    now = Date.now(),
  ): Promise<{ request: AuthRequest; code: string | null } | null> {
    return this.sql.transaction(async (tx) => {
      const closed = await tx.run(
        "UPDATE oauth_requests SET decided_at = ? WHERE id = ? AND decided_at IS NULL AND expires_at > ?",
        [now, id, now],
      );
      if (closed !== 1) return null;
      const row = (await tx.get<RequestRow>("SELECT * FROM oauth_requests WHERE id = ?", [id]))!;
      if (!("approve" in decision)) return { request: toRequest(row), code: null };
      const grantId = `g_${randomBytes(8).toString("hex")}`;
      await tx.run(
        `INSERT INTO oauth_grants (id, key_id, user_id, client_id, client_name, resource, scope, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
        [
          grantId,
          decision.approve.keyId,
          decision.approve.userId,
          row.client_id,
          row.client_name,
          row.resource,
          row.scope,
          now,
        ],
      );
      const code = secret("src_");
      await tx.run("UPDATE oauth_requests SET code_sha256 = ?, grant_id = ? WHERE id = ?", [
        sha256(code),
        grantId,
        id,
      ]);
      return { request: { ...toRequest(row), grantId, decidedAt: now }, code };
    });
  }

  /**
   * Redeems a code once. A second redemption is an attack on a leaked code (OAuth 2.1 §4.1.3):
   * the grant it made is revoked, with every token already issued from it.
   */
  async redeemCode(
    code: string,
    now = Date.now(),
  ): Promise<{ ok: true; request: AuthRequest } | Refused> {
    const hash = sha256(code);
    const row = await this.sql.get<RequestRow>(
      "SELECT * FROM oauth_requests WHERE code_sha256 = ?",
      [hash],
    );
    if (!row || row.grant_id === null || row.decided_at === null)
      return { ok: false, reason: "unknown" };
    const used = await this.sql.run(
      "UPDATE oauth_requests SET code_used_at = ? WHERE code_sha256 = ? AND code_used_at IS NULL",
      [now, hash],
    );
    if (used !== 1) {
      await this.revokeGrant(row.grant_id, "authorization code reused", now);
      return { ok: false, reason: "reused" };
    }
    if (Number(row.decided_at) + OAUTH_TTL.codeMs <= now) return { ok: false, reason: "expired" };
    return { ok: true, request: toRequest(row) };
  }

  /** A new access and refresh token for a live grant. */
  async issue(grantId: string, now = Date.now()): Promise<TokenPair> {
    const grant = await this.grant(grantId);
    const access = secret("sra_");
    const refresh = secret("srr_");
    await this.sql.transaction(async (tx) => {
      await tx.run(
        "INSERT INTO oauth_tokens (token_sha256, grant_id, kind, created_at, expires_at) VALUES (?, ?, 'access', ?, ?)",
        [sha256(access), grantId, now, now + OAUTH_TTL.accessMs],
      );
      await tx.run(
        "INSERT INTO oauth_tokens (token_sha256, grant_id, kind, created_at, expires_at) VALUES (?, ?, 'refresh', ?, ?)",
        [sha256(refresh), grantId, now, now + OAUTH_TTL.refreshMs],
      );
    });
    return {
      access_token: access,
      token_type: "Bearer",
      expires_in: OAUTH_TTL.accessMs / 1000,
      refresh_token: refresh,
      scope: grant?.scope ?? "",
    };
  }

  /**
   * Spends a refresh token (rotation): the first use gets a new pair; any later use of the same
   * token means two parties hold it, so the whole grant is revoked (OAuth 2.1 §4.3.1).
   */
  async refresh(token: string, now = Date.now()): Promise<{ ok: true; grant: Grant } | Refused> {
    const hash = sha256(token);
    const row = await this.sql.get<{ grant_id: string; kind: string; expires_at: number }>(
      "SELECT grant_id, kind, expires_at FROM oauth_tokens WHERE token_sha256 = ?",
      [hash],
    );
    if (!row || row.kind !== "refresh") return { ok: false, reason: "unknown" };
    const spent = await this.sql.run(
      "UPDATE oauth_tokens SET used_at = ? WHERE token_sha256 = ? AND used_at IS NULL",
      [now, hash],
    );
    if (spent !== 1) {
      await this.revokeGrant(row.grant_id, "refresh token reused", now);
      return { ok: false, reason: "reused" };
    }
    if (Number(row.expires_at) <= now) return { ok: false, reason: "expired" };
    const grant = await this.grant(row.grant_id);
    if (!grant || grant.revokedAt !== null) return { ok: false, reason: "revoked" };
    return { ok: true, grant };
  }

  /**
   * The key and resource an access token acts for, when it is an access token, unexpired, and
   * its grant is not revoked. One statement on every request that carries one.
   */
  async verifyAccess(
    token: string,
    now = Date.now(),
  ): Promise<{ keyId: string; resource: string; grantId: string } | null> {
    const row = await this.sql.get<{ key_id: string; resource: string; id: string }>(
      `SELECT g.key_id, g.resource, g.id FROM oauth_tokens t JOIN oauth_grants g ON g.id = t.grant_id
       WHERE t.token_sha256 = ? AND t.kind = 'access' AND t.expires_at > ? AND g.revoked_at IS NULL`,
      [sha256(token), now],
    );
    return row ? { keyId: row.key_id, resource: row.resource, grantId: row.id } : null;
  }

  async grant(id: string): Promise<Grant | null> {
    const rows = await this.grantsWhere("id = ?", [id]);
    return rows[0] ?? null;
  }

  /** The grants made for these keys, newest first. */
  async grantsFor(keyIds: readonly string[]): Promise<Grant[]> {
    if (keyIds.length === 0) return [];
    return this.grantsWhere(`key_id IN (${keyIds.map(() => "?").join(", ")})`, keyIds);
  }

  private async grantsWhere(where: string, params: readonly unknown[]): Promise<Grant[]> {
    const rows = await this.sql.all<{
      id: string;
      key_id: string;
      user_id: string;
      client_id: string;
      client_name: string;
      resource: string;
      scope: string;
      created_at: number;
      revoked_at: number | null;
      revoked_reason: string | null;
    }>(`SELECT * FROM oauth_grants WHERE ${where} ORDER BY created_at DESC, id`, params);
    return rows.map((r) => ({
      id: r.id,
      keyId: r.key_id,
      userId: r.user_id,
      clientId: r.client_id,
      clientName: r.client_name,
      resource: r.resource,
      scope: r.scope,
      createdAt: Number(r.created_at),
      revokedAt: r.revoked_at === null ? null : Number(r.revoked_at),
      revokedReason: r.revoked_reason,
    }));
  }

  /**
   * Forgets what can no longer be used: requests whose codes expired an hour ago (a reuse that
   * late finds no code, which refuses it as well) and tokens past their lifetime. Bounded work:
   * it runs with each new authorization request.
   */
  async purge(now = Date.now()): Promise<void> {
    const before = now - OAUTH_TTL.requestMs - OAUTH_TTL.codeMs - 60 * 60_000;
    await this.sql.run("DELETE FROM oauth_requests WHERE expires_at < ?", [before]);
    await this.sql.run("DELETE FROM oauth_tokens WHERE expires_at < ?", [now - 60 * 60_000]);
  }

  /** Revokes a grant: its tokens stop working at their next use. True if it was live. */
  async revokeGrant(id: string, reason: string, now = Date.now()): Promise<boolean> {
    const n = await this.sql.run(
      "UPDATE oauth_grants SET revoked_at = ?, revoked_reason = ? WHERE id = ? AND revoked_at IS NULL",
      [now, reason, id],
    );
    return n === 1;
  }
}
