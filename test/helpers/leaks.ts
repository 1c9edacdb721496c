import { existsSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { join } from "node:path";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { descendants } from "./procs.js";

/**
 * An independent leak detector: it reads the host's own tables (not the product's bookkeeping)
 * for anything a sandbox could leave behind. Tests snapshot it before and assert after.
 */
export const SANDBOX_UID_MIN = 6_200_000;
export const SANDBOX_UID_MAX = 6_200_000 + 4096;
/** Host uids of egress proxy children (src/net/proxy/supervisor.ts). */
export const PROXY_UID_MIN = 6_200_000 + 2 * 4096 - 64;
export const PROXY_UID_MAX = 6_200_000 + 2 * 4096;

export interface HostSnapshot {
  sandboxProcesses: string[];
  /** Egress proxy children: one per server with an allowlist, gone when the server is. */
  proxyProcesses: string[];
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
    "/sys/fs/cgroup/freezer/scratchrun",
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
    proxyProcesses: procs
      .filter((p) => p.uid >= PROXY_UID_MIN && p.uid < PROXY_UID_MAX)
      .map((p) => `${p.pid} ${p.comm} uid=${p.uid}`),
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
/** Interpreters an idle pooled jail's agent pre-started (waiting for a call, guest/prestart.*). */
const PRESTARTED = /^(python3\.\d+|node)$/;

/**
 * The processes of a pooled jail still waiting for its call: bwrap, the agent and at most one
 * interpreter it pre-started; null when the cgroup is not a jail, has no agent (a used jail's
 * agent is gone) or holds anything else (a call's process, something a call left behind).
 */
function idleJailPids(dir: string): string[] | null {
  if (!/\/ns-[0-9a-f]+$/.test(dir)) return null;
  try {
    const pids = readFileSync(join(dir, "cgroup.procs"), "utf8").split("\n").filter(Boolean);
    const interpreters = pids.filter((pid) => PRESTARTED.test(comm(pid)));
    const prestarted =
      interpreters.length <= 1 &&
      interpreters.every((pid) => /\/opt\/scratchrun\/prestart\.(py|js)\b/.test(cmdline(pid)));
    const rest = pids.filter((pid) => !interpreters.includes(pid));
    // An idle jail's agent is still there (after a call it exits and the jail goes with it).
    const waiting = rest.some((pid) => comm(pid) === "agent");
    return prestarted && waiting && rest.every((pid) => /^(bwrap|agent)$/.test(comm(pid)))
      ? pids
      : null;
  } catch {
    return null;
  }
}

/** Whether a cgroup is a pooled sandbox waiting for its call (a microVM's, or an idle jail). */
export function isPooledSandbox(dir: string): boolean {
  return /\/vm-[0-9a-f]+$/.test(dir) || idleJailPids(dir) !== null;
}

/**
 * Fails when a sandbox of a call's own appeared since `before` (cgroups of a snapshot()), or a
 * pooled sandbox waiting then was taken. Pools refill and deepen in the background, and earlier
 * calls' cgroups are removed in the background: a cgroup that is new and still starting (a refill
 * pre-importing numpy, pandas and matplotlib on a loaded host) becomes a pooled sandbox within
 * seconds, so this watches what is new for up to `ms`; one that vanished or is not pooled was a
 * call's own. Cgroups that were there before and went are teardown, not a call.
 */
export async function assertNoCallSandbox(before: string[], ms = 20_000): Promise<void> {
  const old = new Set(before);
  const seen = new Set<string>();
  const deadline = Date.now() + ms;
  for (;;) {
    const fresh = snapshot().cgroups.filter((c) => !old.has(c));
    for (const c of fresh) seen.add(c);
    if (fresh.every(isPooledSandbox) || Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  const now = new Set(snapshot().cgroups);
  const own = [...seen].filter((c) => !now.has(c) || !isPooledSandbox(c));
  assert.deepEqual(own, [], "no sandbox was created");
  const pooledBefore = before.filter((c) => /\/ns-[0-9a-f]+$/.test(c) && isPooledSandbox(c));
  assert.deepEqual(
    pooledBefore.filter((c) => !now.has(c)),
    [],
    "no pooled jail was taken",
  );
}

function cmdline(pid: string): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replace(/\0/g, " ");
  } catch {
    return "";
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
 * cgroups; jails whose only processes are bwrap, the agent waiting at READY and the interpreter
 * it pre-started) is expected; the
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
      now.proxyProcesses = [];
      const idle = new Set<string>();
      now.cgroups = now.cgroups.filter((c) => {
        if (/\/vm-[0-9a-f]+$/.test(c)) return false;
        const pids = idleJailPids(c);
        for (const pid of pids ?? []) idle.add(pid);
        return pids === null;
      });
      now.sandboxProcesses = now.sandboxProcesses.filter(
        (p) => !/^\d+ (bwrap|agent) uid=/.test(p) && !idle.has(p.split(" ")[0]!),
      );
      // Pooled VMs' private socket dirs live as long as the server does.
      now.tmpEntries = now.tmpEntries.filter((t) => !/^scratchrun-vm-/.test(t));
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

/** Each connected unix socket's inode → its peer's, from the kernel's socket table (`ss`). */
function unixPeers(): Map<string, string> {
  const peers = new Map<string, string>();
  const out = spawnSync("ss", ["-xaH"], { encoding: "utf8" }).stdout ?? "";
  for (const line of out.split("\n")) {
    const f = line.trim().split(/\s+/);
    // netid state recv-q send-q local-address local-inode peer-address peer-inode
    if (f.length >= 8 && f.at(-1) !== "0") peers.set(`socket:[${f[5]}]`, `socket:[${f.at(-1)}]`);
  }
  return peers;
}

/**
 * The server's fds whose other end no live process below it holds: what is left once every
 * channel to a running child (a namespace jail's stdio, which Node makes as unix socket pairs, its
 * seccomp pipe, a command's output, the host monitor's) is set aside. Exact where the old count
 * (all fds less 3 per child) guessed: a child with fewer channels (the monitor holds one) or a jail
 * still holding its seccomp pipe no longer moves it. A descendant whose fds cannot be read (not
 * root) counts as holding 3.
 */
export function serverOwnFds(pid: number): string[] {
  const targets = (p: number): string[] | null => {
    try {
      return readdirSync(`/proc/${p}/fd`).map((fd) => {
        try {
          return readlinkSync(`/proc/${p}/fd/${fd}`);
        } catch {
          return "gone";
        }
      });
    } catch {
      return null;
    }
  };
  const mine = targets(pid) ?? [];
  const held = new Set<string>();
  let unreadable = 0;
  for (const d of descendants(pid)) {
    const t = targets(d);
    if (t === null) unreadable++;
    else for (const x of t) held.add(x);
  }
  const peers = unixPeers();
  const own = mine.filter((x) => !held.has(peers.get(x) ?? x)).sort();
  return own.slice(0, Math.max(0, own.length - 3 * unreadable));
}

/** What `now` holds that `base` does not, by kind ("pipe:[…]" → "pipe"), for a failure message. */
function extraFds(base: string[], now: string[]): string {
  const left = [...base];
  const extra: string[] = [];
  for (const x of now) {
    const i = left.indexOf(x);
    if (i >= 0) left.splice(i, 1);
    else extra.push(x);
  }
  return extra.join(", ");
}

/**
 * The server's own fds (serverOwnFds) come back to their baseline once its calls are done (polls:
 * a finished sandbox's pipes close asynchronously, and a jail the pool retires closes its pipes
 * when its teardown ends). A pipe whose other end is gone and that the server never closes stays
 * over for good and fails, naming the fds. Up to 10 s (CI's rehearsal of stop 60 saw a burst's
 * fds still over after 3 s under the whole suite's load).
 */
export async function assertServerFdsBack(
  own: () => string[],
  baseline: string[],
  waitMs = 10_000,
) {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const now = own();
    if (now.length <= baseline.length) return;
    if (Date.now() > deadline)
      assert.fail(
        `the server holds ${now.length} fds of its own, ${now.length - baseline.length} more than ` +
          `its baseline ${baseline.length}: ${extraFds(baseline, now)}`,
      );
    await new Promise((r) => setTimeout(r, 50));
  }
}
