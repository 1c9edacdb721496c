import { chmodSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { DATABASE_FILE } from "./home.js";

export type Db = Database.Database;

/**
 * Schema migrations, applied in order; `PRAGMA user_version` records how many ran. Append only:
 * a shipped migration is never edited.
 *
 * Runs hold metadata only: sizes and SHA-256 of code and outputs, never code, output, file
 * contents, env names or env values.
 */
const MIGRATIONS: string[] = [
  `CREATE TABLE keys (
     id TEXT PRIMARY KEY,
     name TEXT NOT NULL,
     hash BLOB NOT NULL,
     created_at INTEGER NOT NULL,
     revoked_at INTEGER,
     last_used_at INTEGER
   );
   CREATE TABLE runs (
     id TEXT PRIMARY KEY,
     key_id TEXT,
     transport TEXT NOT NULL,
     runtime TEXT NOT NULL,
     network TEXT NOT NULL,
     timeout_ms INTEGER NOT NULL,
     memory_mb INTEGER NOT NULL,
     status TEXT NOT NULL,
     received_at INTEGER NOT NULL,
     started_at INTEGER,
     finished_at INTEGER,
     duration_ms INTEGER,
     isolation TEXT,
     exit_reason TEXT,
     exit_code INTEGER,
     signal INTEGER,
     error_code TEXT,
     code_bytes INTEGER NOT NULL,
     code_sha256 TEXT NOT NULL,
     env_count INTEGER NOT NULL,
     files_in_count INTEGER NOT NULL,
     files_in_bytes INTEGER NOT NULL,
     stdout_bytes INTEGER,
     stdout_sha256 TEXT,
     stderr_bytes INTEGER,
     stderr_sha256 TEXT,
     files_out_count INTEGER,
     files_out_bytes INTEGER,
     files_out_sha256 TEXT
   );
   CREATE INDEX runs_status ON runs(status);
   CREATE INDEX runs_key ON runs(key_id, received_at);`,
  // Sandbox cgroups this server saw as its own while they ran: after a crash, the next start
  // destroys exactly these (they are empty once bwrap --die-with-parent has killed their
  // processes, and an empty cgroup cannot otherwise be told apart from another server's).
  `CREATE TABLE sandboxes (name TEXT PRIMARY KEY, server_pid INTEGER NOT NULL, seen_at INTEGER NOT NULL);`,
];

/** Opens (creating if needed) the state database under `home`, owner-only, migrated. */
export function openDatabase(home: string): Db {
  mkdirSync(home, { recursive: true, mode: 0o700 });
  const path = join(home, DATABASE_FILE);
  const db = new Database(path);
  chmodSync(path, 0o600);
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = NORMAL");
  db.pragma("busy_timeout = 5000");
  migrate(db);
  return db;
}

export function migrate(db: Db): void {
  const version = db.pragma("user_version", { simple: true }) as number;
  for (let v = version; v < MIGRATIONS.length; v++) {
    db.transaction(() => {
      db.exec(MIGRATIONS[v]!);
      db.pragma(`user_version = ${v + 1}`);
    })();
  }
}
