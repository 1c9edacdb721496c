import { existsSync, readFileSync, statfsSync } from "node:fs";
import { join } from "node:path";
import { detectCgroups } from "../jail/cgroup.js";
import { findRootfs } from "../images/locate.js";

import { imagesDir } from "../images/paths.js";
import { DEFAULT_UPLINK } from "../net/index.js";
import { detectAccel } from "../backends/microvm/accel.js";
import { buildVmArtifacts } from "../backends/microvm/build.js";
import { AGENT_DIR } from "./engine-factory.js";
import { egressBlocker } from "./network.js";

export interface Check {
  name: string;
  ok: boolean;
  required: boolean;
  detail: string;
  fix?: string;
}

function check(
  name: string,
  required: boolean,
  fn: () => { ok: boolean; detail: string; fix?: string },
): Check {
  try {
    return { name, required, ...fn() };
  } catch (e) {
    return { name, required, ok: false, detail: e instanceof Error ? e.message : String(e) };
  }
}

/** What this host can do. Each failed check carries the exact command that fixes it. */
export async function runChecks(env: NodeJS.ProcessEnv = process.env): Promise<Check[]> {
  const apt = (pkg: string) => `apt-get install -y ${pkg}`;
  return [
    check("root", true, () => ({
      ok: process.getuid?.() === 0,
      detail: `running as uid ${process.getuid?.()}`,
      fix: "run ScratchRun as root (cgroups, per-sandbox uids and network namespaces need it)",
    })),
    check("node", true, () => ({
      ok: Number(process.versions.node.split(".")[0]) >= 20,
      detail: `Node.js ${process.versions.node}`,
      fix: "install Node.js 20 or newer",
    })),
    check("bubblewrap", true, () => ({
      ok: existsSync("/usr/bin/bwrap"),
      detail: existsSync("/usr/bin/bwrap") ? "/usr/bin/bwrap" : "not found",
      fix: apt("bubblewrap"),
    })),
    check("user namespaces", true, () => {
      const max = Number(readFileSync("/proc/sys/user/max_user_namespaces", "utf8").trim());
      return {
        ok: max > 0,
        detail: `user.max_user_namespaces = ${max}`,
        fix: "sysctl -w user.max_user_namespaces=65536",
      };
    }),
    check("cgroups", true, () => {
      const host = detectCgroups();
      return { ok: true, detail: `cgroup v${host.version}` };
    }),
    check("agent", true, () => ({
      ok: existsSync(join(AGENT_DIR, "agent")),
      detail: join(AGENT_DIR, "agent"),
      fix: "npm run build (needs gcc and libc6-dev)",
    })),
    check("runtime image", true, () => {
      const r = findRootfs(env);
      if (!r.ok) return { ok: false, detail: r.error, fix: "npm run setup" };
      const versions = Object.entries(r.manifest.runtimes)
        .map(([name, info]) => `${name} ${info.version}`)
        .join(", ");
      return { ok: true, detail: `${r.dir} (${versions})` };
    }),
    await kvmCheck(),
    check("qemu", false, () => ({
      ok: existsSync("/usr/bin/qemu-system-x86_64"),
      detail: existsSync("/usr/bin/qemu-system-x86_64")
        ? "/usr/bin/qemu-system-x86_64"
        : "not found (needed by the microvm backend)",
      fix: apt("qemu-system-x86"),
    })),
    check("network egress", false, () => {
      if (env.SCRATCHRUN_NETWORK === "none")
        return { ok: true, detail: "disabled by SCRATCHRUN_NETWORK=none" };
      const blocker = egressBlocker({
        ...DEFAULT_UPLINK,
        enableForwarding: env.SCRATCHRUN_ENABLE_FORWARDING === "1",
      });
      return blocker
        ? { ok: false, detail: `calls get network "none": ${blocker.problem}`, fix: blocker.fix }
        : { ok: true, detail: 'network "public" available (nftables, forwarding on)' };
    }),
    check("disk", true, () => {
      let dir = imagesDir(env);
      while (!existsSync(dir)) dir = join(dir, "..");
      const st = statfsSync(dir);
      const freeGb = (st.bavail * st.bsize) / 1e9;
      return {
        ok: freeGb > 2,
        detail: `${freeGb.toFixed(1)} GB free at ${dir} (the runtime image needs ~1 GB, its build ~2 GB)`,
        fix: "free disk space or set SCRATCHRUN_IMAGES to a larger disk",
      };
    }),
  ];
}

/** KVM as the microvm backend will really use it: the device opens and a probe guest boots. */
async function kvmCheck(): Promise<Check> {
  const name = "kvm";
  if (!existsSync("/dev/kvm"))
    return {
      name,
      required: false,
      ok: false,
      detail:
        "no /dev/kvm: the microvm backend runs under TCG (slower; QEMU is then not a boundary, the jail around it is)",
      fix: "enable virtualisation for this host (nested virtualisation on a cloud VM) and load kvm_intel or kvm_amd",
    };
  try {
    const artifacts = buildVmArtifacts();
    const accel = await detectAccel(artifacts.kernel, artifacts.initramfs);
    return accel === "kvm"
      ? {
          name,
          required: false,
          ok: true,
          detail: "/dev/kvm works: microvm runs hardware-virtualised",
        }
      : {
          name,
          required: false,
          ok: false,
          detail:
            "/dev/kvm is present but a probe guest did not boot under KVM: the microvm backend uses TCG",
          fix: "check the host's KVM (nested virtualisation, MSR support); SCRATCHRUN_ACCEL=kvm forces it",
        };
  } catch (e) {
    return {
      name,
      required: false,
      ok: false,
      detail: `cannot probe KVM: ${(e as Error).message}`,
    };
  }
}
