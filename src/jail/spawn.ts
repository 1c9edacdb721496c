import { spawn, type ChildProcess } from "node:child_process";

export interface JailedSpawn {
  /** Files the wrapper writes its own pid into before anything else runs (cgroup entry). */
  cgroupProcsFiles: string[];
  /** Unprivileged host uid/gid the jailed process runs as. */
  uid: number;
  gid: number;
  /** Program and arguments, run after entering the cgroups and dropping to uid/gid. */
  argv: string[];
  /**
   * The child's fds from 3 up: "pipe" (e.g. a seccomp program to write), a host fd to inherit
   * (e.g. a snapshot's RAM memfd), or "ignore" to leave that number unused.
   */
  stdioExtra?: ("pipe" | "ignore" | number)[];
  /** Run inside this network namespace (nsenter --net); none means the caller unshares it. */
  netnsPath?: string;
}

const SETPRIV = "/usr/bin/setpriv";
const NSENTER = "/usr/bin/nsenter";

/**
 * Starts a process that enters its cgroups and (optionally) a network namespace as root, then
 * drops to an unprivileged uid with no capabilities and no groups before exec'ing `argv`.
 * The cgroup write happens in the process itself before exec, so nothing the jailed program
 * starts can run outside its limits. The environment is empty.
 */
export function spawnJailed(spec: JailedSpawn): ChildProcess {
  // $1..$n are the cgroup files; after `shift n`, "$@" is the command. The script is constant;
  // every variable part is a positional argument, so nothing is ever interpolated into shell.
  const n = spec.cgroupProcsFiles.length;
  const script = `i=0; for f; do [ "$i" -ge ${n} ] && break; echo $$ > "$f" || exit 125; i=$((i+1)); done; shift ${n}; exec "$@"`;
  const drop = [
    SETPRIV,
    `--reuid=${spec.uid}`,
    `--regid=${spec.gid}`,
    "--clear-groups",
    "--inh-caps=-all",
    "--",
  ];
  const netns = spec.netnsPath ? [NSENTER, `--net=${spec.netnsPath}`, "--"] : [];
  const stdio: ("pipe" | "ignore" | number)[] = [
    "pipe",
    "pipe",
    "pipe",
    ...(spec.stdioExtra ?? []),
  ];
  return spawn(
    "/bin/sh",
    ["-c", script, "sh", ...spec.cgroupProcsFiles, ...netns, ...drop, ...spec.argv],
    {
      stdio,
      env: {},
      detached: true,
    },
  );
}
