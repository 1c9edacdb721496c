import { existsSync, readFileSync, statfsSync } from "node:fs";
import { join } from "node:path";
import { detectCgroups } from "../jail/cgroup.js";
import { IMAGE_CONFIG_ENV } from "../images/config.js";
import { selectRootfs, type SelectResult } from "../images/locate.js";

import { setupCommand } from "../images/paths.js";
import { DEFAULT_UPLINK } from "../net/index.js";
import { detectAccel } from "../backends/microvm/accel.js";
import { buildVmArtifacts } from "../images/vm/build.js";
import type { Manifest } from "../images/manifest.js";
import { noIndexReason } from "../images/wheel-cache.js";
import { EXTRAS, runtimeEntry } from "../runtimes/table.js";
import { RUNTIMES, type RuntimeName } from "../schema/exec.js";
import { AGENT_DIR, templateStoreFromEnv } from "../compose/engine-factory.js";
import { egressBlocker } from "../compose/network.js";
import { runCommand } from "../net/commands.js";
import { dockerUserChain, forwardChains, linkPattern } from "../net/forward-guard.js";
import { setting, settingOn } from "../schema/settings/read.js";
import { settingsFrom, type Settings } from "../schema/settings/values.js";

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

/** The Node.js that runs ScratchRun. */
export function nodeCheck(): Check {
  return check("node", true, () => ({
    ok: Number(process.versions.node.split(".")[0]) >= 20,
    detail: `Node.js ${process.versions.node}`,
    fix: "install Node.js 20 or newer",
  }));
}

/** What this host can do. Each failed check carries the exact command that fixes it. */
export async function runChecks(env: NodeJS.ProcessEnv = process.env): Promise<Check[]> {
  const apt = (pkg: string) => `apt-get install -y ${pkg}`;
  const settings = settingsFrom(env);
  let selected: SelectResult | undefined;
  const image = () => (selected ??= selectRootfs(settings.images));
  return [
    check("root", true, () => ({
      ok: process.getuid?.() === 0,
      detail: `running as uid ${process.getuid?.()}`,
      fix: "run ScratchRun as root (cgroups, per-sandbox uids and network namespaces need it)",
    })),
    nodeCheck(),
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
      fix: setupCommand(),
    })),
    check("runtime image", true, () => {
      const r = image();
      if (!r.ok) return { ok: false, detail: r.error, fix: setupCommand() };
      const versions = Object.entries(r.manifest.runtimes)
        .map(([name, info]) => `${name} ${info.version}`)
        .join(", ");
      return { ok: true, detail: `${r.dir} (${versions})` };
    }),
    check("image config", false, () => imageConfigCheck(env, image())),
    ...RUNTIMES.map((runtime) =>
      check(`runtime ${runtime}`, false, () => {
        const r = image();
        if (!r.ok) return { ok: false, detail: "no runtime image yet", fix: setupCommand() };
        return { ok: true, detail: runtimeContents(r.manifest, runtime) };
      }),
    ),
    check("python3.12 packages", false, () => {
      const r = image();
      if (!r.ok) return { ok: false, detail: "no runtime image yet", fix: setupCommand() };
      return python312PackagesCheck(r.manifest);
    }),
    check("python3.13 packages", false, () => {
      const r = image();
      if (!r.ok) return { ok: false, detail: "no runtime image yet", fix: setupCommand() };
      return python313PackagesCheck(r.manifest);
    }),
    await kvmCheck(settings),
    check("qemu", false, () => ({
      ok: existsSync("/usr/bin/qemu-system-x86_64"),
      detail: existsSync("/usr/bin/qemu-system-x86_64")
        ? "/usr/bin/qemu-system-x86_64"
        : "not found (needed by the microvm backend)",
      fix: apt("qemu-system-x86"),
    })),
    await keptTemplatesCheck(env),
    check("network egress", false, () => {
      if (setting("SCRATCHRUN_NETWORK", env) === "none")
        return { ok: true, detail: "disabled by SCRATCHRUN_NETWORK=none" };
      const blocker = egressBlocker({
        ...DEFAULT_UPLINK,
        enableForwarding: settingOn("SCRATCHRUN_ENABLE_FORWARDING", env),
      });
      if (blocker)
        return {
          ok: false,
          detail: `calls get network "none": ${blocker.problem}`,
          fix: blocker.fix,
        };
      const on = readFileSync("/proc/sys/net/ipv4/ip_forward", "utf8").trim() === "1";
      return {
        ok: true,
        detail: on
          ? 'network "public" available (nftables, forwarding on)'
          : 'network "public" available: forwarding is off, and the server turns it on at start, dropping forwarded traffic that is not a sandbox\'s (as dockerd does; SCRATCHRUN_ENABLE_FORWARDING=0 opts out)',
      };
    }),
    await forwardFirewallCheck(env),
    check("disk", true, () => {
      let dir = settings.images.dir;
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

/**
 * What one runtime of the image holds: its version and packages with versions, the operator's
 * additions marked (what `scratchrun_runtimes` lists, one runtime per line).
 */
export function runtimeContents(manifest: Manifest, runtime: RuntimeName): string {
  const info = manifest.runtimes[runtime];
  const extras = manifest.extras;
  const entry = runtimeEntry(runtime).extras;
  const inPackages = entry?.inPackages ?? true;
  const mine = (entry && extras?.[entry.key]) ?? {};
  const added = new Set(inPackages ? Object.keys(mine) : []);
  const pkgs = Object.entries(info.packages ?? {}).map(
    ([n, v]) => `${n} ${v}${added.has(n) ? " (image config)" : ""}`,
  );
  const debs =
    !inPackages && Object.keys(mine).length > 0
      ? `; from the image config: ${Object.entries(mine)
          .map(([n, v]) => `${n} ${v}`)
          .join(", ")}`
      : "";
  return `${info.version}${pkgs.length ? `; packages: ${pkgs.join(", ")}` : "; no packages beyond the runtime's own"}${debs}`;
}

/** Whether the served image is the image config's, and how to get there if not. */
export function imageConfigCheck(
  env: NodeJS.ProcessEnv,
  r: SelectResult,
): { ok: boolean; detail: string; fix?: string } {
  const path = setting(IMAGE_CONFIG_ENV, env);
  if (!r.ok)
    return path
      ? { ok: false, detail: `${path}: no image yet`, fix: "scratchrun image build (as root)" }
      : {
          ok: true,
          detail: `none (${IMAGE_CONFIG_ENV} or --image-config adds packages and files)`,
        };
  if (r.stale)
    return {
      ok: false,
      detail: r.stale,
      fix: `fix ${path ?? "the config"} if it is invalid, then scratchrun image build (as root)`,
    };
  const extras = r.manifest.extras;
  if (!extras)
    return {
      ok: true,
      detail: `none (${IMAGE_CONFIG_ENV} or --image-config adds packages and files)`,
    };
  const counts = EXTRAS.map(({ extras: { key, countLabel } }) => {
    return `${Object.keys(extras[key]).length} ${countLabel}`;
  });
  return {
    ok: true,
    detail: `${extras.config}: built; adds ${counts.slice(0, -1).join(", ")} and ${counts.at(-1)} package(s), ${extras.files.length} file entr${extras.files.length === 1 ? "y" : "ies"}`,
  };
}

/** The scientific stack python3.12 is meant to have, as the product page's example uses it. */
const PY312_STACK = ["numpy", "pandas", "matplotlib", "pillow", "scipy"];

/** Which of the stack's packages a Python runtime of the image lacks, and the rest's versions. */
function stackIn(
  manifest: Manifest,
  runtime: "python3.12" | "python3.13",
): { missing: string[]; versions: string } {
  const have = new Map(
    Object.entries(manifest.runtimes[runtime].packages ?? {}).map(([n, v]) => [n.toLowerCase(), v]),
  );
  return {
    missing: PY312_STACK.filter((n) => !have.has(n)),
    versions: PY312_STACK.map((n) => `${n} ${have.get(n)}`).join(", "),
  };
}

/**
 * Whether the image's python3.12 has its scientific packages, and if not, how to get them: they
 * come from a wheelhouse, a package index or PyPI at build time; without any of them python3.12
 * has the standard library only (python3.11 has Debian's packages either way).
 */
export function python312PackagesCheck(manifest: Manifest): {
  ok: boolean;
  detail: string;
  fix?: string;
} {
  const { missing, versions } = stackIn(manifest, "python3.12");
  if (manifest.python312PackagesFrom !== "none" && missing.length === 0)
    return { ok: true, detail: `from ${manifest.python312PackagesFrom}: ${versions}` };
  return {
    ok: false,
    detail:
      manifest.python312PackagesFrom === "none"
        ? `python3.12 has the standard library only (no ${missing.join(", ")}): when the image was built the host's pip reached no package index${noIndexDetail(manifest)}; python3.11 has them`
        : `python3.12 lacks ${missing.join(", ")} (packages from ${manifest.python312PackagesFrom})`,
    fix: `let the host's pip reach a package index (its pip.conf or PIP_INDEX_URL, PIP_PROXY, PIP_CERT: what \`pip download numpy\` needs), or set SCRATCHRUN_WHEELHOUSE=/dir/of/wheels, or SCRATCHRUN_PIP_INDEX_URL=https://your-mirror/simple with SCRATCHRUN_PYTHON312_REQUIREMENTS=/hash-pinned/requirements.txt, or give the image config a "python3.12" entry (either kind), then run ${setupCommand()} (the server needs the same variables)`,
  };
}

/**
 * Whether the image's python3.13 has the lock's stack: it comes only from the lock through the
 * host's pip (no wheelhouse or index of the operator's), so the one way out is an index for pip.
 */
export function python313PackagesCheck(manifest: Manifest): {
  ok: boolean;
  detail: string;
  fix?: string;
} {
  const { missing, versions } = stackIn(manifest, "python3.13");
  if (manifest.python313PackagesFrom === "pypi" && missing.length === 0)
    return { ok: true, detail: `from the lock: ${versions}` };
  return {
    ok: false,
    detail:
      manifest.python313PackagesFrom === "none"
        ? `python3.13 has the standard library only (no ${missing.join(", ")}): when the image was built the host's pip reached no package index${noIndexDetail(manifest)}`
        : `python3.13 lacks ${missing.join(", ")}`,
    fix: `let the host's pip reach a package index (its pip.conf or PIP_INDEX_URL, PIP_PROXY, PIP_CERT: what \`pip download numpy\` needs), then run ${setupCommand()}`,
  };
}

/** What pip said when the build found no index (the manifest's note), as " (pip: …)". */
function noIndexDetail(manifest: Manifest): string {
  const reason = noIndexReason(manifest.notes);
  return reason ? ` (pip: ${reason})` : "";
}

/** KVM as the microvm backend will really use it: the device opens and a probe guest boots. */
async function kvmCheck(settings: Settings): Promise<Check> {
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
    const artifacts = buildVmArtifacts({ cacheRoot: settings.images.vmCache });
    const accel = await detectAccel(artifacts.kernel, artifacts.initramfs, settings.accel);
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

/**
 * The microVM snapshot templates kept across restarts (SCRATCHRUN_TEMPLATE_CACHE): how many, what
 * they take on disk, and whether any is stale (made from a kernel or disk that is gone: the next
 * microVM start removes it). Never a failure: without them a first call only boots.
 */
async function keptTemplatesCheck(env: NodeJS.ProcessEnv): Promise<Check> {
  const name = "kept templates";
  try {
    const store = templateStoreFromEnv(env);
    if (!store)
      return { name, required: false, ok: true, detail: "off (SCRATCHRUN_TEMPLATE_CACHE=off)" };
    const kept = await store.list();
    const mb = Math.round(kept.reduce((a, t) => a + t.diskBytes, 0) / 1e6);
    const stale = kept.filter((t) => !t.current).length;
    return {
      name,
      required: false,
      ok: true,
      detail:
        kept.length === 0
          ? `none yet in ${store.dir} (a microVM server keeps each runtime's once built)`
          : `${kept.length} in ${store.dir}, ${mb} MB on disk${stale ? `, ${stale} stale (removed at the next microVM start)` : ""}: ${kept.map((t) => t.slot).join(", ")}`,
    };
  } catch (e) {
    return { name, required: false, ok: false, detail: e instanceof Error ? e.message : String(e) };
  }
}

/**
 * The host's own forward chains that drop by policy: Docker's, which the server opens for its
 * links (DOCKER-USER), or another, which drops what the sandboxes send to the internet (each such
 * call says so in its network_reason) until the operator lets the links through.
 */
async function forwardFirewallCheck(env: NodeJS.ProcessEnv): Promise<Check> {
  const name = "host firewall (forwarding)";
  if (setting("SCRATCHRUN_NETWORK", env) === "none")
    return {
      name,
      required: false,
      ok: true,
      detail: "network disabled by SCRATCHRUN_NETWORK=none",
    };
  const prefix = setting("SCRATCHRUN_NET_PREFIX", env) ?? DEFAULT_UPLINK.prefix;
  const listed = await runCommand(["/usr/sbin/nft", "-j", "list", "chains"]);
  if (listed.code !== 0)
    return {
      name,
      required: false,
      ok: false,
      detail: `nft cannot list the chains: ${listed.stderr.trim()}`,
    };
  const dropping = forwardChains(listed.stdout, (t) => t.startsWith(prefix)).filter(
    (c) => c.policy === "drop",
  );
  const docker = dockerUserChain(listed.stdout, "ip") !== null;
  const isDocker = (c: { family: string; table: string }) =>
    docker && c.family === "ip" && c.table === "filter";
  const others = dropping.filter((c) => !isDocker(c));
  if (others.length === 0)
    return {
      name,
      required: false,
      ok: true,
      detail: dropping.length
        ? "Docker's FORWARD policy drops; the server lets its sandbox links through DOCKER-USER"
        : "no forward chain drops by policy",
    };
  const pattern = linkPattern(prefix);
  const named = others.map((c) => `${c.family} ${c.table} ${c.name}`).join(", ");
  const first = others[0]!;
  return {
    name,
    required: false,
    ok: false,
    detail: `${named} drop${others.length === 1 ? "s" : ""} forwarded traffic by policy: calls with network "public" reach nothing (each result's network_reason says so)`,
    fix: `let the sandbox links through, e.g. nft insert rule ${first.family} ${first.table} ${first.name} iifname "${pattern}" accept; nft insert rule ${first.family} ${first.table} ${first.name} oifname "${pattern}" accept`,
  };
}
