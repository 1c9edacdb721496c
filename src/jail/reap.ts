/**
 * At server start: find and destroy sandboxes whose owning ScratchRun process is gone (crash,
 * kill -9). A sandbox is owned while its top process (the one whose parent is outside the
 * sandbox) is still the child of a live ScratchRun server, known by its pid and start time
 * (servers.ts), whatever Node binary it runs on; after its owner dies it is re-parented to init.
 * A server that does not record itself (an older version) is known as before, by running the same
 * executable as this one. An empty cgroup says nothing about its owner (bwrap --die-with-parent empties a dead
 * server's cgroups; a live one's are empty while being set up), so empty ones are removed only
 * when this server recorded them as its own. Sandboxes of other live ScratchRun processes on the
 * host are left alone, unlike `reapOrphans` in jail/cgroup.ts, which takes every cgroup. Only
 * root reaps: any other user cannot read root's processes and would take every live sandbox for
 * an orphan, so a non-root caller is refused first (requireRoot).
 */
import { readFileSync, readdirSync, readlinkSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { detectCgroups, listScratchrunCgroups, type CgroupHost } from "./cgroup.js";
import { isValidCgroupName } from "./cgroup-detect.js";
import { requireRoot } from "./root.js";
import { isServer, registerServer } from "./servers.js";
import { SANDBOX_UID_BASE, SANDBOX_UID_COUNT } from "./uids.js";

/** Namespace sandboxes, then microVM QEMU processes: two blocks of SANDBOX_UID_COUNT. */
const UID_MIN = SANDBOX_UID_BASE;
const UID_MAX = SANDBOX_UID_BASE + 2 * SANDBOX_UID_COUNT;

export interface ProcInfo {
  pid: number;
  ppid: number;
  uid: number;
  exe: string | null;
  zombie: boolean;
}

export function readProc(pid: number): ProcInfo | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const ppid = Number(/^PPid:\s+(\d+)/m.exec(status)?.[1] ?? 0);
    const uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1] ?? -1);
    const zombie = /^State:\s+Z/m.test(status);
    let exe: string | null = null;
    try {
      exe = readlinkSync(`/proc/${pid}/exe`);
    } catch {
      exe = null;
    }
    return { pid, ppid, uid, exe, zombie };
  } catch {
    return null;
  }
}

/**
 * Pure decision: is a group of processes (one sandbox) still owned? Owned when some process of
 * the group, walking up its parents outside the group, reaches a live process `isOwner` accepts
 * before reaching init (pid 1) or a dead end.
 */
export function isOwned(
  pids: readonly number[],
  lookup: (pid: number) => ProcInfo | null,
  isOwner: (p: ProcInfo) => boolean,
): boolean {
  const inGroup = new Set(pids);
  for (const pid of pids) {
    let p = lookup(pid);
    for (let depth = 0; p && depth < 64; depth++) {
      if (p.ppid <= 1) break;
      const parent = lookup(p.ppid);
      if (!parent) break;
      if (!inGroup.has(parent.pid) && isOwner(parent)) return true;
      p = parent;
    }
  }
  return false;
}

function cgroupPids(dirs: string[]): number[] {
  const pids = new Set<number>();
  for (const dir of dirs) {
    for (const sub of walk(dir)) {
      try {
        for (const line of readFileSync(join(sub, "cgroup.procs"), "utf8").split("\n"))
          if (line.trim()) pids.add(Number(line));
      } catch {
        // removed meanwhile
      }
    }
  }
  return [...pids].sort((a, b) => a - b);
}

/** A directory and every directory below it, deepest first. */
function walk(dir: string): string[] {
  const out: string[] = [];
  try {
    for (const e of readdirSync(dir, { withFileTypes: true }))
      if (e.isDirectory()) out.push(...walk(join(dir, e.name)));
  } catch {
    return out;
  }
  out.push(dir);
  return out;
}

function kill(pid: number): void {
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // already gone
  }
}

/**
 * Lets a frozen sandbox (a session's between calls) run again so SIGKILL takes it: a frozen v1
 * task does not act on it until thawed. With pids.max at 0 first, nothing it runs meanwhile forks.
 */
function thaw(dirs: string[]): void {
  const write = (file: string, value: string) => {
    try {
      writeFileSync(file, value, { flag: "r+" });
    } catch {
      // not this hierarchy's file, or already gone
    }
  };
  for (const dir of dirs) for (const sub of walk(dir)) write(join(sub, "pids.max"), "0");
  for (const dir of dirs)
    for (const sub of walk(dir)) {
      write(join(sub, "freezer.state"), "THAWED");
      write(join(sub, "cgroup.freeze"), "0");
    }
}

async function destroyGroup(dirs: string[]): Promise<void> {
  thaw(dirs);
  const deadline = Date.now() + 10_000;
  for (;;) {
    const pids = cgroupPids(dirs);
    if (pids.length === 0 || Date.now() > deadline) break;
    pids.forEach(kill);
    await sleep(20);
  }
  for (const dir of dirs) {
    for (const sub of walk(dir)) {
      for (let i = 0; i < 50; i++) {
        try {
          rmdirSync(sub);
          break;
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code === "ENOENT") break;
          await sleep(20);
        }
      }
    }
  }
}

async function cgroupsByName(host: CgroupHost): Promise<Map<string, string[]>> {
  const m = new Map<string, string[]>();
  for (const dir of await listScratchrunCgroups(host)) {
    const name = dir.slice(dir.lastIndexOf("/") + 1);
    if (!isValidCgroupName(name)) continue;
    m.set(name, [...(m.get(name) ?? []), dir]);
  }
  return m;
}

/** Sandbox cgroups whose processes include a direct child of `ownerPid` (this server). */
export async function ownedCgroups(
  host: CgroupHost,
  ownerPid: number = process.pid,
): Promise<string[]> {
  const out: string[] = [];
  for (const [name, dirs] of await cgroupsByName(host))
    if (cgroupPids(dirs).some((pid) => readProc(pid)?.ppid === ownerPid)) out.push(name);
  return out;
}

export interface ReapReport {
  cgroups: string[];
  processes: number[];
}

/**
 * Destroys every orphaned sandbox: cgroups with processes that no live owner parents, cgroups
 * `recorded` as this server's by its previous run (empty or not, unless a live owner holds them),
 * and stray processes running as sandbox uids with no live owner. Empty cgroups nobody recorded
 * are left to `reapStaleEmptyCgroups`, which every server runs when it builds its engine.
 */
export async function reapOrphanSandboxes(
  options: { recorded?: readonly string[]; host?: CgroupHost; ownerExe?: string } = {},
): Promise<ReapReport> {
  requireRoot();
  // First, so a server starting beside this one's reap takes this one for a server too.
  registerServer();
  const host = options.host ?? detectCgroups();
  const ownerExe = options.ownerExe ?? readlinkSync("/proc/self/exe");
  const isOwner = (p: ProcInfo) => isServer(p.pid) || p.exe === ownerExe;
  const recorded = new Set(options.recorded ?? []);
  const orphans = new Map<string, string[]>();
  for (const [name, dirs] of await cgroupsByName(host)) {
    const pids = cgroupPids(dirs);
    if (pids.length === 0 ? recorded.has(name) : !isOwned(pids, readProc, isOwner))
      orphans.set(name, dirs);
  }
  for (const dirs of orphans.values()) await destroyGroup(dirs);

  const strays: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const p = readProc(Number(entry));
    if (!p || p.zombie || p.uid < UID_MIN || p.uid >= UID_MAX) continue;
    if (!isOwned([p.pid], readProc, isOwner)) strays.push(p.pid);
  }
  strays.forEach(kill);
  return { cgroups: [...orphans.keys()].sort(), processes: strays };
}
