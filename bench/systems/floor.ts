import { mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Manifest } from "../../src/images/manifest.js";
import { CODE_FILE, type Workload } from "../workloads.js";
import { judge, makeWorkDir, runProcess } from "./process.js";
import type { BenchSystem, CallResult } from "./types.js";

function imageEnv(manifest: Manifest): string[] {
  return Object.entries({ ...manifest.env, PYTHONDONTWRITEBYTECODE: "1" }).map(
    ([k, v]) => `${k}=${v}`,
  );
}

function argvOf(manifest: Manifest, workload: Workload): string[] {
  return [...(manifest.runtimes[workload.runtime]?.argv ?? []), CODE_FILE[workload.runtime]];
}

/**
 * The floor: the image's own interpreter started by the host with no isolation at all (chroot
 * only, so it finds the same binaries and packages as the sandboxes). A process start, nothing
 * else; a workload that returns a file from /tmp also gets a mount namespace whose /tmp is its
 * work directory (the chroot's own /tmp is the image's).
 */
export function hostFloor(rootfsDir: string, manifest: Manifest): BenchSystem {
  const scratch = join(rootfsDir, "tmp");
  return {
    id: "host",
    label: "bare interpreter (host, chroot)",
    kind: "floor",
    unsupported: () => null,
    async start() {
      mkdirSync(scratch, { recursive: true });
    },
    async call(workload: Workload): Promise<CallResult> {
      const dir = makeWorkDir(scratch, workload);
      const tmpFiles = workload.returnFiles.some((f) => f.startsWith("/tmp/"));
      const inside = tmpFiles ? "/tmp" : `/tmp/${dir.slice(scratch.length + 1)}`;
      const ownTmp = tmpFiles
        ? [
            "/usr/bin/unshare",
            "--mount",
            "/bin/sh",
            "-c",
            'mount --bind "$0" "$1/tmp" && shift && exec "$@"',
            dir,
            rootfsDir,
          ]
        : [];
      const r = await runProcess([
        ...ownTmp,
        "/usr/sbin/chroot",
        rootfsDir,
        "/usr/bin/env",
        "-i",
        "-C",
        inside,
        ...imageEnv(manifest),
        // The chroot is the real image, writable to root: caches go to the work dir, never
        // into the image's /home/user.
        `HOME=${inside}`,
        `MPLCONFIGDIR=${inside}`,
        ...argvOf(manifest, workload),
      ]);
      return judge(workload, r, dir);
    },
    rootPids: () => [],
    close: async () => {},
  };
}

/**
 * The namespace floor: one bubblewrap with every namespace unshared over the same read-only
 * rootfs, tmpfs /tmp, the work dir bound writable. No cgroup, no seccomp, no agent, no MCP.
 */
export function rawBwrap(rootfsDir: string, manifest: Manifest, workParent: string): BenchSystem {
  return {
    id: "bwrap",
    label: "raw bubblewrap",
    kind: "floor",
    unsupported: () => null,
    async start() {
      mkdirSync(workParent, { recursive: true });
    },
    async call(workload: Workload): Promise<CallResult> {
      const dir = makeWorkDir(workParent, workload);
      const env = imageEnv(manifest).flatMap((kv) => {
        const i = kv.indexOf("=");
        return ["--setenv", kv.slice(0, i), kv.slice(i + 1)];
      });
      const r = await runProcess([
        "/usr/bin/bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        rootfsDir,
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--bind",
        dir,
        "/home/user",
        ...(workload.returnFiles.some((f) => f.startsWith("/tmp/")) ? ["--bind", dir, "/tmp"] : []),
        "--chdir",
        "/home/user",
        "--clearenv",
        ...env,
        ...argvOf(manifest, workload),
      ]);
      return judge(workload, r, dir);
    },
    rootPids: () => [],
    close: async () => {},
  };
}
