/**
 * Warm pool: per key (a runtime for microVMs; one key for the namespace backend's jails),
 * sandboxes already started to the agent's READY. A sandbox leaves the pool once and is destroyed
 * after its call; the pool refills in the background; an empty pool means the caller starts one
 * cold. Starts are serialised (`maxConcurrentBoots`) so refilling never starves live calls.
 */
import type { RuntimeName } from "../schema/exec.js";

export interface PooledVm {
  readonly memoryMb: number;
  readonly dead: boolean;
  readonly exited: Promise<void>;
  destroy(): Promise<void>;
}

export interface PoolConfig<K extends string = RuntimeName> {
  /** Ready VMs to keep per key (a runtime; the namespace backend's jails have one key); 0 or absent: none. */
  sizes: Partial<Record<K, number>>;
  /** Guest memory_mb of pooled VMs; calls asking for another size cold-boot. */
  memoryMb: number;
  maxConcurrentBoots: number;
}

export class WarmPool<V extends PooledVm, K extends string = RuntimeName> {
  private readonly ready = new Map<K, V[]>();
  private booting = 0;
  private closed = false;
  private readonly waiters: (() => void)[] = [];
  private readonly readyListeners = new Set<() => void>();
  /** Boot failures in a row; refilling backs off after them instead of spinning. */
  private failures = 0;
  lastError: unknown = null;

  constructor(
    private readonly boot: (runtime: K, memoryMb: number) => Promise<V>,
    readonly config: PoolConfig<K>,
  ) {}

  start(): void {
    this.refill();
  }

  /**
   * A ready VM for this call, removed from the pool (never handed out twice), or null. With
   * `refill: false` the caller calls refillNow() once its call is done, so refilling (CPU-heavy
   * under TCG) does not compete with the call on a small host.
   */
  take(runtime: K, memoryMb: number, opts: { refill?: boolean } = {}): V | null {
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

  /**
   * take(), or when nothing is ready but a start is in flight that no other caller is waiting
   * for, that sandbox once it is ready: further along than a start of the caller's own. Null when
   * there is neither, the awaited start failed or went to another caller, or `signal` aborted.
   */
  async takeOrAwait(key: K, memoryMb: number, signal?: AbortSignal): Promise<V | null> {
    const now = this.take(key, memoryMb);
    if (now || memoryMb !== this.config.memoryMb) return now;
    const claimed = this.claimed.get(key) ?? 0;
    if ((this.inflight.get(key) ?? 0) <= claimed) return null;
    this.claimed.set(key, claimed + 1);
    try {
      while (!this.closed && this.readyCount(key) === 0 && (this.inflight.get(key) ?? 0) > 0) {
        if (signal?.aborted) return null;
        await new Promise<void>((r) => {
          this.waiters.push(r);
          signal?.addEventListener("abort", () => r(), { once: true });
        });
      }
      return this.take(key, memoryMb);
    } finally {
      this.claimed.set(key, (this.claimed.get(key) ?? 1) - 1);
    }
  }

  /** Calls `listener` whenever a sandbox joins the pool; returns the unsubscribe. */
  onReady(listener: () => void): () => void {
    this.readyListeners.add(listener);
    return () => this.readyListeners.delete(listener);
  }

  /** Starts refilling (after take with refill: false). */
  refillNow(): void {
    this.refill();
  }

  readyCount(runtime: K): number {
    return (this.ready.get(runtime) ?? []).filter((v) => !v.dead).length;
  }

  /** Resolves when every runtime's pool is full (or the pool is closed). */
  async whenFull(): Promise<void> {
    while (!this.closed && !this.full()) await new Promise<void>((r) => this.waiters.push(r));
  }

  private sizes(): [K, number][] {
    return Object.entries(this.config.sizes).map(([key, n]) => [key as K, Number(n ?? 0)]);
  }

  private full(): boolean {
    return this.sizes().every(([key, n]) => this.readyCount(key) >= n);
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

  private readonly inflight = new Map<K, number>();
  /** Callers of takeOrAwait waiting for a start in flight, per key. */
  private readonly claimed = new Map<K, number>();

  /** The runtime furthest below its target, counting boots already in flight. */
  private neediestAfterInflight(): K | null {
    let best: K | null = null;
    let deficit = 0;
    for (const [r, n] of this.sizes()) {
      const d = n - this.readyCount(r) - (this.inflight.get(r) ?? 0);
      if (d > deficit) {
        deficit = d;
        best = r;
      }
    }
    return best;
  }

  private async bootOne(runtime: K): Promise<void> {
    try {
      const vm = await this.boot(runtime, this.config.memoryMb);
      this.failures = 0;
      if (this.closed) {
        await vm.destroy();
      } else {
        const list = this.ready.get(runtime) ?? [];
        list.push(vm);
        this.ready.set(runtime, list);
        for (const listener of this.readyListeners) listener();
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
