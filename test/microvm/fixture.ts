/**
 * A tiny runtime root for microVM tests: the host's static busybox as /bin/sh, the image's
 * writable mount points, and /home/user owned by uid 1000. The backend is what is under test,
 * not the runtime image, so the tests need no built image (and run in ~2 s per boot under TCG).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
} from "node:fs";
import { copyFileSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { SandboxJob } from "../../src/backends/types.js";
import { CODE_UID } from "../../src/protocol/guest-header.js";
import { detectCgroups, listScratchrunCgroups } from "../../src/jail/cgroup.js";
import { allProcStats } from "../../src/jail/procfs.js";

export interface TinyRoot {
  dir: string;
  rootfs: string;
  disk: string;
  cleanup(): void;
}

export function canRunMicrovm(): string | null {
  if (process.getuid?.() !== 0) return "needs root (cgroups, unprivileged QEMU uid)";
  for (const p of [
    "/usr/bin/qemu-system-x86_64",
    "/usr/bin/bwrap",
    "/bin/busybox",
    "/usr/bin/mkfs.erofs",
  ])
    if (!existsSync(p)) return `missing ${p}`;
  return null;
}

/** Test fixture programs (test/microvm/fixtures/<name>.c), built static into the tiny root's /bin. */
export type FixtureProgram = "poke" | "int80";

const FIXTURES = fileURLToPath(new URL("../../../test/microvm/fixtures/", import.meta.url));

export function makeTinyRoot(opts: { programs?: FixtureProgram[] } = {}): TinyRoot {
  const dir = mkdtempSync("/tmp/scratchrun-microvm-test-");
  chmodSync(dir, 0o755); // QEMU's unprivileged uid must reach the disk image
  const rootfs = join(dir, "rootfs");
  for (const d of ["bin", "tmp", "proc", "sys", "dev", "run/scratchrun", "home/user"])
    mkdirSync(join(rootfs, d), { recursive: true });
  chmodSync(join(rootfs, "tmp"), 0o1777);
  chownSync(join(rootfs, "home/user"), 1000, 1000);
  copyFileSync("/bin/busybox", join(rootfs, "bin/busybox"));
  chmodSync(join(rootfs, "bin/busybox"), 0o755);
  symlinkSync("busybox", join(rootfs, "bin/sh"));
  for (const name of opts.programs ?? []) {
    const out = join(rootfs, "bin", name);
    execFileSync("gcc", ["-static", "-O2", "-Wall", "-o", out, join(FIXTURES, `${name}.c`)], {
      stdio: ["ignore", "ignore", "inherit"],
    });
    chmodSync(out, 0o755);
  }
  const disk = join(dir, "root.erofs");
  execFileSync("mkfs.erofs", ["-T0", disk, rootfs], { stdio: "ignore" });
  chmodSync(disk, 0o644);
  return { dir, rootfs, disk, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

export function shJob(code: string, overrides: Partial<SandboxJob["request"]> = {}): SandboxJob {
  return {
    runtime: "bash",
    memoryMb: 256,
    egress: { kind: "none" },
    request: {
      timeoutMs: 10_000,
      maxStdoutBytes: 1 << 20,
      maxStderrBytes: 1 << 20,
      maxFileBytes: 1 << 20,
      maxTotalFileBytes: 2 << 20,
      // What the engine sends this backend (MicrovmBackend.codeIds): the guest's code user.
      uid: CODE_UID,
      gid: CODE_UID,
      cwd: "/home/user",
      argv: ["/bin/sh", "-c", code],
      env: { PATH: "/bin" },
      files: [],
      returnFiles: [],
      ...overrides,
    },
  };
}

/**
 * What a VM leaves on the host: its private directories, its cgroups, and (snapshot templates)
 * sealed-ram helper processes of this process and template memfds still open here.
 */
export async function hostLeftovers(): Promise<{
  dirs: string[];
  cgroups: string[];
  helpers: number;
  memfds: number;
}> {
  const dirs = readdirSync("/tmp").filter((n) => n.startsWith("scratchrun-vm-"));
  const cgroups = (await listScratchrunCgroups(detectCgroups())).filter((p) =>
    /\/vm-[0-9a-f]+$/.test(p),
  );
  const helpers = allProcStats().filter(
    (p) => p.comm === "sealed-ram" && p.ppid === process.pid,
  ).length;
  let memfds = 0;
  for (const fd of readdirSync("/proc/self/fd")) {
    try {
      if (readlinkSync(`/proc/self/fd/${fd}`).includes("scratchrun-template-ram")) memfds++;
    } catch {
      // closed while we looked
    }
  }
  return { dirs, cgroups, helpers, memfds };
}

/** pid -> ppid of every process now. */
function parents(): Map<number, number> {
  return new Map(allProcStats().map((p) => [p.pid, p.ppid]));
}

function descendsFromUs(pid: number, ppids: Map<number, number>): boolean {
  for (let p = pid, i = 0; p > 1 && i < 64; p = ppids.get(p) ?? 0, i++)
    if (p === process.pid) return true;
  return false;
}

/**
 * Asserts that nothing new since `before` is left on the host by this process. Other engineers'
 * tests run VMs on the same host at the same time: a new cgroup holding a process that does not
 * descend from this test process, or a new VM directory owned by the uid of such a process, is
 * theirs and ignored; entries that are neither (being created or removed) are re-checked for a
 * few seconds before they count as leaks.
 */
export async function assertNoLeftovers(
  before: Awaited<ReturnType<typeof hostLeftovers>>,
  message: string,
): Promise<void> {
  let fresh: unknown = null;
  for (let i = 0; i < 50; i++) {
    const now = await hostLeftovers();
    const ppids = parents();
    const foreignUids = new Set<number>();
    for (const pid of ppids.keys()) {
      if (descendsFromUs(pid, ppids)) continue;
      try {
        foreignUids.add(statSync(`/proc/${pid}`).uid);
      } catch {
        // exited
      }
    }
    const foreignCgroup = (path: string): boolean => {
      try {
        return readFileSync(join(path, "cgroup.procs"), "utf8")
          .split("\n")
          .filter((l) => l !== "")
          .some((pid) => !descendsFromUs(Number(pid), ppids));
      } catch {
        return false;
      }
    };
    const foreignDir = (name: string): boolean => {
      try {
        const uid = statSync(join("/tmp", name)).uid;
        return uid !== 0 && foreignUids.has(uid);
      } catch {
        return true; // gone
      }
    };
    const cur = {
      dirs: now.dirs.filter((d) => !before.dirs.includes(d) && !foreignDir(d)),
      cgroups: now.cgroups.filter((c) => !before.cgroups.includes(c) && !foreignCgroup(c)),
      helpers: now.helpers - before.helpers,
      memfds: now.memfds - before.memfds,
    };
    if (cur.dirs.length === 0 && cur.cgroups.length === 0 && cur.helpers <= 0 && cur.memfds <= 0)
      return;
    fresh = cur;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`${message}: ${JSON.stringify(fresh)}`);
}

export const text = (b: Uint8Array) => Buffer.from(b).toString("utf8");
