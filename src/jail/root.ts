/**
 * The one check every start that runs sandboxes makes first: cgroups, jails and QEMU's uids need
 * root. First, before anything reads the host: the orphan reaper cannot tell another user's live
 * sandboxes from orphans, and a non-root start waited seconds per cgroup before saying why it
 * could not run (issue 46).
 */
import { ScratchRunError } from "../errors.js";

export function requireRoot(): void {
  if (process.getuid?.() !== 0)
    throw new ScratchRunError(
      "NOT_READY",
      "ScratchRun must run as root to create cgroups and jails",
      {
        fix: "Run it as root (e.g. in a VM or container you control), or point SCRATCHRUN_URL at a ScratchRun server (remote mode); `scratchrun doctor` lists every check",
      },
    );
}
