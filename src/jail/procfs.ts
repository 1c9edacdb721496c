import { readdirSync, readFileSync } from "node:fs";

/** What /proc/PID/stat says of one process. */
export interface ProcStat {
  pid: number;
  /** The command name (field 2), without its parentheses. */
  comm: string;
  /** R, S, D, Z, ... (field 3). */
  state: string;
  ppid: number;
  /** Clock ticks since boot (field 22): with the pid, names one process across pid reuse. */
  startTime: string;
}

/** The process's stat line parsed, or null once it is gone. */
export function readProcStat(pid: number | string): ProcStat | null {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return null;
  }
  // The command name may hold spaces and parentheses: fields after it count from its last ')'.
  const close = stat.lastIndexOf(")");
  const rest = stat.slice(close + 2).split(" ");
  return {
    pid: Number(pid),
    comm: stat.slice(stat.indexOf("(") + 1, close),
    state: rest[0] ?? "",
    ppid: Number(rest[1]),
    startTime: rest[19] ?? "",
  };
}

/** Every process now (those that exit while /proc is read are left out). */
export function allProcStats(): ProcStat[] {
  const out: ProcStat[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const s = readProcStat(name);
    if (s) out.push(s);
  }
  return out;
}

/** Whether a process with this pid exists (EPERM: it does, someone else's). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}
