import { openDatabase, type Db } from "./db.js";
import { KeyStore } from "./keys.js";
import { LeaseStore } from "./leases.js";
import { migratePostgres, PostgresDriver } from "./postgres.js";
import { RECORD_RETRY_MS, RunStore } from "./runs.js";
import { OAuthStore } from "./oauth.js";
import { SessionStore } from "./sessions.js";
import { UserStore } from "./users.js";
import { SqliteDriver, type SqlDriver } from "./sql.js";

/**
 * The records of keys, runs, sessions, quotas and replica leases behind one interface: SQLite in
 * SCRATCHRUN_HOME (one server, the default) or Postgres at SCRATCHRUN_DATABASE_URL (API replicas
 * share it). Either is migrated before it is returned.
 */
export interface Store {
  readonly sql: SqlDriver;
  readonly keys: KeyStore;
  readonly runs: RunStore;
  readonly sessions: SessionStore;
  readonly leases: LeaseStore;
  /** Console users and their sessions. */
  readonly users: UserStore;
  /** OAuth clients, requests, grants and tokens. */
  readonly oauth: OAuthStore;
  /** The SQLite database (for the host-local sandboxes table), when the store is SQLite. */
  readonly sqlite: Db | null;
  close(): Promise<void>;
}

export function storeOn(sql: SqlDriver, retryMs = RECORD_RETRY_MS): Store {
  return {
    sql,
    keys: new KeyStore(sql),
    runs: new RunStore(sql, retryMs),
    sessions: new SessionStore(sql, retryMs),
    leases: new LeaseStore(sql, sql.dialect === "postgres" ? 5_000 : 0),
    users: new UserStore(sql),
    oauth: new OAuthStore(sql),
    sqlite: sql instanceof SqliteDriver ? sql.db : null,
    close: () => sql.close(),
  };
}

/**
 * The store `where` names: Postgres at its database URL, else SQLite in its state directory
 * (`settingsFrom(env)` gives both, parsed).
 */
export async function openStore(
  where: { readonly databaseUrl: string | null; readonly home: string },
  options: { onError?: (e: Error) => void } = {},
): Promise<Store> {
  const url = where.databaseUrl;
  if (url === null) return storeOn(new SqliteDriver(openDatabase(where.home)));
  const sql = new PostgresDriver({ url, ...(options.onError ? { onError: options.onError } : {}) });
  try {
    await migratePostgres(sql);
  } catch (e) {
    await sql.close();
    throw e;
  }
  return storeOn(sql);
}
