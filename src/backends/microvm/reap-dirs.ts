/**
 * At server start: the private directories (`/tmp/scratchrun-vm-*`) of VMs whose server died
 * (kill -9) without destroying them. A VM's directory is chowned to its host uid, which its
 * server holds (a lock file naming its pid, jail/uids.ts) from before the directory is made until
 * after it is removed; a directory whose owner uid no live server holds is an orphan. QEMU died
 * with its server (the jail's --die-with-parent) and its cgroup is reaped apart.
 */
import { lstatSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SANDBOX_UID_BASE, SANDBOX_UID_COUNT, uidHeld } from "../../jail/uids.js";

export const VM_DIR_PREFIX = "scratchrun-vm-";

/** Removes every orphaned VM directory in `dir`; returns their paths. */
export function reapOrphanVmDirs(dir = tmpdir()): string[] {
  let names: string[];
  try {
    names = readdirSync(dir).filter((n) => n.startsWith(VM_DIR_PREFIX));
  } catch {
    return [];
  }
  const reaped: string[] = [];
  for (const name of names) {
    const path = join(dir, name);
    try {
      const st = lstatSync(path);
      // Sandbox uids only (a directory still owned by root is being set up by a live server).
      const sandboxUid =
        st.uid >= SANDBOX_UID_BASE && st.uid < SANDBOX_UID_BASE + 2 * SANDBOX_UID_COUNT;
      if (!st.isDirectory() || !sandboxUid || uidHeld(st.uid)) continue;
      rmSync(path, { recursive: true, force: true });
      reaped.push(path);
    } catch {
      // removed meanwhile
    }
  }
  return reaped;
}
