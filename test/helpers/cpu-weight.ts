/**
 * The CPU weight a host process runs at, read from its cgroup as the kernel holds it: v2
 * `cpu.weight`, v1 `cpu.shares` mapped back to v2's scale (1024 → 100). For the tests that check
 * a pooled sandbox waits at the background weight and a call's runs at a call's.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { detectCgroups } from "../../src/jail/cgroup.js";

export function cpuWeightOfPid(pid: number): number {
  const host = detectCgroups();
  const cpuMount = host.hierarchies.cpu;
  if (!cpuMount) throw new Error("this host's cgroups have no cpu controller");
  const lines = readFileSync(`/proc/${pid}/cgroup`, "utf8").trim().split("\n");
  const line = lines.find((l) => {
    const [, controllers] = l.split(":");
    return host.version === 2 ? controllers === "" : controllers?.split(",").includes("cpu");
  });
  const path = line?.split(":").slice(2).join(":");
  if (!path) throw new Error(`pid ${pid} has no cpu cgroup: ${lines.join(" | ")}`);
  const dir = join(cpuMount, path);
  if (host.version === 2) return Number(readFileSync(join(dir, "cpu.weight"), "utf8").trim());
  return Math.round((Number(readFileSync(join(dir, "cpu.shares"), "utf8").trim()) * 100) / 1024);
}

/** The CPU weight of every sandbox cgroup of this host now, by name (v1 shares mapped as above). */
export function sandboxCgroupWeights(): Map<string, number> {
  const host = detectCgroups();
  const cpuMount = host.hierarchies.cpu;
  if (!cpuMount) throw new Error("this host's cgroups have no cpu controller");
  const parent = join(cpuMount, host.parentName);
  const out = new Map<string, number>();
  for (const name of readdirSync(parent, { withFileTypes: true })) {
    if (!name.isDirectory()) continue;
    try {
      const dir = join(parent, name.name);
      out.set(
        name.name,
        host.version === 2
          ? Number(readFileSync(join(dir, "cpu.weight"), "utf8").trim())
          : Math.round((Number(readFileSync(join(dir, "cpu.shares"), "utf8").trim()) * 100) / 1024),
      );
    } catch {
      // removed meanwhile
    }
  }
  return out;
}
