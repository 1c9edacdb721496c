/**
 * Which images stay in an images directory: the one a build just made (the active image) and
 * every image a live server holds a lease on. Everything else named rootfs-* is removed.
 */
import { existsSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { heldBy, liveLeases } from "./lease.js";
import { ROOTFS_PREFIX } from "./paths.js";
import { pidAlive } from "../jail/procfs.js";

/** The file naming the active image of an images directory: the last one a build finished. */
export const ACTIVE_FILE = "active";
const PRUNING_PREFIX = ".pruning-";

/** Records `dir` (an image directory inside `root`) as the active image, atomically. */
export function setActiveImage(root: string, dir: string): void {
  const name = dir.slice(dir.lastIndexOf("/") + 1);
  const tmp = join(root, `.${ACTIVE_FILE}.tmp-${process.pid}`);
  writeFileSync(tmp, `${name}\n`);
  renameSync(tmp, join(root, ACTIVE_FILE));
}

/** The active image's directory, or null when no build has finished here (or it is gone). */
export function activeImage(root: string): string | null {
  try {
    const name = readFileSync(join(root, ACTIVE_FILE), "utf8").trim();
    if (!name.startsWith(ROOTFS_PREFIX) || name.includes("/")) return null;
    const dir = join(root, name);
    return existsSync(dir) ? dir : null;
  } catch {
    return null;
  }
}

export interface PruneOutcome {
  removed: string[];
  /** Images spared because live servers hold them, with those servers' pids. */
  inUse: { dir: string; pids: number[] }[];
}

/**
 * Removes every image in `root` except `keep` and those a live server leases. An image is first
 * renamed aside, then the leases are read again: a server that leased it in between gets it back
 * (a server checks that its image exists after writing its lease, so one of the two always sees
 * the other). Half-pruned images a crash left behind are removed too.
 */
export function pruneImages(
  root: string,
  keep: string,
  log: (line: string) => void = () => {},
): PruneOutcome {
  const outcome: PruneOutcome = { removed: [], inUse: [] };
  for (const name of readdirSync(root)) {
    const path = join(root, name);
    if (name.startsWith(PRUNING_PREFIX)) {
      const pid = Number(name.slice(name.lastIndexOf("-") + 1));
      if (!Number.isInteger(pid) || pid === process.pid || !pidAlive(pid))
        rmSync(path, { recursive: true, force: true });
      continue;
    }
    if (!name.startsWith(ROOTFS_PREFIX) || path === keep) continue;
    const before = heldBy(liveLeases(root, true), path);
    if (before.length > 0) {
      log(`keeping old image ${name}: a live server uses it (pid ${before.join(", ")})`);
      outcome.inUse.push({ dir: path, pids: before });
      continue;
    }
    const aside = join(root, `${PRUNING_PREFIX}${name}-${process.pid}`);
    try {
      renameSync(path, aside);
    } catch {
      continue; // another prune took it
    }
    const after = heldBy(liveLeases(root), path);
    if (after.length > 0) {
      renameSync(aside, path);
      log(`keeping old image ${name}: a server started on it (pid ${after.join(", ")})`);
      outcome.inUse.push({ dir: path, pids: after });
      continue;
    }
    log(`pruning old image ${name}`);
    rmSync(aside, { recursive: true, force: true });
    outcome.removed.push(path);
  }
  return outcome;
}

/** Pids of live servers holding `dir`. */
export function imageHolders(root: string, dir: string): number[] {
  return heldBy(liveLeases(root), dir);
}
