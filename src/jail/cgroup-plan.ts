/**
 * What a sandbox cgroup's limit files are set to, per cgroup version. Pure, so the v2 plan is
 * tested on hosts that only run v1 (and the other way round).
 */

export type CgroupVersion = 1 | 2;
export type CgroupController = "memory" | "pids" | "cpu";

export interface CgroupLimits {
  /** Hard memory limit; swap is never allowed on top of it. */
  memoryBytes: number;
  /** Processes and threads together. */
  pids: number;
  /** CPU time per wall time, percent of one core (100 = one full core). Omitted: unlimited. */
  cpuQuotaPercent?: number;
  /**
   * Share of contended CPU against sibling sandboxes, on cgroup v2's scale (1..10000, the
   * kernel's default 100). Omitted: the kernel's default.
   */
  cpuWeight?: number;
}

/**
 * The CPU weights sandboxes run at (siblings under the one parent cgroup). A sandbox started
 * ahead of time (a pooled one, a snapshot template) runs at BACKGROUND until a call takes it, so
 * warm-up work gets what calls leave of the CPUs (issue 30).
 */
export const CPU_WEIGHT = { call: 100, background: 10 } as const;
export type CpuPriority = keyof typeof CPU_WEIGHT;

export interface CgroupFileWrite {
  /** Hierarchy the file lives in (v2: all in the same directory). */
  controller: CgroupController;
  file: string;
  value: string;
  /** Skip silently when the kernel does not have this file (older kernel, no swap accounting). */
  optional?: true;
}

export interface PlanOptions {
  /** v1: memory.memsw.* exists (swap accounting on). Without it, swappiness=0 is the fallback. */
  canLimitSwap?: boolean;
}

export const CPU_PERIOD_US = 100_000;
const MIN_MEMORY_BYTES = 4 * 1024 * 1024;
const MAX_PIDS = 4_194_304;

/** Throws on limits no caller should ever pass (the request schema bounds user input first). */
export function validateCgroupLimits(limits: CgroupLimits): void {
  const { memoryBytes, pids, cpuQuotaPercent } = limits;
  if (!Number.isSafeInteger(memoryBytes) || memoryBytes < MIN_MEMORY_BYTES) {
    throw new RangeError(
      `cgroup memoryBytes must be an integer >= ${MIN_MEMORY_BYTES}: ${memoryBytes}`,
    );
  }
  if (!Number.isSafeInteger(pids) || pids < 1 || pids > MAX_PIDS) {
    throw new RangeError(`cgroup pids must be an integer in 1..${MAX_PIDS}: ${pids}`);
  }
  if (limits.cpuWeight !== undefined) assertCpuWeight(limits.cpuWeight);
  if (
    cpuQuotaPercent !== undefined &&
    (!Number.isFinite(cpuQuotaPercent) || cpuQuotaPercent < 1 || cpuQuotaPercent > 100 * 1024)
  ) {
    throw new RangeError(`cgroup cpuQuotaPercent must be in 1..102400: ${cpuQuotaPercent}`);
  }
}

function assertCpuWeight(weight: number): void {
  if (!Number.isSafeInteger(weight) || weight < 1 || weight > 10_000)
    throw new RangeError(`cgroup cpuWeight must be an integer in 1..10000: ${weight}`);
}

/**
 * The file that sets a CPU weight: v2 `cpu.weight` as given; v1 `cpu.shares` on its own scale
 * (default 1024 where v2's is 100; at least 2, the kernel's minimum).
 */
export function cpuWeightFile(version: CgroupVersion, weight: number): CgroupFileWrite {
  assertCpuWeight(weight);
  return version === 2
    ? { controller: "cpu", file: "cpu.weight", value: String(weight) }
    : {
        controller: "cpu",
        file: "cpu.shares",
        value: String(Math.max(2, Math.round((weight * 1024) / 100))),
      };
}

/** The files to write, in order, right after the sandbox's cgroup directories are created. */
export function planCgroupFiles(
  version: CgroupVersion,
  limits: CgroupLimits,
  options: PlanOptions = {},
): CgroupFileWrite[] {
  validateCgroupLimits(limits);
  const memory = String(limits.memoryBytes);
  const quotaUs =
    limits.cpuQuotaPercent === undefined
      ? undefined
      : String(Math.max(1000, Math.round((limits.cpuQuotaPercent / 100) * CPU_PERIOD_US)));
  const plan: CgroupFileWrite[] = [];
  if (version === 1) {
    // memsw must stay >= limit_in_bytes, so the plain limit goes first.
    plan.push({ controller: "memory", file: "memory.limit_in_bytes", value: memory });
    if (options.canLimitSwap ?? true) {
      plan.push({ controller: "memory", file: "memory.memsw.limit_in_bytes", value: memory });
    } else {
      plan.push({ controller: "memory", file: "memory.swappiness", value: "0" });
    }
    plan.push({ controller: "pids", file: "pids.max", value: String(limits.pids) });
    if (quotaUs !== undefined) {
      plan.push({ controller: "cpu", file: "cpu.cfs_period_us", value: String(CPU_PERIOD_US) });
      plan.push({ controller: "cpu", file: "cpu.cfs_quota_us", value: quotaUs });
    }
  } else {
    plan.push({ controller: "memory", file: "memory.max", value: memory });
    plan.push({ controller: "memory", file: "memory.swap.max", value: "0", optional: true });
    plan.push({ controller: "memory", file: "memory.oom.group", value: "1", optional: true });
    plan.push({ controller: "pids", file: "pids.max", value: String(limits.pids) });
    if (quotaUs !== undefined) {
      plan.push({ controller: "cpu", file: "cpu.max", value: `${quotaUs} ${CPU_PERIOD_US}` });
    }
  }
  if (limits.cpuWeight !== undefined) plan.push(cpuWeightFile(version, limits.cpuWeight));
  return plan;
}

/** Parses `memory.events` (v2) or `memory.oom_control` (v1): "key value" per line. */
export function parseFlatKeyed(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    const [key, value, extra] = line.trim().split(/\s+/);
    if (key && value !== undefined && extra === undefined && /^\d+$/.test(value)) {
      out.set(key, Number(value));
    }
  }
  return out;
}

/** Parses cgroup.procs: one pid per line. */
export function parsePids(text: string): number[] {
  return text
    .split("\n")
    .filter((l) => /^\d+$/.test(l.trim()))
    .map((l) => Number(l.trim()));
}
