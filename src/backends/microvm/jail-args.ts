/**
 * The bubblewrap command that confines QEMU: every namespace unshared, an empty environment, a
 * root holding only /usr (QEMU and its libraries), the kernel, initramfs and disk image read-only,
 * and one private writable directory for its sockets. Pure: spec in, argv out.
 */
import { IN_JAIL } from "./qemu-args.js";
import { QEMU_BINARY } from "./accel.js";

export interface JailSpec {
  kernel: string;
  initramfs: string;
  disk: string;
  /** Host directory (owned by QEMU's uid, mode 0700) mounted at IN_JAIL.runDir. */
  runDir: string;
  /** Pass /dev/kvm through (KVM only). */
  kvm: boolean;
  /**
   * "tap": QEMU keeps the network namespace it was started in (the sandbox's, entered by
   * spawnJailed) and gets /dev/net/tun to open its tap there. "none": a new, empty one.
   */
  net: "tap" | "none";
  /** fd carrying our seccomp program (on top of QEMU's own -sandbox). */
  seccompFd: number;
}

const BWRAP = "/usr/bin/bwrap";

/** Rejects host paths that would change the meaning of bwrap's argument list. */
function checkHostPath(path: string, what: string): string {
  if (!path.startsWith("/") || path.includes("\0") || path.split("/").includes(".."))
    throw new Error(`${what}: not a clean absolute path: ${JSON.stringify(path)}`);
  return path;
}

export function renderJailArgs(spec: JailSpec, qemuArgs: readonly string[]): string[] {
  const args = [
    BWRAP,
    ...["--unshare-all", ...(spec.net === "tap" ? ["--share-net"] : [])],
    ...["--die-with-parent", "--new-session", "--clearenv"],
    ...["--cap-drop", "ALL"],
    ...["--ro-bind", "/usr", "/usr"],
    ...["--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64"],
    ...["--symlink", "usr/bin", "/bin"],
    ...["--proc", "/proc", "--dev", "/dev"],
    ...(spec.kvm ? ["--dev-bind", "/dev/kvm", "/dev/kvm"] : []),
    ...(spec.net === "tap" ? ["--dev-bind", "/dev/net/tun", "/dev/net/tun"] : []),
    ...["--ro-bind", checkHostPath(spec.kernel, "kernel"), IN_JAIL.kernel],
    ...["--ro-bind", checkHostPath(spec.initramfs, "initramfs"), IN_JAIL.initramfs],
    ...["--ro-bind", checkHostPath(spec.disk, "disk"), IN_JAIL.disk],
    ...["--bind", checkHostPath(spec.runDir, "runDir"), IN_JAIL.runDir],
    ...["--chdir", IN_JAIL.runDir],
    ...["--seccomp", String(spec.seccompFd)],
    "--",
    QEMU_BINARY,
    ...qemuArgs,
  ];
  return args;
}
