/**
 * Starts the jailed QEMU exactly like jail/spawn.ts's spawnJailed (enter the cgroups as root,
 * drop to the VM's uid with setpriv, exec), plus one host fd inherited as fd 3: the snapshot
 * RAM memfd, which QEMU opens as /proc/self/fd/3. spawnJailed can only add pipes; when it gains
 * an `inheritFds` option this file goes away.
 */
import { spawn, type ChildProcess } from "node:child_process";

export interface QemuSpawn {
  cgroupProcsFiles: string[];
  uid: number;
  gid: number;
  argv: string[];
  /** Host fd that becomes fd 3 of the jailed program. */
  fd3?: number;
  /** Network namespace to enter (as root, before dropping to uid); absent: stay in the host's. */
  netnsPath?: string;
}

export function spawnQemuJailed(spec: QemuSpawn): ChildProcess {
  const n = spec.cgroupProcsFiles.length;
  // Constant script; every variable part is a positional argument (never interpolated).
  const script = `i=0; for f; do [ "$i" -ge ${n} ] && break; echo $$ > "$f" || exit 125; i=$((i+1)); done; shift ${n}; exec "$@"`;
  const drop = [
    "/usr/bin/setpriv",
    `--reuid=${spec.uid}`,
    `--regid=${spec.gid}`,
    "--clear-groups",
    "--inh-caps=-all",
    "--",
  ];
  const netns = spec.netnsPath ? ["/usr/bin/nsenter", `--net=${spec.netnsPath}`, "--"] : [];
  const stdio: ("pipe" | "ignore" | number)[] = ["pipe", "pipe", "pipe"];
  if (spec.fd3 !== undefined) stdio.push(spec.fd3);
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
