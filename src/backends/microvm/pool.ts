/**
 * Warm pool: per runtime, VMs already booted to the agent's READY. A VM leaves the pool once and
 * is destroyed after its call; the pool refills in the background; an empty pool means the caller
 * cold-boots. Boots are serialised (`maxConcurrentBoots`) so refilling never starves live calls.
 */
import type { RuntimeName } from "../../schema/exec.js";

export interface PooledVm {
  readonly memoryMb: number;
  readonly dead: boolean;
  readonly exited: Promise<void>;
  destroy(): Promise<void>;
}

export interface PoolConfig {
  /** Ready VMs to keep per runtime; 0 or absent: none. */
  sizes: Partial<Record<RuntimeName, number>>;
  /** Guest memory_mb of pooled VMs; calls asking for another size cold-boot. */
  memoryMb: number;
  maxConcurrentBoots: number;
}

export class WarmPool<V extends PooledVm> {
  private readonly ready = new Map<RuntimeName, V[]>();
  private booting = 0;
  private closed = false;
  private readonly waiters: (() => void)[] = [];
  /** Boot failures in a row; refilling backs off after them instead of spinning. */
  private failures = 0;
  lastError: unknown = null;

  constructor(
    private readonly boot: (runtime: RuntimeName, memoryMb: number) => Promise<V>,
    readonly config: PoolConfig,
  ) {}

  start(): void {
    this.refill();
  }

  /**
   * A ready VM for this call, removed from the pool (never handed out twice), or null. With
   * `refill: false` the caller calls refillNow() once its call is done, so refilling (CPU-heavy
   * under TCG) does not compete with the call on a small host.
   */
  take(runtime: RuntimeName, memoryMb: number, opts: { refill?: boolean } = {}): V | null {
    if (memoryMb !== this.config.memoryMb) return null;
    const list = this.ready.get(runtime) ?? [];
    let vm: V | undefined;
    while ((vm = list.shift())) {
      if (!vm.dead) break;
      void vm.destroy();
    }
    if (opts.refill !== false) this.refill();
    return vm ?? null;
  }

  /** Starts refilling (after take with refill: false). */
  refillNow(): void {
    this.refill();
  }

  readyCount(runtime: RuntimeName): number {
    return (this.ready.get(runtime) ?? []).filter((v) => !v.dead).length;
  }

  /** Resolves when every runtime's pool is full (or the pool is closed). */
  async whenFull(): Promise<void> {
    while (!this.closed && !this.full()) await new Promise<void>((r) => this.waiters.push(r));
  }

  private full(): boolean {
    return Object.entries(this.config.sizes).every(
      ([rt, n]) => this.readyCount(rt as RuntimeName) >= (n ?? 0),
    );
  }

  private notify(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  private refill(): void {
    if (this.closed) return;
    while (this.booting < this.config.maxConcurrentBoots) {
      const runtime = this.neediestAfterInflight();
      if (!runtime) break;
      this.booting++;
      this.inflight.set(runtime, (this.inflight.get(runtime) ?? 0) + 1);
      void this.bootOne(runtime);
    }
  }

  private readonly inflight = new Map<RuntimeName, number>();

  /** The runtime furthest below its target, counting boots already in flight. */
  private neediestAfterInflight(): RuntimeName | null {
    let best: RuntimeName | null = null;
    let deficit = 0;
    for (const [rt, n] of Object.entries(this.config.sizes)) {
      const r = rt as RuntimeName;
      const d = (n ?? 0) - this.readyCount(r) - (this.inflight.get(r) ?? 0);
      if (d > deficit) {
        deficit = d;
        best = r;
      }
    }
    return best;
  }

  private async bootOne(runtime: RuntimeName): Promise<void> {
    try {
      const vm = await this.boot(runtime, this.config.memoryMb);
      this.failures = 0;
      if (this.closed) {
        await vm.destroy();
      } else {
        const list = this.ready.get(runtime) ?? [];
        list.push(vm);
        this.ready.set(runtime, list);
        // A pooled VM that dies (QEMU crash, OOM) is dropped and replaced.
        void vm.exited.then(() => {
          const l = this.ready.get(runtime);
          const i = l?.indexOf(vm) ?? -1;
          if (l && i >= 0) {
            l.splice(i, 1);
            void vm.destroy();
            this.refill();
          }
        });
      }
    } catch (err) {
      this.lastError = err;
      this.failures++;
    } finally {
      this.booting--;
      this.inflight.set(runtime, (this.inflight.get(runtime) ?? 1) - 1);
      this.notify();
      if (this.failures === 0) this.refill();
      else if (!this.closed) {
        const delay = Math.min(30_000, 500 * 2 ** Math.min(this.failures, 6));
        setTimeout(() => this.refill(), delay).unref();
      }
    }
  }

  /** Stops refilling and destroys every pooled VM. */
  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.ready.values()].flat();
    this.ready.clear();
    this.notify();
    await Promise.all(all.map((vm) => vm.destroy()));
    while (this.booting > 0) await new Promise<void>((r) => this.waiters.push(r));
  }
}
