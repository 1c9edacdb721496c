/**
 * Which processes on this host are ScratchRun servers, by identity (pid and start time), for the
 * orphan reaper (reap.ts): a sandbox whose parent chain reaches a live server is owned, whatever
 * Node binary that server runs on. Each server that reaps says so first, with a file named
 * `<pid>-<start time>` in SERVERS_DIR (tmpfs: gone at boot), removed when it exits; a file whose
 * process is gone or whose pid was reused names no server, as its start time no longer matches.
 */
import { mkdirSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { readProcStat } from "./procfs.js";

export const SERVERS_DIR = "/run/scratchrun/servers";

let registered: string | null = null;

/** Records this process as a ScratchRun server until it exits (once per process). */
export function registerServer(dir: string = SERVERS_DIR): void {
  if (registered) return;
  const start = readProcStat(process.pid)?.startTime;
  if (!start) return;
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  const file = join(dir, `${process.pid}-${start}`);
  writeFileSync(file, "", { mode: 0o644 });
  registered = file;
  process.once("exit", () => rmSync(file, { force: true }));
}

/** Whether `pid` is a live process some server recorded itself as (same start time). */
export function isServer(pid: number, dir: string = SERVERS_DIR): boolean {
  const start = readProcStat(pid)?.startTime;
  return Boolean(start) && existsSync(join(dir, `${pid}-${start}`));
}
