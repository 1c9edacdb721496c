import { closeSync, mkdirSync, openSync, readFileSync, unlinkSync, writeSync } from "node:fs";
import { dirname, join } from "node:path";
import { pidAlive } from "./procfs.js";

/**
 * Host uids for sandboxes. Each live sandbox runs as its own unprivileged host uid, so two
 * sandboxes never share an owner (no signals, no /proc access between them, no shared files).
 * A uid is reserved host-wide with a lock file naming the owning server's pid, so two servers on
 * one host never hand out the same uid; a lock whose pid is dead is taken over. A uid returns to
 * the pool only after its sandbox is fully destroyed.
 */
export const SANDBOX_UID_BASE = 6_200_000;
export const SANDBOX_UID_COUNT = 4096;
export const UID_LOCK_DIR = "/run/scratchrun/uids";

/**
 * Whether a live server holds `uid` (its lock file names a live pid): what a dead server's
 * leftovers owned by that uid are told apart by.
 */
export function uidHeld(uid: number, lockDir = UID_LOCK_DIR): boolean {
  let owner = NaN;
  try {
    owner = Number(readFileSync(join(lockDir, String(uid)), "utf8"));
  } catch {
    return false;
  }
  return Number.isInteger(owner) && owner > 0 && pidAlive(owner);
}

export class UidPool {
  private readonly held = new Set<number>();
  private next: number;

  constructor(
    readonly base = SANDBOX_UID_BASE,
    readonly count = SANDBOX_UID_COUNT,
    readonly lockDir = UID_LOCK_DIR,
  ) {
    // mkdir -p gives every folder it makes the one mode: the parent (/run/scratchrun, where the
    // jails' resolv.conf and the daemon's socket live) made first, open to traverse; the locks'
    // own folder private. A 0700 parent left every public network's jail unable to start.
    mkdirSync(dirname(lockDir), { recursive: true, mode: 0o755 });
    mkdirSync(lockDir, { recursive: true, mode: 0o700 });
    this.next = Math.floor(Math.random() * count);
  }

  acquire(): number {
    for (let i = 0; i < this.count; i++) {
      const uid = this.base + ((this.next + i) % this.count);
      if (this.held.has(uid) || !this.tryLock(uid)) continue;
      this.next = (this.next + i + 1) % this.count;
      this.held.add(uid);
      return uid;
    }
    throw new Error(`no free sandbox uid in ${this.base}..${this.base + this.count - 1}`);
  }

  release(uid: number): void {
    if (!this.held.delete(uid)) return;
    try {
      unlinkSync(join(this.lockDir, String(uid)));
    } catch {
      // already gone: nothing to release
    }
  }

  /** True when `uid` belongs to this pool's range (for leak checks and orphan reaping). */
  owns(uid: number): boolean {
    return uid >= this.base && uid < this.base + this.count;
  }

  private tryLock(uid: number): boolean {
    const path = join(this.lockDir, String(uid));
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        const fd = openSync(path, "wx", 0o600);
        writeSync(fd, String(process.pid));
        closeSync(fd);
        return true;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      }
      let owner = NaN;
      try {
        owner = Number(readFileSync(path, "utf8"));
      } catch {
        continue; // released between our open and read: try again
      }
      if (Number.isInteger(owner) && owner > 0 && pidAlive(owner)) return false;
      try {
        unlinkSync(path); // its server died: the uid's sandbox was reaped with it
      } catch {
        // another server took it over first
      }
    }
    return false;
  }
}
