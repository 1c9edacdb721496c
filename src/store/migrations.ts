/**
 * Schema migrations for both databases, applied in order; each database records how many ran
 * (SQLite: `PRAGMA user_version`; Postgres: the `schema_version` table). Append only: a shipped
 * migration is never edited. Where the dialects differ (BLOB/BYTEA, ms timestamps that outgrow a
 * 32-bit INTEGER in Postgres) a migration has one text per dialect; otherwise one for both.
 *
 * Runs hold metadata only: sizes and SHA-256 of code and outputs, never code, output, file
 * contents, env names or env values.
 */
import type { Dialect } from "./sql.js";

export interface Migration {
  sqlite: string;
  postgres: string;
}

const both = (sql: string): Migration => ({ sqlite: sql, postgres: sql });

const RUN_COLUMNS = (int: string, big: string) => `
     id TEXT PRIMARY KEY,
     key_id TEXT,
     transport TEXT NOT NULL,
     runtime TEXT NOT NULL,
     network TEXT NOT NULL,
     timeout_ms ${int} NOT NULL,
     memory_mb ${int} NOT NULL,
     status TEXT NOT NULL,
     received_at ${big} NOT NULL,
     started_at ${big},
     finished_at ${big},
     duration_ms ${int},
     isolation TEXT,
     exit_reason TEXT,
     exit_code ${int},
     signal ${int},
     error_code TEXT,
     code_bytes ${int} NOT NULL,
     code_sha256 TEXT NOT NULL,
     env_count ${int} NOT NULL,
     files_in_count ${int} NOT NULL,
     files_in_bytes ${int} NOT NULL,
     stdout_bytes ${int},
     stdout_sha256 TEXT,
     stderr_bytes ${int},
     stderr_sha256 TEXT,
     files_out_count ${int},
     files_out_bytes ${int},
     files_out_sha256 TEXT
   `;

export const MIGRATIONS: readonly Migration[] = [
  {
    // The SQLite text is the one shipped before Postgres existed, byte for byte.
    sqlite: `CREATE TABLE keys (
     id TEXT PRIMARY KEY,
     name TEXT NOT NULL,
     hash BLOB NOT NULL,
     created_at INTEGER NOT NULL,
     revoked_at INTEGER,
     last_used_at INTEGER
   );
   CREATE TABLE runs (${RUN_COLUMNS("INTEGER", "INTEGER")});
   CREATE INDEX runs_status ON runs(status);
   CREATE INDEX runs_key ON runs(key_id, received_at);`,
    postgres: `CREATE TABLE keys (
     id TEXT PRIMARY KEY,
     name TEXT NOT NULL,
     hash BYTEA NOT NULL,
     created_at BIGINT NOT NULL,
     revoked_at BIGINT,
     last_used_at BIGINT
   );
   CREATE TABLE runs (${RUN_COLUMNS("BIGINT", "BIGINT")});
   CREATE INDEX runs_status ON runs(status);
   CREATE INDEX runs_key ON runs(key_id, received_at);`,
  },
  // Sandbox cgroups this server saw as its own while they ran: after a crash, the next start
  // destroys exactly these (they are empty once bwrap --die-with-parent has killed their
  // processes, and an empty cgroup cannot otherwise be told apart from another server's). A
  // host's own business: the Postgres schema carries the table only to keep versions aligned.
  {
    sqlite: `CREATE TABLE sandboxes (name TEXT PRIMARY KEY, server_pid INTEGER NOT NULL, seen_at INTEGER NOT NULL);`,
    postgres: `CREATE TABLE sandboxes (name TEXT PRIMARY KEY, server_pid INTEGER NOT NULL, seen_at BIGINT NOT NULL);`,
  },
  // Several API replicas on one database: which replica holds a run (its lease says whether it
  // lives), which worker ran it, and each key's token bucket (shared, so the rate is per key
  // across replicas, not per replica).
  both(`ALTER TABLE runs ADD COLUMN replica_id TEXT;
   ALTER TABLE runs ADD COLUMN worker TEXT;
   CREATE INDEX runs_key_status ON runs(key_id, status);
   CREATE INDEX runs_replica ON runs(replica_id, status);
   CREATE TABLE replicas (
     id TEXT PRIMARY KEY,
     started_at BIGINT NOT NULL,
     renewed_at BIGINT NOT NULL,
     expires_at BIGINT NOT NULL
   );
   CREATE TABLE key_quota (
     key_id TEXT PRIMARY KEY,
     tokens DOUBLE PRECISION NOT NULL,
     at BIGINT NOT NULL
   );`),
  // The shared per-key admission in one round trip (src/store/shared-quota.ts): the same rule as
  // decideQuota (src/policy/quota.ts), kept in step by a property test on both. Each statement of a
  // VOLATILE function takes a fresh snapshot, so the count after the row lock sees every call
  // admitted by whoever held the lock before. SQLite has no functions: one server keeps its quota
  // in memory.
  {
    sqlite: `SELECT 1;`,
    postgres: `CREATE FUNCTION scratchrun_admit(
       p_key TEXT, p_now BIGINT, p_max_concurrent INTEGER, p_rate_per_minute DOUBLE PRECISION,
       p_burst DOUBLE PRECISION, p_run JSONB)
     RETURNS TABLE (ok BOOLEAN, reason TEXT, retry_after_s INTEGER)
     LANGUAGE plpgsql VOLATILE AS $fn$
     DECLARE
       ms_per_token DOUBLE PRECISION := 60000.0 / p_rate_per_minute;
       running BIGINT;
       b_tokens DOUBLE PRECISION;
       b_at BIGINT;
       t_at BIGINT;
       tokens DOUBLE PRECISION;
     BEGIN
       UPDATE keys SET last_used_at = p_now WHERE id = p_key;
       SELECT count(*) INTO running FROM runs r
         WHERE r.key_id = p_key AND r.status IN ('queued', 'running')
           AND r.replica_id IN (SELECT l.id FROM replicas l WHERE l.expires_at >= p_now);
       IF running >= p_max_concurrent THEN
         RETURN QUERY SELECT false, 'concurrency'::TEXT, 1;
         RETURN;
       END IF;
       SELECT q.tokens, q.at INTO b_tokens, b_at FROM key_quota q WHERE q.key_id = p_key;
       IF NOT FOUND THEN
         b_tokens := p_burst;
         b_at := p_now;
       END IF;
       t_at := GREATEST(p_now, b_at);
       tokens := LEAST(p_burst, b_tokens + (t_at - b_at) / ms_per_token);
       IF tokens < 1 THEN
         INSERT INTO key_quota AS q (key_id, tokens, at) VALUES (p_key, tokens, t_at)
           ON CONFLICT (key_id) DO UPDATE SET tokens = excluded.tokens, at = excluded.at;
         RETURN QUERY SELECT false, 'rate'::TEXT,
           GREATEST(1, CEIL(((1 - tokens) * ms_per_token) / 1000))::INTEGER;
         RETURN;
       END IF;
       INSERT INTO key_quota AS q (key_id, tokens, at) VALUES (p_key, tokens - 1, t_at)
         ON CONFLICT (key_id) DO UPDATE SET tokens = excluded.tokens, at = excluded.at;
       INSERT INTO runs SELECT * FROM jsonb_populate_record(NULL::runs, p_run);
       RETURN QUERY SELECT true, NULL::TEXT, 0;
     END
     $fn$;`,
  },
  // Each API key's own policy (src/policy/key-policy.ts): allowed runtimes, network and egress
  // allowlist, maximum timeout and memory, concurrency and rate, as checked JSON; NULL: the
  // server's settings. Read with the key on every request, so an update holds from the next one.
  both(`ALTER TABLE keys ADD COLUMN policy TEXT;`),
  // Sessions (docs/decisions/0013-sessions.md): one row per session, its own id (`id`) apart
  // from the session_id its caller holds, which is a bearer capability and is kept only as its
  // SHA-256. Each call in a session is a run naming the session's row (runs.session_record). In
  // a cluster the row names the worker holding the sandbox (its address and its process's
  // worker_id), which is how every replica routes the session's calls; a row with ended_at NULL
  // is open.
  both(`CREATE TABLE sessions (
     id TEXT PRIMARY KEY,
     id_sha256 TEXT NOT NULL UNIQUE,
     key_id TEXT,
     transport TEXT NOT NULL,
     runtime TEXT NOT NULL,
     memory_mb INTEGER NOT NULL,
     network TEXT NOT NULL,
     isolation TEXT,
     started_at BIGINT NOT NULL,
     ended_at BIGINT,
     end_reason TEXT,
     calls INTEGER,
     replica_id TEXT,
     worker TEXT,
     worker_id TEXT
   );
   CREATE INDEX sessions_open ON sessions(ended_at, worker);
   CREATE INDEX sessions_key ON sessions(key_id, started_at);
   ALTER TABLE runs ADD COLUMN session_record TEXT;
   CREATE INDEX runs_session ON runs(session_record);`),
  // OAuth for /mcp and the console's sign-in (docs/decisions/0016-oauth.md). A key may belong to a
  // console user (owner_id; NULL: made by the CLI, seen by admins only). Every secret (session
  // cookie, CSRF token's session, authorization code, access and refresh token) is kept only as
  // its SHA-256; a password only as its scrypt hash. An authorization request lives from
  // /oauth/authorize to its code's redemption (one row: its code, once approved, and the grant it
  // made). A grant binds one client to one key for one resource; its tokens die with it.
  both(`ALTER TABLE keys ADD COLUMN owner_id TEXT;
   CREATE TABLE users (
     id TEXT PRIMARY KEY,
     name TEXT NOT NULL UNIQUE,
     role TEXT NOT NULL,
     password_hash TEXT NOT NULL,
     created_at BIGINT NOT NULL,
     failed_count INTEGER NOT NULL DEFAULT 0,
     locked_until BIGINT
   );
   CREATE TABLE console_sessions (
     id_sha256 TEXT PRIMARY KEY,
     user_id TEXT NOT NULL,
     csrf TEXT NOT NULL,
     created_at BIGINT NOT NULL,
     expires_at BIGINT NOT NULL
   );
   CREATE TABLE oauth_clients (
     client_id TEXT PRIMARY KEY,
     kind TEXT NOT NULL,
     name TEXT NOT NULL,
     redirect_uris TEXT NOT NULL,
     created_at BIGINT NOT NULL
   );
   CREATE TABLE oauth_requests (
     id TEXT PRIMARY KEY,
     client_id TEXT NOT NULL,
     client_name TEXT NOT NULL,
     redirect_uri TEXT NOT NULL,
     state TEXT,
     code_challenge TEXT NOT NULL,
     resource TEXT NOT NULL,
     scope TEXT NOT NULL,
     created_at BIGINT NOT NULL,
     expires_at BIGINT NOT NULL,
     decided_at BIGINT,
     code_sha256 TEXT UNIQUE,
     code_used_at BIGINT,
     grant_id TEXT
   );
   CREATE TABLE oauth_grants (
     id TEXT PRIMARY KEY,
     key_id TEXT NOT NULL,
     user_id TEXT NOT NULL,
     client_id TEXT NOT NULL,
     client_name TEXT NOT NULL,
     resource TEXT NOT NULL,
     scope TEXT NOT NULL,
     created_at BIGINT NOT NULL,
     revoked_at BIGINT,
     revoked_reason TEXT
   );
   CREATE INDEX oauth_grants_key ON oauth_grants(key_id);
   CREATE TABLE oauth_tokens (
     token_sha256 TEXT PRIMARY KEY,
     grant_id TEXT NOT NULL,
     kind TEXT NOT NULL,
     created_at BIGINT NOT NULL,
     expires_at BIGINT NOT NULL,
     used_at BIGINT
   );
   CREATE INDEX oauth_tokens_grant ON oauth_tokens(grant_id);`),
  // A trusted external OIDC issuer (SCRATCHRUN_OIDC_ISSUER, decision 0016): its subject `sub`
  // signs in as the console user linked to it, and its access tokens for /mcp act as the one
  // active key bound to it. One user per subject, one active key per subject.
  both(`ALTER TABLE users ADD COLUMN oidc_subject TEXT;
   CREATE UNIQUE INDEX users_oidc_subject ON users(oidc_subject);
   ALTER TABLE keys ADD COLUMN oidc_subject TEXT;
   CREATE UNIQUE INDEX keys_oidc_subject ON keys(oidc_subject) WHERE revoked_at IS NULL;`),
  // Limits taken before the work they limit (issue 47). Wrong sign-ins count per name tried,
  // whether or not a user has it (an unknown name locks as a real one does, so the lock tells
  // nothing of who exists): a reservation is one conditional upsert before the password check,
  // removed when it succeeds; users.failed_count and locked_until are no longer read. A console
  // user's key ceiling (a key policy, JSON; NULL: the server's settings) bounds the keys a member
  // makes and changes. A session's record is written when its start is admitted, and holds one
  // of its key's slots while starting_until is ahead (cleared once the sandbox runs).
  both(`CREATE TABLE signin_attempts (
     name TEXT PRIMARY KEY,
     failed_count INTEGER NOT NULL,
     locked_until BIGINT,
     last_at BIGINT NOT NULL
   );
   CREATE INDEX signin_attempts_last ON signin_attempts(last_at);
   ALTER TABLE users ADD COLUMN key_ceiling TEXT;
   ALTER TABLE sessions ADD COLUMN starting_until BIGINT;`),
  // A key may expire (issue 55): expires_at in ms, NULL for never. From then on it authenticates
  // nowhere (REST, /mcp, OAuth tokens of its grants) and its sessions end, as a revoked key's do.
  both(`ALTER TABLE keys ADD COLUMN expires_at BIGINT;`),
  // The audit log (issue 55): every change to a person, key, grant or policy made through the
  // console, who made it, when and from where. Append only (src/store/audit.ts): nothing in the
  // product updates or deletes a row.
  both(`CREATE TABLE audit_log (
     id TEXT PRIMARY KEY,
     at BIGINT NOT NULL,
     actor_id TEXT,
     actor TEXT NOT NULL,
     address TEXT,
     action TEXT NOT NULL,
     target TEXT,
     detail TEXT
   );
   CREATE INDEX audit_log_at ON audit_log(at);`),
  // Invites and password-reset links (issue 55): a one-time link an admin copies, valid 24 h,
  // kept only as the SHA-256 of its token. purpose 'join' makes the user `name` with `role`;
  // 'reset' sets a new password for `user_id`. used_at is set once, by the one acceptance that
  // wins; a cancelled link's expires_at is moved to the moment it was cancelled.
  both(`CREATE TABLE invites (
     id TEXT PRIMARY KEY,
     token_sha256 TEXT NOT NULL UNIQUE,
     purpose TEXT NOT NULL,
     name TEXT NOT NULL,
     role TEXT,
     user_id TEXT,
     created_by TEXT,
     created_at BIGINT NOT NULL,
     expires_at BIGINT NOT NULL,
     used_at BIGINT
   );`),
];

export function migrationText(m: Migration, dialect: Dialect): string {
  return dialect === "sqlite" ? m.sqlite : m.postgres;
}
