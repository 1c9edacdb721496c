import { createHash } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { ScratchRunError } from "../errors.js";
import { MIGRATIONS } from "./migrations.js";
import { numberPlaceholders, type RunOptions, type SqlDriver } from "./sql.js";

/**
 * The Postgres side of the store seam (node-postgres, a pool per process). Timestamps are ms in
 * BIGINT columns, read back as numbers. Errors that say "the database is not there right now"
 * (refused or dropped connections, a server shutting down or still a standby) become NOT_READY;
 * statements marked idempotent are retried across them until their deadline, so a record write
 * survives a failover.
 */
export interface PostgresOptions {
  url: string;
  /** Connections per process. */
  max?: number;
  /** How long to wait for a connection before the call fails NOT_READY. */
  connectTimeoutMs?: number;
  /** A statement's longest wait for an answer (a link that went silent). */
  queryTimeoutMs?: number;
  /** Whoever logs the pool's background errors. */
  onError?: (e: Error) => void;
}

const INT8_OID = 20;
const types = {
  getTypeParser: ((oid: number, format?: string) =>
    oid === INT8_OID
      ? (v: string) => Number(v)
      : pg.types.getTypeParser(oid, format as "text")) as typeof pg.types.getTypeParser,
};

/** SQLSTATE classes and codes after which the same statement may succeed on a retry. */
const TRANSIENT_STATES = new Set(["57P01", "57P02", "57P03", "25006", "40001", "40P01", "53300"]);
const TRANSIENT_ERRNO = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EAI_AGAIN",
]);

/** Pure: does this error mean the database is (for now) unreachable or not the primary? */
export function isTransientDbError(e: unknown): boolean {
  if (!(e instanceof Error)) return false;
  const code = (e as { code?: unknown }).code;
  if (typeof code === "string") {
    if (code.startsWith("08") || TRANSIENT_STATES.has(code) || TRANSIENT_ERRNO.has(code))
      return true;
  }
  return /Connection terminated|timeout exceeded when trying to connect|Query read timeout|Client has encountered a connection error|connection is closed|Connection ended unexpectedly/i.test(
    e.message,
  );
}

function unavailable(cause: unknown): ScratchRunError {
  return new ScratchRunError("NOT_READY", "The database is unreachable", {
    fix: "Retry in a few seconds; if it lasts, check SCRATCHRUN_DATABASE_URL and the Postgres server",
    cause,
  });
}

type Queryable = Pick<pg.Pool, "query"> | Pick<pg.PoolClient, "query">;

/**
 * Statements with parameters run as named prepared statements: each connection parses and plans
 * one once, then only binds (the per-call path's few statements are the same text every time).
 */
const statementNames = new Map<string, string>();
function statementName(text: string): string {
  let name = statementNames.get(text);
  if (!name) {
    name = `sr_${createHash("sha256").update(text).digest("hex").slice(0, 24)}`;
    statementNames.set(text, name);
  }
  return name;
}

async function query(on: Queryable, sql: string, params: readonly unknown[]) {
  if (!params.length) return on.query(sql);
  const text = numberPlaceholders(sql);
  return on.query({ name: statementName(text), text, values: params as unknown[] });
}

class ClientDriver implements SqlDriver {
  readonly dialect = "postgres" as const;
  constructor(private readonly client: pg.PoolClient) {}
  async all<T>(sql: string, params: readonly unknown[] = []): Promise<T[]> {
    return (await query(this.client, sql, params)).rows as T[];
  }
  async get<T>(sql: string, params: readonly unknown[] = []): Promise<T | undefined> {
    return (await this.all<T>(sql, params))[0];
  }
  async run(sql: string, params: readonly unknown[] = []): Promise<number> {
    return (await query(this.client, sql, params)).rowCount ?? 0;
  }
  transaction<T>(fn: (tx: SqlDriver) => Promise<T>): Promise<T> {
    return fn(this);
  }
  async close(): Promise<void> {}
}

export class PostgresDriver implements SqlDriver {
  readonly dialect = "postgres" as const;
  private readonly pool: pg.Pool;

  constructor(options: PostgresOptions) {
    this.pool = new pg.Pool({
      connectionString: options.url,
      max: options.max ?? 10,
      connectionTimeoutMillis: options.connectTimeoutMs ?? 2000,
      query_timeout: options.queryTimeoutMs ?? 10_000,
      idleTimeoutMillis: 30_000,
      types,
    });
    // An idle connection dropped by the server (failover, restart) must not crash the process.
    this.pool.on("error", (e) => options.onError?.(e));
  }

  private async attempt<T>(op: () => Promise<T>, retryMs = 0): Promise<T> {
    const deadline = Date.now() + retryMs;
    for (let delay = 100; ; delay = Math.min(1000, delay * 2)) {
      try {
        return await op();
      } catch (e) {
        if (!isTransientDbError(e)) throw e;
        if (Date.now() + delay > deadline) throw unavailable(e);
        await sleep(delay);
      }
    }
  }

  all<T>(sql: string, params: readonly unknown[] = []): Promise<T[]> {
    return this.attempt(async () => (await query(this.pool, sql, params)).rows as T[]);
  }

  async get<T>(sql: string, params: readonly unknown[] = []): Promise<T | undefined> {
    return (await this.all<T>(sql, params))[0];
  }

  run(sql: string, params: readonly unknown[] = [], options: RunOptions = {}): Promise<number> {
    return this.attempt(
      async () => (await query(this.pool, sql, params)).rowCount ?? 0,
      options.retryMs,
    );
  }

  async transaction<T>(fn: (tx: SqlDriver) => Promise<T>): Promise<T> {
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (e) {
      throw isTransientDbError(e) ? unavailable(e) : e;
    }
    let broken = false;
    try {
      await client.query("BEGIN");
      const out = await fn(new ClientDriver(client));
      await client.query("COMMIT");
      return out;
    } catch (e) {
      broken = isTransientDbError(e);
      if (!broken) await client.query("ROLLBACK").catch(() => (broken = true));
      throw broken ? unavailable(e) : e;
    } finally {
      client.release(broken);
    }
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}

/** Brings a Postgres database to the current schema; replicas starting together take turns. */
export async function migratePostgres(db: SqlDriver): Promise<number> {
  return db.transaction(async (tx) => {
    // Any fixed number: the lock only orders ScratchRun's own migrations.
    await tx.all("SELECT pg_advisory_xact_lock(7250115)");
    await tx.run("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)");
    let row = await tx.get<{ version: number }>("SELECT version FROM schema_version");
    if (!row) {
      await tx.run("INSERT INTO schema_version (version) VALUES (0)");
      row = { version: 0 };
    }
    // A newer binary may have migrated further: never count down.
    if (row.version >= MIGRATIONS.length) return 0;
    for (let v = row.version; v < MIGRATIONS.length; v++) await tx.run(MIGRATIONS[v]!.postgres);
    await tx.run("UPDATE schema_version SET version = ?", [MIGRATIONS.length]);
    return MIGRATIONS.length - row.version;
  });
}
