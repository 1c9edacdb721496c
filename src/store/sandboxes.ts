import type { Db } from "./db.js";

/** The sandbox cgroups a server owns right now, so that its successor can reap them after a crash. */
export class SandboxStore {
  constructor(private readonly db: Db) {}

  record(names: readonly string[], serverPid = process.pid, now = Date.now()): void {
    const stmt = this.db.prepare(
      "INSERT OR IGNORE INTO sandboxes (name, server_pid, seen_at) VALUES (?, ?, ?)",
    );
    this.db.transaction(() => {
      for (const n of names) stmt.run(n, serverPid, now);
    })();
  }

  /** Forgets every recorded name not in `live` (their sandboxes are gone). */
  retainOnly(live: ReadonlySet<string>): void {
    const stmt = this.db.prepare("DELETE FROM sandboxes WHERE name = ?");
    this.db.transaction(() => {
      for (const n of this.names()) if (!live.has(n)) stmt.run(n);
    })();
  }

  names(): string[] {
    return (
      this.db.prepare("SELECT name FROM sandboxes ORDER BY name").all() as { name: string }[]
    ).map((r) => r.name);
  }

  clear(): void {
    this.db.prepare("DELETE FROM sandboxes").run();
  }
}
