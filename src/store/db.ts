import { chmodSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import type Database from "better-sqlite3";
import { ScratchRunError } from "../errors.js";
import { DATABASE_FILE } from "./home.js";
import { MIGRATIONS } from "./migrations.js";
import type { Db } from "./sql.js";

export type { Db };

/**
 * better-sqlite3 is an optional dependency with a native build (its install script, which npm 11
 * lists for approval and a later npm holds back). Only `serve` and `keys` use it, so it is loaded
 * here, on first use; absent or unbuilt, the error says what to run.
 */
function sqlite(): typeof Database {
  try {
    return createRequire(import.meta.url)("better-sqlite3") as typeof Database;
  } catch (cause) {
    throw sqliteMissing(cause);
  }
}

function sqliteMissing(cause: unknown): ScratchRunError {
  return new ScratchRunError(
    "NOT_READY",
    "SQLite is not available (the optional dependency better-sqlite3 is not installed or its native module was not built); `scratchrun serve` and `scratchrun keys` need it",
    {
      fix: "Allow its install script and rebuild it: in a project, `npm install-scripts approve better-sqlite3 && npm rebuild better-sqlite3`; for a global install, `npm install -g scratchrun-mcp --allow-scripts=better-sqlite3` (needs a prebuilt binary for this platform, or python3, make and a C++ compiler)",
      cause,
    },
  );
}

/** Opens (creating if needed) the state database under `home`, owner-only, migrated. */
export function openDatabase(home: string): Db {
  const Sqlite = sqlite();
  mkdirSync(home, { recursive: true, mode: 0o700 });
  const path = join(home, DATABASE_FILE);
  let db: Db;
  try {
    db = new Sqlite(path);
  } catch (cause) {
    // An installed but unbuilt better-sqlite3 loads, and fails here looking for its binding.
    if (/bindings|better_sqlite3\.node|NODE_MODULE_VERSION/i.test(String(cause)))
      throw sqliteMissing(cause);
    throw cause;
  }
  chmodSync(path, 0o600);
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = NORMAL");
  db.pragma("busy_timeout = 5000");
  migrate(db);
  return db;
}

/** Applies the pending migrations (`PRAGMA user_version` counts those that ran), each atomically. */
export function migrate(db: Db): void {
  const version = db.pragma("user_version", { simple: true }) as number;
  for (let v = version; v < MIGRATIONS.length; v++) {
    db.transaction(() => {
      db.exec(MIGRATIONS[v]!.sqlite);
      db.pragma(`user_version = ${v + 1}`);
    })();
  }
}
