import { ScratchRunError } from "../errors.js";
import { openDatabase, type Db } from "./db.js";
import { scratchrunHome } from "./home.js";
import { KeyStore } from "./keys.js";
import { LeaseStore } from "./leases.js";
import { migratePostgres, PostgresDriver } from "./postgres.js";
import { RECORD_RETRY_MS, RunStore } from "./runs.js";
import { OAuthStore } from "./oauth.js";
import { SessionStore } from "./sessions.js";
import { UserStore } from "./users.js";
import { SqliteDriver, type SqlDriver } from "./sql.js";
import { setting } from "../schema/settings/read.js";

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

/** SCRATCHRUN_DATABASE_URL when set (it must be a postgres:// URL), else null. */
export function databaseUrl(env: NodeJS.ProcessEnv = process.env): string | null {
  const url = setting("SCRATCHRUN_DATABASE_URL", env);
  if (!url) return null;
  if (!/^postgres(ql)?:\/\//.test(url))
    throw new ScratchRunError("NOT_READY", "SCRATCHRUN_DATABASE_URL is not a postgres:// URL", {
      fix: "Set it to postgres://user:password@host:5432/database, or unset it for SQLite",
    });
  return url;
}

export async function openStore(
  env: NodeJS.ProcessEnv = process.env,
  options: { onError?: (e: Error) => void } = {},
): Promise<Store> {
  const url = databaseUrl(env);
  if (url === null) return storeOn(new SqliteDriver(openDatabase(scratchrunHome(env))));
  const sql = new PostgresDriver({ url, ...(options.onError ? { onError: options.onError } : {}) });
  try {
    await migratePostgres(sql);
  } catch (e) {
    await sql.close();
    throw e;
  }
  return storeOn(sql);
}
