import { CODE_DIR, WORKDIR } from "../../schema/limits.js";

export interface BwrapLayout {
  /** Runtime root filesystem directory, mounted read-only as /. */
  rootfsDir: string;
  /** Host directory holding the agent binary, mounted read-only at /opt/scratchrun. */
  agentDir: string;
  /** Size of each RAM-backed writable area (/tmp, working dir, code dir), bytes. */
  scratchBytes: number;
  /** "none": a fresh empty network namespace (loopback only); "shared": the netns it starts in. */
  network: "none" | "shared";
  /** Host file bound read-only at /etc/resolv.conf when the network is shared. */
  resolvConf?: string;
  /** fd number carrying the seccomp program. */
  seccompFd: number;
  /** The agent's own arguments (a pooled jail's pre-start, src/backends/prestart.ts). */
  agentArgs?: readonly string[];
}

/** uid/gid of the code inside the sandbox's user namespace (the rootfs's `user`). */
export const SANDBOX_USER_ID = 1000;
/** Where the agent's directory (the agent, the pre-start scripts, node's reseed addon) is. */
export const AGENT_MOUNT = "/opt/scratchrun";
export const AGENT_PATH = `${AGENT_MOUNT}/agent`;

/** A RAM-backed writable area: size-capped, with the given mode (bwrap mounts it nosuid,nodev). */
function tmpfs(path: string, perms: string, bytes: number): string[] {
  return ["--perms", perms, "--size", String(bytes), "--tmpfs", path];
}

/**
 * The bubblewrap command line for one sandbox, as a pure function of its layout: every namespace
 * unshared, the root read-only, only RAM-backed size-capped writable areas, no capabilities, no
 * further user namespaces, a new session (no TIOCSTI into the caller's terminal), and the
 * seccomp program applied to everything inside.
 *
 * The agent is pid 1 of the sandbox (`--as-pid-1`): bwrap's own reaper would otherwise be a
 * dumpable process with the code's uid holding the host channel, so the code could open its
 * /proc/1/mem and speak for the agent; as init, the agent also ignores the code's SIGKILL.
 * /dev is read-only after setup (its tmpfs has no size cap); /dev/shm is a capped tmpfs.
 */
export function renderBwrapArgs(layout: BwrapLayout): string[] {
  const args = [
    "/usr/bin/bwrap",
    "--unshare-all",
    "--unshare-user",
    "--as-pid-1",
    ...(layout.network === "shared" ? ["--share-net"] : []),
    "--disable-userns",
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "ALL",
    "--uid",
    String(SANDBOX_USER_ID),
    "--gid",
    String(SANDBOX_USER_ID),
    "--hostname",
    "sandbox",
    "--ro-bind",
    layout.rootfsDir,
    "/",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    ...tmpfs("/dev/shm", "1777", layout.scratchBytes),
    "--remount-ro",
    "/dev",
    ...tmpfs("/tmp", "1777", layout.scratchBytes),
    ...tmpfs(WORKDIR, "0755", layout.scratchBytes),
    ...tmpfs(CODE_DIR, "0755", Math.min(layout.scratchBytes, 8 * 1024 * 1024)),
    "--ro-bind",
    layout.agentDir,
    AGENT_MOUNT,
  ];
  if (layout.network === "shared" && layout.resolvConf)
    args.push("--ro-bind", layout.resolvConf, "/etc/resolv.conf");
  args.push("--seccomp", String(layout.seccompFd), "--chdir", WORKDIR, "--clearenv", AGENT_PATH);
  args.push(...(layout.agentArgs ?? []));
  return args;
}
