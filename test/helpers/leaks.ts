import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import assert from "node:assert/strict";

/**
 * An independent leak detector: it reads the host's own tables (not the product's bookkeeping)
 * for anything a sandbox could leave behind. Tests snapshot it before and assert after.
 */
export const SANDBOX_UID_MIN = 6_200_000;
export const SANDBOX_UID_MAX = 6_200_000 + 4096;

export interface HostSnapshot {
  sandboxProcesses: string[];
  qemuProcesses: string[];
  cgroups: string[];
  netns: string[];
  links: string[];
  mounts: string[];
  tmpEntries: string[];
}

function processes(): { pid: string; uid: number; comm: string; cmdline: string }[] {
  const out = [];
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const status = readFileSync(`/proc/${pid}/status`, "utf8");
      const uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1] ?? -1);
      const comm = /^Name:\s+(.*)$/m.exec(status)?.[1] ?? "";
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8").replace(/\0/g, " ").trim();
      out.push({ pid, uid, comm, cmdline });
    } catch {
      // the process ended while we read it
    }
  }
  return out;
}

function cgroupDirs(): string[] {
  const out: string[] = [];
  for (const base of [
    "/sys/fs/cgroup/memory/scratchrun",
    "/sys/fs/cgroup/pids/scratchrun",
    "/sys/fs/cgroup/cpu/scratchrun",
    "/sys/fs/cgroup/scratchrun",
  ]) {
    if (!existsSync(base)) continue;
    for (const e of readdirSync(base, { withFileTypes: true }))
      if (e.isDirectory()) out.push(join(base, e.name));
  }
  return out;
}

function listDir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

export function snapshot(): HostSnapshot {
  const procs = processes();
  return {
    sandboxProcesses: procs
      .filter((p) => p.uid >= SANDBOX_UID_MIN && p.uid < SANDBOX_UID_MAX)
      .map((p) => `${p.pid} ${p.comm} uid=${p.uid} ${p.cmdline}`),
    qemuProcesses: procs
      .filter((p) => p.comm.startsWith("qemu-system"))
      .map((p) => `${p.pid} ${p.cmdline}`),
    cgroups: cgroupDirs(),
    netns: listDir("/run/netns").filter((n) => n.startsWith("sr-")),
    links: listDir("/sys/class/net").filter((n) => n.startsWith("sr")),
    mounts: readFileSync("/proc/self/mountinfo", "utf8")
      .split("\n")
      .map((l) => l.split(" ")[4] ?? "")
      .filter((m) => m.includes("scratchrun")),
    tmpEntries: listDir("/tmp").filter((n) => n.startsWith("scratchrun")),
  };
}

/** A namespace jail cgroup holding only bwrap and the agent: a pooled jail, no call's leftovers. */
function isIdleJail(dir: string): boolean {
  if (!/\/ns-[0-9a-f]+$/.test(dir)) return false;
  try {
    const pids = readFileSync(join(dir, "cgroup.procs"), "utf8").split("\n").filter(Boolean);
    return pids.every((pid) => /^(bwrap|agent)$/.test(comm(pid)));
  } catch {
    return false;
  }
}

function comm(pid: string): string {
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  } catch {
    return "";
  }
}

/**
 * Polls briefly (teardown is asynchronous in the kernel) and fails naming whatever is left.
 * `whileServing`: the server is still up, so its warm pool (paused or booted VMs and their
 * cgroups; jails whose only processes are bwrap and the agent waiting at READY) is expected; the
 * check after the server closes covers the pool too.
 */
export async function assertNoLeaks(
  baseline: HostSnapshot,
  waitMs = 3000,
  options: { whileServing?: boolean } = {},
): Promise<void> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const now = snapshot();
    if (options.whileServing) {
      now.qemuProcesses = [];
      now.cgroups = now.cgroups.filter((c) => !/\/vm-[0-9a-f]+$/.test(c) && !isIdleJail(c));
      now.sandboxProcesses = now.sandboxProcesses.filter((p) => !/^\d+ (bwrap|agent) uid=/.test(p));
      // Pooled VMs' private socket dirs and the server's resolv.conf dir live as long as it does.
      now.tmpEntries = now.tmpEntries.filter((t) => !/^scratchrun-(vm|net)-/.test(t));
    }
    const leaked: Record<string, string[]> = {};
    for (const key of Object.keys(now) as (keyof HostSnapshot)[]) {
      const extra = now[key].filter((x) => !baseline[key].includes(x));
      if (extra.length) leaked[key] = extra;
    }
    if (Object.keys(leaked).length === 0) return;
    if (Date.now() > deadline)
      assert.fail(`sandbox left resources behind: ${JSON.stringify(leaked, null, 2)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * The server's open fds come back to their baseline once its calls are done (polls briefly:
 * pipes of a finished sandbox close asynchronously). Only meaningful without a warm pool, whose
 * VMs hold sockets of their own.
 */
export async function assertServerFdsBack(count: () => number, baseline: number, waitMs = 3000) {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const now = count();
    if (now <= baseline) return;
    if (Date.now() > deadline)
      assert.fail(
        `the server holds ${now} fds, ${now - baseline} more than its baseline ${baseline}`,
      );
    await new Promise((r) => setTimeout(r, 50));
  }
}
