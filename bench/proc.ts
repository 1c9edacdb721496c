import { readdirSync, readFileSync } from "node:fs";

/** Clock ticks per second for /proc/<pid>/stat CPU fields (100 on every Linux we target). */
const HZ = 100;

interface ProcStat {
  pid: number;
  ppid: number;
  comm: string;
  cpuTicks: number;
}

function readStat(pid: number): ProcStat | null {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, "utf8");
    const close = s.lastIndexOf(")");
    const comm = s.slice(s.indexOf("(") + 1, close);
    const f = s.slice(close + 2).split(" ");
    // Fields after comm: state(0) ppid(1) ... utime(11) stime(12)
    return { pid, ppid: Number(f[1]), comm, cpuTicks: Number(f[11]) + Number(f[12]) };
  } catch {
    return null;
  }
}

/** utime + stime of one process so far, ms (0 once it is gone). */
export function cpuMs(pid: number): number {
  const st = readStat(pid);
  return st ? (st.cpuTicks * 1000) / HZ : 0;
}

/** pid and every live descendant of it. */
export function processTree(root: number): ProcStat[] {
  const all: ProcStat[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const st = readStat(Number(name));
    if (st) all.push(st);
  }
  const children = new Map<number, ProcStat[]>();
  for (const p of all) children.set(p.ppid, [...(children.get(p.ppid) ?? []), p]);
  const out: ProcStat[] = [];
  const queue = all.filter((p) => p.pid === root);
  while (queue.length) {
    const p = queue.shift()!;
    out.push(p);
    queue.push(...(children.get(p.pid) ?? []));
  }
  return out;
}

function statusKb(pid: number, field: string): number {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(
      readFileSync(`/proc/${pid}/status`, "utf8"),
    );
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

/** Proportional set size (shared pages split between their users), kB. */
export function pssKb(pid: number): number {
  try {
    const m = /^Pss:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, "utf8"));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

export const rssKb = (pid: number): number => statusKb(pid, "VmRSS");
/** Peak RSS of the process over its life. */
export const hwmKb = (pid: number): number => statusKb(pid, "VmHWM");

export interface IdleCost {
  processes: number;
  rssMbEach: number;
  pssMbEach: number;
  /** Percent of one core, per process, averaged over the window. */
  cpuPercentEach: number;
  cpuPercentTotal: number;
}

/** RSS, PSS and CPU of the matching processes under root, over windowMs of idleness. */
export async function idleCost(
  root: number,
  match: (comm: string) => boolean,
  windowMs: number,
): Promise<IdleCost | null> {
  const pick = () => processTree(root).filter((p) => match(p.comm));
  const before = pick();
  if (before.length === 0) return null;
  const t0 = Date.now();
  await new Promise((r) => setTimeout(r, windowMs));
  const seconds = (Date.now() - t0) / 1000;
  const after = new Map(pick().map((p) => [p.pid, p]));
  const same = before.filter((p) => after.has(p.pid));
  if (same.length === 0) return null;
  const ticks = same.reduce((a, p) => a + (after.get(p.pid)!.cpuTicks - p.cpuTicks), 0);
  const total = (100 * ticks) / HZ / seconds;
  const mb = (kb: number) => Math.round(kb / 102.4) / 10;
  return {
    processes: same.length,
    rssMbEach: mb(same.reduce((a, p) => a + rssKb(p.pid), 0) / same.length),
    pssMbEach: mb(same.reduce((a, p) => a + pssKb(p.pid), 0) / same.length),
    cpuPercentEach: Math.round((total / same.length) * 10) / 10,
    cpuPercentTotal: Math.round(total * 10) / 10,
  };
}

/** What one kind of pooled sandbox costs while it waits, averaged over the ready ones. */
export interface PoolKindCost {
  sandboxes: number;
  rssMbEach: number;
  pssMbEach: number;
  /** Memory its cgroup is charged (for a jail: what counts against the call's memory_mb). */
  chargeMbEach: number;
  cpuPercentEach: number;
}

/** RSS, PSS, cgroup charge and CPU of groups of processes over windowMs of idleness. */
export async function groupCost(
  groups: Record<string, { pids: number[]; memoryBytes: number }[]>,
  windowMs: number,
): Promise<Record<string, PoolKindCost>> {
  const t0 = Date.now();
  const cpu0 = new Map<number, number>();
  for (const list of Object.values(groups))
    for (const g of list) for (const p of g.pids) cpu0.set(p, cpuMs(p));
  await new Promise((r) => setTimeout(r, windowMs));
  const seconds = (Date.now() - t0) / 1000;
  const mb = (kb: number) => Math.round(kb / 102.4) / 10;
  const out: Record<string, PoolKindCost> = {};
  for (const [kind, list] of Object.entries(groups)) {
    if (list.length === 0) continue;
    const pids = list.flatMap((g) => g.pids);
    const cpu = pids.reduce((a, p) => a + Math.max(0, cpuMs(p) - (cpu0.get(p) ?? 0)), 0);
    out[kind] = {
      sandboxes: list.length,
      rssMbEach: mb(pids.reduce((a, p) => a + rssKb(p), 0) / list.length),
      pssMbEach: mb(pids.reduce((a, p) => a + pssKb(p), 0) / list.length),
      chargeMbEach: mb(list.reduce((a, g) => a + g.memoryBytes / 1024, 0) / list.length),
      cpuPercentEach: Math.round((cpu / 10 / seconds / list.length) * 10) / 10,
    };
  }
  return out;
}

/** Samples the RSS of root's whole tree every intervalMs until stopped; returns the peak, MB. */
export function treeRssSampler(root: number, intervalMs = 200): { stop(): number } {
  let peak = 0;
  const sample = () => {
    const kb = processTree(root).reduce((a, p) => a + rssKb(p.pid), 0);
    peak = Math.max(peak, kb);
  };
  sample();
  const t = setInterval(sample, intervalMs);
  return {
    stop() {
      clearInterval(t);
      sample();
      return Math.round(peak / 102.4) / 10;
    },
  };
}
