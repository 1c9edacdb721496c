/**
 * Which cgroup version this host runs and where each controller we need is mounted.
 * v2 wins when its root has memory and pids; otherwise the v1 memory and pids hierarchies are used
 * (a hybrid host's empty v2 mount at /sys/fs/cgroup/unified is ignored).
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ScratchRunError } from "../errors.js";
import type { CgroupController, CgroupVersion } from "./cgroup-plan.js";

export interface CgroupHost {
  readonly version: CgroupVersion;
  /** Mount point of each controller's hierarchy (v2: the same directory for all three). */
  readonly hierarchies: {
    readonly memory: string;
    readonly pids: string;
    readonly cpu?: string;
    /** v1 only: the freezer hierarchy (v2 freezes with each cgroup's own `cgroup.freeze`). */
    readonly freezer?: string;
  };
  /** Directory name, in every hierarchy, that holds all sandbox cgroups ("scratchrun"). */
  readonly parentName: string;
  /** Swap can be forbidden (v1 memsw files, v2 memory.swap.max); else swappiness=0 is used. */
  readonly canLimitSwap: boolean;
  /** Weaker-than-ideal facts an operator should know (shown by `scratchrun doctor`). */
  readonly warnings: readonly string[];
}

export interface CgroupMount {
  version: CgroupVersion;
  mountPoint: string;
  /** v1: controllers bound to this hierarchy (from the super options). v2: empty here. */
  controllers: string[];
}

const V1_CONTROLLERS = new Set(["memory", "pids", "cpu", "cpuacct", "cpuset", "freezer", "blkio"]);

/** `\040`-style octal escapes in /proc/self/mountinfo paths. */
const unescapeMountPath = (p: string) =>
  p.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));

/** Every cgroup / cgroup2 mount listed in a /proc/self/mountinfo text. */
export function parseCgroupMounts(mountinfo: string): CgroupMount[] {
  const mounts: CgroupMount[] = [];
  for (const line of mountinfo.split("\n")) {
    const sep = line.indexOf(" - ");
    if (sep < 0) continue;
    const left = line.slice(0, sep).split(" ");
    const [fstype, , superOptions = ""] = line.slice(sep + 3).split(" ");
    const mountPoint = left[4];
    if (mountPoint === undefined) continue;
    if (fstype === "cgroup2") {
      mounts.push({ version: 2, mountPoint: unescapeMountPath(mountPoint), controllers: [] });
    } else if (fstype === "cgroup") {
      const controllers = superOptions.split(",").filter((o) => V1_CONTROLLERS.has(o));
      mounts.push({ version: 1, mountPoint: unescapeMountPath(mountPoint), controllers });
    }
  }
  return mounts;
}

export const DEFAULT_PARENT_NAME = "scratchrun";
const NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;

export const isValidCgroupName = (name: string) => NAME.test(name);

/** Sandbox and parent names become directory names: no dots, no slashes, nothing else. */
export function assertCgroupName(name: string, what: string): void {
  if (!NAME.test(name)) {
    throw new ScratchRunError("INTERNAL", `invalid cgroup ${what} ${JSON.stringify(name)}`);
  }
}

const readText = (path: string) => {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return "";
  }
};

export interface DetectOptions {
  parentName?: string;
  /** Text of /proc/self/mountinfo; read from the host when omitted. */
  mountinfo?: string;
}

export function detectCgroups(options: DetectOptions = {}): CgroupHost {
  const parentName = options.parentName ?? DEFAULT_PARENT_NAME;
  assertCgroupName(parentName, "parent name");
  const mounts = parseCgroupMounts(options.mountinfo ?? readText("/proc/self/mountinfo"));

  for (const m of mounts.filter((x) => x.version === 2)) {
    const available = readText(join(m.mountPoint, "cgroup.controllers")).trim().split(/\s+/);
    if (!available.includes("memory") || !available.includes("pids")) continue;
    const warnings = available.includes("cpu")
      ? []
      : ["cgroup v2 cpu controller unavailable: CPU quota is not enforced"];
    return {
      version: 2,
      hierarchies: {
        memory: m.mountPoint,
        pids: m.mountPoint,
        ...(available.includes("cpu") ? { cpu: m.mountPoint } : {}),
      },
      parentName,
      // memory.swap.max exists only in non-root cgroups; when swap accounting is off the plan
      // skips it, and a host without swap has nothing to limit.
      canLimitSwap: true,
      warnings,
    };
  }

  const v1 = (c: CgroupController | "freezer") =>
    mounts.find((m) => m.version === 1 && m.controllers.includes(c))?.mountPoint;
  const memory = v1("memory");
  const pids = v1("pids");
  const cpu = v1("cpu");
  const freezer = v1("freezer");
  const missing = [memory ? null : "memory", pids ? null : "pids"].filter(Boolean);
  if (!memory || !pids) {
    throw new ScratchRunError(
      "NOT_READY",
      `cgroup controller(s) ${missing.join(" and ")} not available (neither a cgroup v2 root with them nor a v1 hierarchy)`,
      {
        fix:
          "Boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2) or mount them, e.g. " +
          "`mkdir -p /sys/fs/cgroup/pids && mount -t cgroup -o pids cgroup /sys/fs/cgroup/pids`; " +
          "in a container, run it with --cgroupns=private and a writable /sys/fs/cgroup",
      },
    );
  }
  const canLimitSwap = existsSync(join(memory, "memory.memsw.limit_in_bytes"));
  const warnings: string[] = [];
  if (!canLimitSwap) {
    warnings.push(
      "cgroup v1 swap accounting is off (no memory.memsw.*): using memory.swappiness=0 instead; " +
        "boot with swapaccount=1 to forbid swap outright",
    );
  }
  if (!cpu) warnings.push("cgroup v1 cpu controller not mounted: CPU quota is not enforced");
  if (!freezer)
    warnings.push(
      "cgroup v1 freezer not mounted: a namespace session's processes are not frozen between its calls",
    );
  return {
    version: 1,
    hierarchies: { memory, pids, ...(cpu ? { cpu } : {}), ...(freezer ? { freezer } : {}) },
    parentName,
    canLimitSwap,
    warnings,
  };
}
