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
}

/** uid/gid of the code inside the sandbox's user namespace (the rootfs's `user`). */
export const SANDBOX_USER_ID = 1000;
export const AGENT_PATH = "/opt/scratchrun/agent";

/**
 * The bubblewrap command line for one sandbox, as a pure function of its layout: every namespace
 * unshared, the root read-only, only RAM-backed size-capped writable areas, no capabilities, no
 * further user namespaces, a new session (no TIOCSTI into the caller's terminal), and the
 * seccomp program applied to everything inside.
 */
export function renderBwrapArgs(layout: BwrapLayout): string[] {
  const size = String(layout.scratchBytes);
  const args = [
    "/usr/bin/bwrap",
    "--unshare-all",
    "--unshare-user",
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
    "--perms",
    "1777",
    "--size",
    size,
    "--tmpfs",
    "/tmp",
    "--perms",
    "0755",
    "--size",
    size,
    "--tmpfs",
    WORKDIR,
    "--perms",
    "0755",
    "--size",
    String(Math.min(layout.scratchBytes, 8 * 1024 * 1024)),
    "--tmpfs",
    CODE_DIR,
    "--ro-bind",
    layout.agentDir,
    "/opt/scratchrun",
  ];
  if (layout.network === "shared" && layout.resolvConf)
    args.push("--ro-bind", layout.resolvConf, "/etc/resolv.conf");
  args.push("--seccomp", String(layout.seccompFd), "--chdir", WORKDIR, "--clearenv", AGENT_PATH);
  return args;
}
