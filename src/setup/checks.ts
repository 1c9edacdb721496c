import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { detectCgroups } from "../jail/cgroup.js";
import { findRootfs } from "../images/locate.js";
import { AGENT_DIR } from "./engine-factory.js";

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
    check("kvm", false, () => {
      const ok = existsSync("/dev/kvm");
      return {
        ok,
        detail: ok
          ? "/dev/kvm present: microvm runs hardware-virtualised"
          : "no /dev/kvm: microvm would run under TCG (slower, QEMU is then not a boundary)",
        fix: "enable virtualisation for this host (nested virt in a cloud VM) and load kvm_intel or kvm_amd",
      };
    }),
    check("qemu", false, () => ({
      ok: existsSync("/usr/bin/qemu-system-x86_64"),
      detail: existsSync("/usr/bin/qemu-system-x86_64")
        ? "/usr/bin/qemu-system-x86_64"
        : "not found (needed by the microvm backend)",
      fix: apt("qemu-system-x86"),
    })),
    check("nftables", false, () => ({
      ok: existsSync("/usr/sbin/nft"),
      detail: existsSync("/usr/sbin/nft")
        ? "/usr/sbin/nft"
        : "not found (needed for network: public)",
      fix: apt("nftables"),
    })),
  ];
}
