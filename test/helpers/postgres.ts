/**
 * A real Postgres for tests, started by the test itself: initdb in a temporary directory, a free
 * loopback port, the server as the `postgres` user when the tests run as root (Postgres refuses
 * to run as root), stopped by its PID. A streaming standby (pg_basebackup) can follow it and be
 * promoted, for the failover tests. Debian's `postgresql` package provides the binaries
 * (scripts/setup.sh installs it).
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { childrenOf } from "./procs.js";

const USER = "scratchrun";

/** The newest installed Postgres's bin directory, or null. */
export function postgresBinDir(): string | null {
  const base = "/usr/lib/postgresql";
  if (!existsSync(base)) return null;
  const versions = readdirSync(base)
    .filter((v) => /^\d+$/.test(v) && existsSync(join(base, v, "bin", "postgres")))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] ? join(base, versions[0], "bin") : null;
}

/** Why Postgres cannot run here, or null when it can. */
export function postgresMissing(): string | null {
  if (!postgresBinDir()) return "Postgres is not installed (apt-get install postgresql)";
  if (process.getuid?.() === 0 && !uidOf("postgres"))
    return "running as root, but there is no postgres user to run the server as";
  return null;
}

function uidOf(user: string): { uid: number; gid: number } | null {
  const r = spawnSync("id", ["-u", user], { encoding: "utf8" });
  const g = spawnSync("id", ["-g", user], { encoding: "utf8" });
  if (r.status !== 0 || g.status !== 0) return null;
  return { uid: Number(r.stdout.trim()), gid: Number(g.stdout.trim()) };
}

/** The command line that runs `argv` as the postgres user when we are root (exec, no fork). */
function asPostgres(argv: string[]): string[] {
  if (process.getuid?.() !== 0) return argv;
  return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", ...argv];
}

function mustRun(argv: string[], what: string): void {
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: "utf8", cwd: "/" });
  if (r.status !== 0) throw new Error(`${what} failed: ${r.stderr || r.stdout}`);
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

export interface PgServer {
  readonly port: number;
  readonly dir: string;
  readonly pid: number;
  /** A connection URL for `database` (default: the maintenance database). */
  url(database?: string): string;
  /** Creates a fresh database and returns its URL. */
  createDatabase(name: string): Promise<string>;
  /** SIGKILL: a crash, no shutdown. */
  kill(): Promise<void>;
  /** Fast shutdown (SIGINT) and the directory removed. */
  stop(): Promise<void>;
}

async function waitReady(port: number, child: ChildProcess, log: () => string): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`postgres exited: ${log()}`);
    const c = new pg.Client({ host: "127.0.0.1", port, user: USER, database: "postgres" });
    try {
      await c.connect();
      await c.query("SELECT 1");
      await c.end();
      return;
    } catch {
      await c.end().catch(() => {});
      if (Date.now() > deadline) throw new Error(`postgres did not come up: ${log()}`);
      await sleep(100);
    }
  }
}

function launch(bin: string, dir: string, port: number): Promise<PgServer> {
  const args = [
    join(bin, "postgres"),
    "-D",
    dir,
    "-p",
    String(port),
    "-k",
    dir,
    "-c",
    "listen_addresses=127.0.0.1",
    "-c",
    "fsync=off",
    "-c",
    "full_page_writes=off",
    "-c",
    "wal_level=replica",
    "-c",
    "max_wal_senders=4",
    "-c",
    "hot_standby=on",
    "-c",
    "max_connections=200",
  ];
  const argv = asPostgres(args);
  const child = spawn(argv[0]!, argv.slice(1), { stdio: ["ignore", "ignore", "pipe"], cwd: "/" });
  let log = "";
  child.stderr!.on("data", (d: Buffer) => (log = (log + d.toString()).slice(-4000)));
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const server: PgServer = {
    port,
    dir,
    pid: child.pid!,
    url: (database = "postgres") => `postgres://${USER}@127.0.0.1:${port}/${database}`,
    async createDatabase(name) {
      const c = new pg.Client({ connectionString: server.url() });
      await c.connect();
      try {
        await c.query(`CREATE DATABASE ${name}`);
      } finally {
        await c.end();
      }
      return server.url(name);
    },
    async kill() {
      const children = childrenOf(child.pid!);
      child.kill("SIGKILL");
      await exited;
      // The children notice the postmaster is gone and exit; a crash leaves none behind here.
      for (let i = 0; i < 100 && children.some(alive); i++) await sleep(50);
      for (const pid of children.filter(alive)) process.kill(pid, "SIGKILL");
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const children = childrenOf(child.pid!);
        child.kill("SIGINT");
        await exited;
        for (let i = 0; i < 100 && children.some(alive); i++) await sleep(50);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return waitReady(port, child, () => log).then(() => server);
}

const alive = (pid: number) => existsSync(`/proc/${pid}`);

function ownedTempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const owner = process.getuid?.() === 0 ? uidOf("postgres") : null;
  if (owner) chownSync(dir, owner.uid, owner.gid);
  return dir;
}

/** A new primary in its own temporary directory. */
export async function startPostgres(): Promise<PgServer> {
  const bin = postgresBinDir();
  if (!bin) throw new Error("Postgres is not installed");
  const dir = ownedTempDir("sr-pg-");
  mustRun(
    asPostgres([
      join(bin, "initdb"),
      "-D",
      dir,
      "-U",
      USER,
      "--auth=trust",
      "--no-sync",
      "-E",
      "UTF8",
      "--locale=C",
    ]),
    "initdb",
  );
  return launch(bin, dir, await freePort());
}

/** A streaming standby of `primary` (pg_basebackup -R), running, ready to be promoted. */
export async function startStandby(primary: PgServer): Promise<PgServer> {
  const bin = postgresBinDir()!;
  const dir = ownedTempDir("sr-pg-standby-");
  mustRun(
    asPostgres([
      join(bin, "pg_basebackup"),
      "-h",
      "127.0.0.1",
      "-p",
      String(primary.port),
      "-U",
      USER,
      "-D",
      dir,
      "-R",
      "-X",
      "stream",
      // An immediate checkpoint: the default spreads it over minutes.
      "--checkpoint=fast",
      "--no-sync",
    ]),
    "pg_basebackup",
  );
  return launch(bin, dir, await freePort());
}

/** Promotes a standby to primary and waits until it accepts writes. */
export async function promote(standby: PgServer): Promise<void> {
  const c = new pg.Client({ connectionString: standby.url() });
  await c.connect();
  try {
    await c.query("SELECT pg_promote(true, 30)");
  } finally {
    await c.end();
  }
}

/** Starts a killed or stopped-without-removal server again on its directory and port. */
export async function relaunch(server: PgServer): Promise<PgServer> {
  return launch(postgresBinDir()!, server.dir, server.port);
}
