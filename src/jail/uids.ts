/**
 * Host uids for sandboxes. Each live sandbox runs as its own unprivileged host uid, so two
 * sandboxes never share an owner (no signals, no /proc access between them, no shared files).
 * A uid returns to the pool only after its sandbox is fully destroyed.
 */
export const SANDBOX_UID_BASE = 6_200_000;
export const SANDBOX_UID_COUNT = 4096;

export class UidPool {
  private readonly free: number[] = [];
  private readonly used = new Set<number>();

  constructor(
    readonly base = SANDBOX_UID_BASE,
    readonly count = SANDBOX_UID_COUNT,
  ) {
    for (let i = count - 1; i >= 0; i--) this.free.push(base + i);
  }

  acquire(): number {
    const uid = this.free.pop();
    if (uid === undefined) throw new Error("no free sandbox uid");
    this.used.add(uid);
    return uid;
  }

  release(uid: number): void {
    if (!this.used.delete(uid)) return;
    this.free.push(uid);
  }

  /** True when `uid` belongs to the sandbox range (for leak checks and orphan reaping). */
  owns(uid: number): boolean {
    return uid >= this.base && uid < this.base + this.count;
  }
}
