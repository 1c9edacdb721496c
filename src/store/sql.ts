import type Database from "better-sqlite3";

/**
 * The one seam between the stores and a database: SQLite (better-sqlite3, one process, the
 * embedded default) or Postgres (pg, shared by API replicas). Statements are written once with `?`
 * placeholders in the SQL both dialects accept; the Postgres driver numbers them.
 */
export type Dialect = "sqlite" | "postgres";

/**
 * An open SQLite database (better-sqlite3's), opened by db.ts. Named here, at the seam, so that
 * sql.ts need not import db.ts, which imports the migrations, which import the seam.
 */
export type Db = Database.Database;

export interface RunOptions {
  /**
   * The statement has the same effect when run twice (an UPDATE guarded by the row's state, an
   * INSERT of a client-chosen id with ON CONFLICT DO NOTHING): the driver may retry it across a
   * lost connection or a database failover until this many ms have passed.
   */
  retryMs?: number;
}

export interface SqlDriver {
  readonly dialect: Dialect;
  all<T>(sql: string, params?: readonly unknown[]): Promise<T[]>;
  get<T>(sql: string, params?: readonly unknown[]): Promise<T | undefined>;
  /** Returns the number of rows changed. */
  run(sql: string, params?: readonly unknown[], options?: RunOptions): Promise<number>;
  /** Runs `fn` in one transaction on one connection; commits if it resolves, else rolls back. */
  transaction<T>(fn: (tx: SqlDriver) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

/** better-sqlite3 is synchronous: each call runs at once and resolves an already-settled promise. */
export class SqliteDriver implements SqlDriver {
  readonly dialect = "sqlite" as const;
  private depth = 0;

  constructor(readonly db: Db) {}

  async all<T>(sql: string, params: readonly unknown[] = []): Promise<T[]> {
    return this.db.prepare(sql).all(...params) as T[];
  }

  async get<T>(sql: string, params: readonly unknown[] = []): Promise<T | undefined> {
    return this.db.prepare(sql).get(...params) as T | undefined;
  }

  async run(sql: string, params: readonly unknown[] = []): Promise<number> {
    return this.db.prepare(sql).run(...params).changes;
  }

  async transaction<T>(fn: (tx: SqlDriver) => Promise<T>): Promise<T> {
    // One connection, one process: nesting is flattened into the outer transaction.
    if (this.depth > 0) return fn(this);
    this.db.exec("BEGIN IMMEDIATE");
    this.depth++;
    try {
      const out = await fn(this);
      this.db.exec("COMMIT");
      return out;
    } catch (e) {
      this.db.exec("ROLLBACK");
      throw e;
    } finally {
      this.depth--;
    }
  }

  async close(): Promise<void> {
    this.db.close();
  }
}

/** A driver for whatever a store was given: an open SQLite database or a driver already. */
export function asDriver(db: Db | SqlDriver): SqlDriver {
  return "dialect" in db ? db : new SqliteDriver(db);
}

/** `?` placeholders numbered `$1..$n` for Postgres (the stores' SQL has no `?` in literals). */
export function numberPlaceholders(sql: string): string {
  let n = 0;
  return sql.replace(/\?/g, () => `$${++n}`);
}
