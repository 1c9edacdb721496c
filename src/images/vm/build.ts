/**
 * Builds what a microVM boots: the guest kernel (ELF vmlinux extracted from the host's Debian
 * cloud kernel), the initramfs (busybox, modules, init, agent, the pre-start and session scripts, the node
 * reseed addon and the code's seccomp program) and the read-only
 * erofs disk made from a runtime rootfs directory. Everything is cached by content hash.
 */
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  utimesSync,
} from "node:fs";
import { writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { heldBy, liveLeases } from "../lease.js";
import { renderSeccompFilter } from "../../jail/seccomp.js";
import { GUEST_SCRIPTS } from "../../runtimes/table.js";
import { writeCpioNewc, type CpioEntry } from "./cpio.js";
import { extractVmlinux } from "./kernel.js";
import { resolveModuleOrder } from "./modules.js";
import { GUEST_UNAME_VERSION, guestRelease, patchUname } from "./uname.js";

/** The repository (or installed package) root: this file is dist/src/images/vm/build.js. */
export const PACKAGE_ROOT = fileURLToPath(new URL("../../../../", import.meta.url));

export interface VmArtifacts {
  /** ELF vmlinux, booted through its PVH entry. */
  kernel: string;
  /** Uncompressed newc cpio. */
  initramfs: string;
  /** Host helper holding a snapshot template's RAM in a sealable memfd (sealed-ram.c). */
  sealedRam: string;
}

export interface BuildOptions {
  /** Compressed kernel to extract; default: the newest /boot/vmlinuz-*-cloud-amd64. */
  vmlinuz?: string;
  /** Default: /lib/modules/<release of vmlinuz>. */
  modulesDir?: string;
  /** Static guest agent; default: <package>/build/guest/agent. */
  agent?: string;
  /** Static busybox; default: /bin/busybox (Debian's busybox-static). */
  busybox?: string;
  /** Where artifacts and root disks are cached: the settings' `images.vmCache` (SCRATCHRUN_VM_CACHE). */
  cacheRoot: string;
}

/** Thrown by the `*IfBuilt` lookups: what is missing, for a "run setup" message. */
export class NotBuiltError extends Error {}

/** Newest Debian cloud kernel in /boot, or null. */
export function findHostKernel(bootDir = "/boot"): { vmlinuz: string; release: string } | null {
  let names: string[];
  try {
    names = readdirSync(bootDir).filter((n) => /^vmlinuz-.*-cloud-amd64$/.test(n));
  } catch {
    return null;
  }
  names.sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
  const last = names.at(-1);
  return last ? { vmlinuz: join(bootDir, last), release: last.slice("vmlinuz-".length) } : null;
}

function writeAtomic(path: string, data: Uint8Array): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, data, { mode: 0o644 });
  renameSync(tmp, path);
}

function sha256(...parts: (string | Uint8Array)[]): string {
  const h = createHash("sha256");
  for (const p of parts) h.update(p).update("\0");
  return h.digest("hex").slice(0, 16);
}

function compileStatic(src: string, out: string): void {
  execFileSync(process.env.CC || "cc", ["-static", "-Os", "-Wall", "-o", out, src], {
    stdio: ["ignore", "ignore", "inherit"],
  });
}

/**
 * The kernel and initramfs of the current inputs if they are in the cache; throws NotBuiltError
 * otherwise and builds nothing (a stdio MCP server must not make its client wait on a build).
 */
export function vmArtifactsIfBuilt(opts: BuildOptions): VmArtifacts {
  return buildVmArtifacts(opts, false);
}

/** Builds (or finds in the cache) the kernel and initramfs for the given inputs. */
export function buildVmArtifacts(opts: BuildOptions, build = true): VmArtifacts {
  const host = findHostKernel();
  const vmlinuz = opts.vmlinuz ?? host?.vmlinuz;
  if (!vmlinuz)
    throw new Error("no guest kernel: install linux-image-cloud-amd64 or pass a vmlinuz path");
  const release = /vmlinuz-(.+)$/.exec(vmlinuz)?.[1] ?? host?.release ?? "";
  const modulesDir = opts.modulesDir ?? join("/lib/modules", release);
  const agent = opts.agent ?? join(PACKAGE_ROOT, "build", "guest", "agent");
  const reseedAddon = join(dirname(agent), "scratchrun-reseed.node");
  const busybox = opts.busybox ?? "/bin/busybox";
  for (const [what, path] of [
    ["modules", join(modulesDir, "modules.dep")],
    ["guest agent (run: node scripts/build-guest.mjs)", agent],
    ["node reseed addon (run: node scripts/build-guest.mjs)", reseedAddon],
    ["busybox (apt-get install busybox-static)", busybox],
  ] as const)
    if (!existsSync(path)) throw new Error(`missing ${what}: ${path}`);

  const init = readFileSync(join(PACKAGE_ROOT, "guest", "init"));
  // The pre-start and session scripts of the runtime table (guest/init copies each into the new
  // root).
  const prestarts = GUEST_SCRIPTS.map((name) => ({
    name,
    content: readFileSync(join(PACKAGE_ROOT, "guest", name)),
  }));
  const reseed = readFileSync(reseedAddon);
  // The namespace backend's seccomp policy, which the guest agent installs in the code's
  // processes (guest/agent-seccomp.h): one policy source for both backends.
  const seccomp = renderSeccompFilter();
  const sealedPath = join(PACKAGE_ROOT, "src", "backends", "microvm", "sealed-ram.c");
  const wanted = readFileSync(join(PACKAGE_ROOT, "images", "vm", "modules.txt"), "utf8")
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("#"));
  const order = resolveModuleOrder(readFileSync(join(modulesDir, "modules.dep"), "utf8"), wanted);
  const kst = statSync(vmlinuz);
  const key = sha256(
    vmlinuz,
    String(kst.size),
    String(kst.mtimeMs),
    init,
    ...prestarts.map((p) => p.content),
    reseed,
    seccomp,
    readFileSync(sealedPath),
    readFileSync(agent),
    readFileSync(busybox),
    order.join(","),
    guestRelease(release),
    GUEST_UNAME_VERSION,
  );
  const dir = join(opts.cacheRoot, key);
  const out: VmArtifacts = {
    kernel: join(dir, "vmlinux"),
    initramfs: join(dir, "initramfs.cpio"),
    sealedRam: join(dir, "sealed-ram"),
  };
  if (existsSync(out.kernel) && existsSync(out.initramfs) && existsSync(out.sealedRam)) return out;
  if (!build) throw new NotBuiltError(`the microVM kernel and initramfs are not built (${dir})`);
  mkdirSync(dir, { recursive: true, mode: 0o755 });

  const entries: CpioEntry[] = [
    ...["bin", "dev", "proc", "sys", "etc", "lib", "lib/modules", "tmp"].map((path): CpioEntry => ({
      kind: "dir",
      path,
      mode: 0o755,
    })),
    { kind: "chardev", path: "dev/console", mode: 0o600, major: 5, minor: 1 },
    { kind: "chardev", path: "dev/null", mode: 0o666, major: 1, minor: 3 },
    { kind: "file", path: "bin/busybox", mode: 0o755, content: readFileSync(busybox) },
    { kind: "symlink", path: "bin/sh", target: "busybox" },
    { kind: "file", path: "init", mode: 0o755, content: init },
    { kind: "file", path: "agent", mode: 0o755, content: readFileSync(agent) },
    // The display modules sit in python/ (GUEST_PYTHON_MODULES).
    ...[
      ...new Set(prestarts.flatMap(({ name }) => (name.includes("/") ? [dirname(name)] : []))),
    ].map((path): CpioEntry => ({ kind: "dir", path, mode: 0o755 })),
    ...prestarts.map(({ name, content }): CpioEntry => ({
      kind: "file",
      path: name,
      mode: 0o444,
      content,
    })),
    { kind: "file", path: "scratchrun-reseed.node", mode: 0o444, content: reseed },
    { kind: "file", path: "seccomp.bpf", mode: 0o400, content: seccomp },
    {
      kind: "file",
      path: "etc/modules.order",
      mode: 0o644,
      content: Buffer.from(order.map((p) => p.slice(p.lastIndexOf("/") + 1)).join("\n") + "\n"),
    },
    ...order.map((p): CpioEntry => ({
      kind: "file",
      path: `lib/modules/${p.slice(p.lastIndexOf("/") + 1)}`,
      mode: 0o644,
      content: readFileSync(join(modulesDir, p)),
    })),
  ];
  writeAtomic(out.initramfs, writeCpioNewc(entries));
  // The guest's uname names the guest kernel, not the host's (src/images/vm/uname.ts).
  const vmlinux = extractVmlinux(readFileSync(vmlinuz));
  writeAtomic(out.kernel, patchUname(vmlinux, release, guestRelease(release)));
  const helperTmp = `${out.sealedRam}.tmp-${process.pid}`;
  compileStatic(sealedPath, helperTmp);
  renameSync(helperTmp, out.sealedRam);
  return out;
}

/**
 * How the disk is made; part of its cache name, so a change rebuilds it. Every file keeps its
 * mtime (`--preserve-mtime`): Python checks each .pyc against its source's mtime, and with one
 * fixed time for all files (`-T0`, the previous format) every import recompiled from source,
 * ~15 s for numpy under TCG.
 */
const DISK_FORMAT = "v2";

/**
 * The runtime rootfs directory as a read-only erofs disk image, cached as
 * `<cacheRoot>/disks/<rootfs dir name>-<format>-<tree mtime>.erofs` (rootfs names carry their
 * recipe hash). The tree's mtime is in the name because a rebuild renames a new tree in under the
 * same name, and a kept earlier build may be renamed back: comparing "disk newer than tree" took a
 * rebuild within one clock tick of the disk, or an older tree restored, for current.
 * Uncompressed: under TCG decompression costs more than the page cache.
 */
export function ensureRootDisk(rootfsDir: string, cacheRoot: string, build = true): string {
  const name = basename(rootfsDir.replace(/\/+$/, ""));
  const stamp = Math.round(statSync(rootfsDir).mtimeMs * 1000).toString(16);
  const image = join(cacheRoot, "disks", `${name}-${DISK_FORMAT}-${stamp}.erofs`);
  if (existsSync(image)) return image;
  if (!build) throw new NotBuiltError(`the microVM root disk is not built (${image})`);
  const tmp = `${image}.tmp-${process.pid}`;
  mkdirSync(dirname(image), { recursive: true, mode: 0o755 });
  try {
    execFileSync("mkfs.erofs", ["--preserve-mtime", tmp, rootfsDir], {
      stdio: ["ignore", "ignore", "pipe"],
    });
  } catch (err) {
    rmSync(tmp, { force: true });
    throw new Error(
      `mkfs.erofs failed for ${rootfsDir} (apt-get install erofs-utils): ${String(err)}`,
    );
  }
  renameSync(tmp, image);
  // Earlier disks of this same rootfs name are dead weight (~1 GB each) unless a live server
  // leases one or a running VM's jail names it; the cache prune takes those later.
  const leased = liveLeases(cacheRoot, false);
  const commandLines = liveCommandLines();
  for (const old of readdirSync(dirname(image))) {
    const path = join(dirname(image), old);
    if (old === basename(image) || !old.startsWith(name) || !old.endsWith(".erofs")) continue;
    if (old !== `${name}.erofs` && !/^-v\d+(-[0-9a-f]+)?\.erofs$/.test(old.slice(name.length)))
      continue;
    if (heldBy(leased, path).length > 0 || commandLines.some((c) => c.includes(path))) continue;
    rmSync(path, { force: true });
  }
  return image;
}

/** Every running process's command line (a live VM's jail names its kernel and disk on it). */
function liveCommandLines(): string[] {
  const out: string[] = [];
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      out.push(readFileSync(`/proc/${pid}/cmdline`, "utf8"));
    } catch {
      // exited while we read
    }
  }
  return out;
}

function listOrEmpty(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** Marks a server's artifacts as in use now: a later build's prune spares them for a while. */
export function touchVmArtifacts(artifacts: VmArtifacts): void {
  const now = new Date();
  try {
    utimesSync(dirname(artifacts.kernel), now, now);
  } catch {
    // a cache we cannot write: nothing prunes it either
  }
}

/**
 * Removes what earlier builds left in the VM cache: artifact directories (16 hex digits, ~60 MB
 * each) and root disks (~700 MB each) other than `keep`. Spared: anything a live server holds a
 * lease on (a microVM backend leases its kernel directory and disk for its lifetime, idle or not),
 * anything a running process names on its command line (the jail of every live VM binds its
 * kernel and disk by path) and anything changed within `minAgeMs` (a server touches its artifact
 * directory when it starts). Returns the paths removed.
 */
export function pruneVmCache(
  keep: readonly string[],
  cacheRoot: string,
  minAgeMs = 3_600_000,
  commandLines: readonly string[] = liveCommandLines(),
): string[] {
  const leased = liveLeases(cacheRoot, true);
  const candidates = [
    ...listOrEmpty(cacheRoot)
      .filter((n) => /^[0-9a-f]{16}$/.test(n))
      .map((n) => join(cacheRoot, n)),
    ...listOrEmpty(join(cacheRoot, "disks"))
      .filter((n) => n.endsWith(".erofs"))
      .map((n) => join(cacheRoot, "disks", n)),
  ];
  const removed: string[] = [];
  for (const path of candidates) {
    if (keep.some((k) => k === path || k.startsWith(`${path}/`))) continue;
    if (commandLines.some((c) => c.includes(path))) continue;
    if (heldBy(leased, path).length > 0) continue;
    let mtimeMs: number;
    try {
      mtimeMs = statSync(path).mtimeMs;
    } catch {
      continue;
    }
    if (Date.now() - mtimeMs < minAgeMs) continue;
    rmSync(path, { recursive: true, force: true });
    removed.push(path);
  }
  return removed;
}
