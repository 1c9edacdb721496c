/**
 * Leases: how a live server marks what it serves from (its runtime image, its microVM kernel and
 * disk) so that a build's prune, in this process or another, never removes it. A lease is a file
 * in a cache's `leases/` directory naming the server's pid, the pid's start time (so a reused pid
 * is not mistaken for the server) and the paths it holds. A lease whose process is gone is stale:
 * ignored, and removed by the next prune. A server releases its leases when it closes, and on exit.
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { readProcStat } from "../jail/procfs.js";

export const LEASE_DIR = "leases";

export interface Lease {
  readonly file: string;
  release(): void;
}

interface LeaseRecord {
  pid: number;
  startTime: string;
  targets: string[];
}

/** The start time of a process (field 22 of /proc/PID/stat, clock ticks since boot), or null. */
export function processStartTime(pid: number): string | null {
  return readProcStat(pid)?.startTime || null;
}

/** True when the lease's process still runs (the same process: same pid and start time). */
export function leaseAlive(record: { pid: number; startTime: string }): boolean {
  return processStartTime(record.pid) === record.startTime;
}

const held = new Set<string>();
let exitHook = false;

/** Writes a lease on `targets` (absolute paths) in `dir`/leases for this process. */
export function takeLease(dir: string, targets: readonly string[]): Lease {
  const leases = join(dir, LEASE_DIR);
  mkdirSync(leases, { recursive: true, mode: 0o755 });
  const startTime = processStartTime(process.pid) ?? "0";
  const name = `${process.pid}-${startTime}-${randomBytes(4).toString("hex")}.json`;
  const file = join(leases, name);
  const record: LeaseRecord = { pid: process.pid, startTime, targets: [...targets] };
  writeFileSync(`${file}.tmp`, `${JSON.stringify(record)}\n`);
  renameSync(`${file}.tmp`, file);
  held.add(file);
  if (!exitHook) {
    exitHook = true;
    process.once("exit", () => {
      for (const f of held) rmSync(f, { force: true });
    });
  }
  return {
    file,
    release() {
      held.delete(file);
      rmSync(file, { force: true });
    },
  };
}

/**
 * The paths live leases in `dir`/leases hold, each with the pids holding it. With `removeStale`,
 * leases of processes that are gone are deleted on the way.
 */
export function liveLeases(dir: string, removeStale = false): Map<string, number[]> {
  const out = new Map<string, number[]>();
  const leases = join(dir, LEASE_DIR);
  let names: string[];
  try {
    names = readdirSync(leases);
  } catch {
    return out;
  }
  for (const name of names) {
    if (!name.endsWith(".json")) continue;
    const file = join(leases, name);
    let record: LeaseRecord;
    try {
      record = JSON.parse(readFileSync(file, "utf8")) as LeaseRecord;
    } catch {
      continue; // being written, or not ours: never a reason to remove anything
    }
    if (!Number.isInteger(record.pid) || !Array.isArray(record.targets)) continue;
    if (!leaseAlive(record)) {
      if (removeStale) rmSync(file, { force: true });
      continue;
    }
    for (const t of record.targets)
      if (typeof t === "string") out.set(t, [...(out.get(t) ?? []), record.pid]);
  }
  return out;
}

/** True when `path` (or something inside it, or a path it lies in) is held by a live lease. */
export function heldBy(leased: ReadonlyMap<string, number[]>, path: string): number[] {
  const pids: number[] = [];
  for (const [target, holders] of leased)
    if (target === path || target.startsWith(`${path}/`) || path.startsWith(`${target}/`))
      pids.push(...holders);
  return pids;
}
