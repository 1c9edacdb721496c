/**
 * One cgroup per sandbox, over cgroup v1 or v2 behind the same small interface.
 *
 * Layout: <hierarchy>/<parentName>/<sandbox id> in every hierarchy we use (v1: memory, pids, cpu,
 * and freezer for a cgroup made freezable; v2: one directory). The jailed wrapper writes its own pid into every `procsFiles` entry before
 * it execs, so nothing the sandbox starts ever runs outside its limits.
 */
import { mkdir, readFile, readdir, rmdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { ScratchRunError } from "../errors.js";
import { assertCgroupName, isValidCgroupName, type CgroupHost } from "./cgroup-detect.js";
import {
  cpuWeightFile,
  parseFlatKeyed,
  parsePids,
  planCgroupFiles,
  type CgroupController,
  type CgroupLimits,
} from "./cgroup-plan.js";

export { detectCgroups, parseCgroupMounts, DEFAULT_PARENT_NAME } from "./cgroup-detect.js";
export type { CgroupHost, CgroupMount, DetectOptions } from "./cgroup-detect.js";
export { planCgroupFiles, CPU_WEIGHT } from "./cgroup-plan.js";
export type { CgroupLimits, CgroupFileWrite, CgroupVersion, CpuPriority } from "./cgroup-plan.js";

export interface CgroupStats {
  /** Highest memory charge seen (v1 memory.max_usage_in_bytes, v2 memory.peak; 0 if unknown). */
  memoryPeakBytes: number;
  /** Memory charged now (v1 memory.usage_in_bytes, v2 memory.current; 0 if unknown). */
  memoryBytes: number;
  /** Processes the kernel OOM-killed in this cgroup. */
  oomKills: number;
  pidsCurrent?: number;
}

export interface Cgroup {
  readonly name: string;
  /** The sandbox's directory in every hierarchy. */
  readonly dirs: string[];
  /** Files a wrapper writes its own pid into, before exec, to enter every hierarchy. */
  readonly procsFiles: string[];
  stats(): Promise<CgroupStats>;
  /** Every pid in the cgroup (all hierarchies, nested cgroups included), sorted. */
  pids(): Promise<number[]>;
  /** SIGKILLs everything inside and waits until the cgroup is empty (bounded). */
  killAll(): Promise<void>;
  /** killAll, then removes every directory. Idempotent. */
  destroy(): Promise<void>;
  /** Sets the CPU weight (cgroup-plan's CPU_WEIGHT); a host without the cpu controller: no-op. */
  setCpuWeight(weight: number): Promise<void>;
  /**
   * Stops every process inside (the cgroup freezer: v1 `freezer.state`, v2 `cgroup.freeze`) and
   * waits until the kernel says all are frozen (bounded). False when this cgroup cannot be frozen
   * (not made freezable, no freezer on the host) or did not freeze in time.
   */
  freeze(): Promise<boolean>;
  /** Lets the processes run again; a cgroup that is not frozen: no-op. killAll thaws first. */
  thaw(): Promise<void>;
}

/** createCgroup's options beyond the limits. */
export interface CgroupOptions {
  /** Also join the v1 freezer hierarchy, so freeze() can stop it (v2: every cgroup can). */
  freezable?: boolean;
}

/** How long freeze() waits for the kernel to report the cgroup frozen. */
const FREEZE_BOUND_MS = 5_000;
/** How long killAll keeps trying before it reports processes it could not kill. */
const KILL_BOUND_MS = 10_000;
/** killAll re-checks after 1 ms, then backs off to this: SIGKILLed processes exit in about 1 ms. */
const KILL_POLL_MS = 10;

const isErrno = (e: unknown, code: string) =>
  typeof e === "object" && e !== null && (e as { code?: unknown }).code === code;

async function readOptional(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, "utf8");
  } catch (e) {
    if (isErrno(e, "ENOENT")) return undefined;
    throw e;
  }
}

/** Writes an existing cgroup file (never creates one); ENOENT means the kernel lacks it. */
const writeCgroupFile = (path: string, value: string) => writeFile(path, value, { flag: "r+" });

function controllerDirs(host: CgroupHost): Map<CgroupController, string> {
  const { memory, pids, cpu } = host.hierarchies;
  const m = new Map<CgroupController, string>([
    ["memory", memory],
    ["pids", pids],
  ]);
  if (cpu) m.set("cpu", cpu);
  return m;
}

/** Every hierarchy a sandbox cgroup may have a directory in (the v1 freezer too). */
const uniqueMounts = (host: CgroupHost) => [
  ...new Set([
    ...controllerDirs(host).values(),
    ...(host.hierarchies.freezer ? [host.hierarchies.freezer] : []),
  ]),
];
const parentDirs = (host: CgroupHost) => uniqueMounts(host).map((m) => join(m, host.parentName));

const preparedParents = new WeakSet<CgroupHost>();

/** Creates <hierarchy>/<parent> everywhere; on v2 also delegates the controllers down to it. */
async function prepareParents(host: CgroupHost): Promise<void> {
  if (preparedParents.has(host)) return;
  const wanted = ["memory", "pids", ...(host.hierarchies.cpu ? ["cpu"] : [])];
  for (const dir of parentDirs(host)) await mkdir(dir, { recursive: true });
  if (host.version === 2) {
    const root = host.hierarchies.memory;
    for (const dir of [root, join(root, host.parentName)]) {
      for (const c of wanted) {
        try {
          await writeCgroupFile(join(dir, "cgroup.subtree_control"), `+${c}`);
        } catch (cause) {
          throw new ScratchRunError(
            "NOT_READY",
            `cannot enable the cgroup v2 ${c} controller in ${dir}`,
            {
              cause,
              fix:
                "Run as root with a writable /sys/fs/cgroup; if this is a container whose root " +
                "cgroup holds processes, move them into a child cgroup first " +
                "(mkdir /sys/fs/cgroup/init && echo $$ > /sys/fs/cgroup/init/cgroup.procs)",
            },
          );
        }
      }
    }
  }
  preparedParents.add(host);
}

/** Every cgroup directory at and below `dir`, deepest first; [] if `dir` is gone. */
async function treeDeepestFirst(dir: string): Promise<string[]> {
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch (e) {
    if (isErrno(e, "ENOENT")) return [];
    throw e;
  }
  const out: string[] = [];
  for (const e of entries)
    if (e.isDirectory()) out.push(...(await treeDeepestFirst(join(dir, e.name))));
  out.push(dir);
  return out;
}

/** Every pid in these cgroups and their children; the reads at once (a call waits on them). */
async function readPids(dirs: readonly string[]): Promise<number[]> {
  const trees = await Promise.all(dirs.map((top) => treeDeepestFirst(top)));
  const texts = await Promise.all(
    trees.flat().map((dir) => readOptional(join(dir, "cgroup.procs"))),
  );
  const all = new Set<number>();
  for (const text of texts) for (const pid of parsePids(text ?? "")) all.add(pid);
  return [...all].sort((a, b) => a - b);
}

function openCgroup(host: CgroupHost, name: string, freezable: boolean): Cgroup {
  assertCgroupName(name, "name");
  const byController = new Map<CgroupController, string>();
  for (const [c, mount] of controllerDirs(host))
    byController.set(c, join(mount, host.parentName, name));
  const memoryDir = join(host.hierarchies.memory, host.parentName, name);
  const pidsDir = join(host.hierarchies.pids, host.parentName, name);
  // v1: a directory in the freezer hierarchy, for a cgroup made freezable; v2: the cgroup itself.
  const freezerDir =
    host.version === 2
      ? memoryDir
      : freezable && host.hierarchies.freezer
        ? join(host.hierarchies.freezer, host.parentName, name)
        : null;
  const dirs = [
    ...new Set([
      ...byController.values(),
      ...(host.version === 1 && freezerDir ? [freezerDir] : []),
    ]),
  ];

  const freeze = async (): Promise<boolean> => {
    if (freezerDir === null) return false;
    const [file, value] = host.version === 2 ? ["cgroup.freeze", "1"] : ["freezer.state", "FROZEN"];
    try {
      await writeCgroupFile(join(freezerDir, file), value);
    } catch {
      return false; // a v2 kernel before 5.2 has no cgroup.freeze
    }
    const deadline = Date.now() + FREEZE_BOUND_MS;
    for (let poll = 1; ; poll = Math.min(KILL_POLL_MS, poll * 2)) {
      if (await isFrozen(host, freezerDir)) return true;
      if (Date.now() > deadline) return false;
      // v1 stays FREEZING while a task cannot be stopped yet; writing FROZEN again retries it.
      if (host.version === 1) await writeCgroupFile(join(freezerDir, file), value).catch(() => {});
      await sleep(poll);
    }
  };

  const thaw = async (): Promise<void> => {
    if (freezerDir === null) return;
    const [file, value] = host.version === 2 ? ["cgroup.freeze", "0"] : ["freezer.state", "THAWED"];
    await writeCgroupFile(join(freezerDir, file), value).catch((e: unknown) => {
      if (!isErrno(e, "ENOENT")) throw e;
    });
  };

  const killAll = async (): Promise<void> => {
    // No new processes from here on: a fork bomb cannot outrun the kill loop.
    for (const dir of await treeDeepestFirst(pidsDir)) {
      await writeCgroupFile(join(dir, "pids.max"), "0").catch(() => {});
    }
    // A frozen v1 task does not act on SIGKILL until it is thawed (v2's does): thaw first.
    await thaw().catch(() => {});
    if (host.version === 2) {
      await writeCgroupFile(join(memoryDir, "cgroup.kill"), "1").catch(() => {});
    }
    const deadline = Date.now() + KILL_BOUND_MS;
    for (let poll = 1; ; poll = Math.min(KILL_POLL_MS, poll * 2)) {
      const pids = await readPids(dirs);
      if (pids.length === 0) return;
      if (Date.now() > deadline) {
        throw new ScratchRunError(
          "SANDBOX_FAILED",
          `cgroup ${name} still holds pids ${pids.slice(0, 10).join(",")} after SIGKILL`,
        );
      }
      for (const pid of pids) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // ESRCH: already gone.
        }
      }
      await sleep(poll);
    }
  };

  let destroyed = false;
  const destroy = async (): Promise<void> => {
    if (destroyed) return;
    await killAll();
    const deadline = Date.now() + KILL_BOUND_MS;
    for (const top of dirs) {
      for (const dir of await treeDeepestFirst(top)) {
        for (;;) {
          try {
            await rmdir(dir);
            break;
          } catch (e) {
            if (isErrno(e, "ENOENT")) break;
            // EBUSY: the last task is still being torn down by the kernel.
            if (!isErrno(e, "EBUSY") || Date.now() > deadline) throw e;
            await sleep(KILL_POLL_MS);
          }
        }
      }
    }
    destroyed = true;
  };

  const stats = async (): Promise<CgroupStats> => {
    const num = async (dir: string, file: string) => {
      const t = await readOptional(join(dir, file));
      return t !== undefined && /^\d+$/.test(t.trim()) ? Number(t.trim()) : undefined;
    };
    // Read at once: each read is a thread-pool round trip, and a call waits for these.
    if (host.version === 2) {
      const [pidsCurrent, events, peak, current] = await Promise.all([
        num(pidsDir, "pids.current"),
        readOptional(join(memoryDir, "memory.events")),
        num(memoryDir, "memory.peak"),
        num(memoryDir, "memory.current"),
      ]);
      return {
        memoryPeakBytes: peak ?? 0,
        memoryBytes: current ?? 0,
        oomKills: parseFlatKeyed(events ?? "").get("oom_kill") ?? 0,
        ...(pidsCurrent !== undefined ? { pidsCurrent } : {}),
      };
    }
    const [pidsCurrent, oomText, peak, current] = await Promise.all([
      num(pidsDir, "pids.current"),
      readOptional(join(memoryDir, "memory.oom_control")),
      num(memoryDir, "memory.max_usage_in_bytes"),
      num(memoryDir, "memory.usage_in_bytes"),
    ]);
    const oom = parseFlatKeyed(oomText ?? "");
    // Kernels before 4.13 have no oom_kill count: a task stuck at the limit is the best hint.
    const oomKills =
      oom.get("oom_kill") ??
      ((oom.get("under_oom") ?? 0) > 0 || ((await num(memoryDir, "memory.memsw.failcnt")) ?? 0) > 0
        ? 1
        : 0);
    return {
      memoryPeakBytes: peak ?? 0,
      memoryBytes: current ?? 0,
      oomKills,
      ...(pidsCurrent !== undefined ? { pidsCurrent } : {}),
    };
  };

  const setCpuWeight = async (weight: number): Promise<void> => {
    const step = cpuWeightFile(host.version, weight);
    const dir = byController.get("cpu");
    if (dir !== undefined) await writeCgroupFile(join(dir, step.file), step.value);
  };

  return {
    name,
    dirs,
    procsFiles: dirs.map((d) => join(d, "cgroup.procs")),
    stats,
    pids: () => readPids(dirs),
    killAll,
    destroy,
    setCpuWeight,
    freeze,
    thaw,
  };
}

/** Whether the kernel reports a cgroup's every task frozen (v1 freezer.state, v2 cgroup.events). */
async function isFrozen(host: CgroupHost, dir: string): Promise<boolean> {
  if (host.version === 1)
    return (await readOptional(join(dir, "freezer.state")))?.trim() === "FROZEN";
  const events = parseFlatKeyed((await readOptional(join(dir, "cgroup.events"))) ?? "");
  return events.get("frozen") === 1;
}

/**
 * Creates <hierarchy>/<parent>/<name> in every hierarchy and writes its limits. Fails (and
 * removes what it made) if the name is taken or a required limit file cannot be written.
 */
export async function createCgroup(
  host: CgroupHost,
  name: string,
  limits: CgroupLimits,
  options: CgroupOptions = {},
): Promise<Cgroup> {
  assertCgroupName(name, "name");
  const plan = planCgroupFiles(host.version, limits, { canLimitSwap: host.canLimitSwap });
  await prepareParents(host);
  const cgroup = openCgroup(host, name, options.freezable ?? false);
  const made: string[] = [];
  try {
    for (const dir of cgroup.dirs) {
      await mkdir(dir);
      made.push(dir);
    }
    const dirOf = new Map<CgroupController, string>();
    for (const [c, mount] of controllerDirs(host)) dirOf.set(c, join(mount, host.parentName, name));
    for (const step of plan) {
      const dir = dirOf.get(step.controller);
      if (dir === undefined) continue; // cpu hierarchy absent: reported by detectCgroups warnings.
      try {
        await writeCgroupFile(join(dir, step.file), step.value);
      } catch (e) {
        if (step.optional && isErrno(e, "ENOENT")) continue;
        throw e;
      }
    }
    return cgroup;
  } catch (cause) {
    for (const dir of made.reverse()) await rmdir(dir).catch(() => {});
    throw new ScratchRunError("SANDBOX_FAILED", `cannot create cgroup ${name}`, { cause });
  }
}

/** Absolute directory of every cgroup under the parent, in every hierarchy. */
export async function listScratchrunCgroups(host: CgroupHost): Promise<string[]> {
  const out: string[] = [];
  for (const parent of parentDirs(host)) {
    try {
      for (const e of await readdir(parent, { withFileTypes: true })) {
        if (e.isDirectory()) out.push(join(parent, e.name));
      }
    } catch (e) {
      if (!isErrno(e, "ENOENT")) throw e;
    }
  }
  return out.sort();
}

/** Sandbox names with a cgroup left in any hierarchy (at server start: all of them are orphans). */
export async function listOrphanCgroups(host: CgroupHost): Promise<string[]> {
  const names = (await listScratchrunCgroups(host)).map((d) => d.slice(d.lastIndexOf("/") + 1));
  return [...new Set(names)].sort();
}

/** Kills and removes every leftover sandbox cgroup; returns the names it reaped. */
export async function reapOrphans(host: CgroupHost): Promise<string[]> {
  // A name we would never create (a foreign directory) is left alone rather than guessed at.
  const names = (await listOrphanCgroups(host)).filter((n) => isValidCgroupName(n));
  for (const name of names) await openCgroup(host, name, true).destroy();
  return names;
}

/** Removes the empty parent directories (uninstall, tests). Fails if a sandbox cgroup remains. */
export async function removeCgroupParents(host: CgroupHost): Promise<void> {
  for (const dir of parentDirs(host)) {
    await rmdir(dir).catch((e: unknown) => {
      if (!isErrno(e, "ENOENT")) throw e;
    });
  }
  preparedParents.delete(host);
}

/**
 * Removes sandbox cgroups that are empty now and still empty `recheckMs` later: what a server
 * that died (crash, kill -9) leaves once bwrap --die-with-parent has taken its processes,
 * recorded or not. A live sandbox's cgroup is populated within milliseconds of its creation and
 * removed as quickly once emptied, so one empty across the recheck belongs to no live server (if
 * another server is removing it at the same moment, one of the two rmdirs finds it gone).
 * Returns the directories removed.
 */
export async function reapStaleEmptyCgroups(host: CgroupHost, recheckMs = 1000): Promise<string[]> {
  const isEmpty = async (dir: string) =>
    (await readFile(join(dir, "cgroup.procs"), "utf8").catch(() => "x")).trim() === "";
  const empty: string[] = [];
  for (const dir of await listScratchrunCgroups(host)) if (await isEmpty(dir)) empty.push(dir);
  if (empty.length === 0) return [];
  await sleep(recheckMs);
  const removed: string[] = [];
  for (const dir of empty) {
    try {
      if (!(await isEmpty(dir))) continue;
      await rmdir(dir);
      removed.push(dir);
    } catch {
      // raced with its owner or another reaper: leave it
    }
  }
  return removed;
}
