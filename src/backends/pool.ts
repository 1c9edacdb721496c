/**
 * Warm pool: per key (a runtime and flavour for microVMs; network mode, runtime and flavour for
 * the namespace backend's jails), sandboxes already started to the agent's READY. A sandbox leaves
 * the pool once and is destroyed after its call; the pool refills in the background; an empty pool
 * means the caller starts one cold. Starts are serialised (`maxConcurrentBoots`) so refilling never
 * starves live calls. With `burst`, a key that served calls back to back keeps more ready until it
 * has been idle for a while (then the extra sandboxes are destroyed).
 */
import type { RuntimeName } from "../schema/exec.js";
import type { NetworkMode } from "../schema/names.js";
import type { Flavour } from "./prestart.js";

/**
 * What a pooled sandbox is: its runtime, its flavour (whether its Python pre-imported) and, for
 * the namespace backend's jails, its network mode (fixed when a jail starts). Keys are grouped by
 * runtime; a pre-imported flavour is refilled after every runtime's plain one (its tier).
 */
export interface PoolKey<R extends string = RuntimeName> {
  readonly runtime: R;
  readonly flavour: Flavour;
  readonly network?: NetworkMode;
}

/** A key's name in reports (`runtime/flavour`, or `network/runtime/flavour`); never parsed. */
export function poolKeyName(k: PoolKey<string>): string {
  return k.network ? `${k.network}/${k.runtime}/${k.flavour}` : `${k.runtime}/${k.flavour}`;
}

/** Refill tier: every runtime's plain sandbox before any pre-imported one. */
const tierOf = (k: PoolKey<string>): number => (k.flavour === "preimport" ? 1 : 0);

export interface PooledVm {
  readonly memoryMb: number;
  readonly dead: boolean;
  readonly exited: Promise<void>;
  destroy(): Promise<void>;
  /** Its host processes and the memory its cgroup is charged now (what an idle one costs). */
  usage?(): Promise<{ pids: number[]; memoryBytes: number }>;
  /**
   * Raises it from the background CPU weight it was started at to a call's (takeOrAwait does,
   * before handing it to its call).
   */
  promote?(): Promise<void>;
  /** Lowers it back to the background CPU weight (a claimed start that no call took). */
  demote?(): Promise<void>;
}

/**
 * A start in flight as its boot function sees it. Started as background work, it becomes a call's
 * work when a call finds its key empty and waits for it (takeOrAwait): the boot function then
 * raises its CPU weight to a call's, so the call does not wait on work the host ranks below
 * everything else (issue 30, calls first).
 */
export interface PoolStart {
  /** A call is waiting for a start of this key. */
  readonly claimed: boolean;
  /** Runs `f` once a call waits for this start (at once if one already does). */
  onClaimed(f: () => void): void;
}

class Start implements PoolStart {
  claimed = false;
  private readonly listeners: (() => void)[] = [];
  onClaimed(f: () => void): void {
    if (this.claimed) f();
    else this.listeners.push(f);
  }
  claim(): void {
    if (this.claimed) return;
    this.claimed = true;
    for (const f of this.listeners.splice(0)) f();
  }
}

export interface PoolConfig<R extends string = RuntimeName> {
  /** Ready sandboxes to keep per key (0: none), in the order refills break ties by. */
  sizes: readonly (readonly [PoolKey<R>, number])[];
  /** Guest memory_mb of pooled VMs; calls asking for another size cold-boot. */
  memoryMb: number;
  maxConcurrentBoots: number;
  /**
   * A key from which `takes` sandboxes were taken within `windowMs` keeps `extra` more ready until
   * `windowMs` passes without a take; then the extra ones are destroyed. While any key is in such a
   * burst, up to `maxConcurrentBoots` (default the pool's) starts may be in flight: back-to-back
   * calls take sandboxes faster than one start at a time makes them. Absent: fixed sizes.
   */
  burst?: { extra: number; takes: number; windowMs: number; maxConcurrentBoots?: number };
  /**
   * Runtimes whose keys are kept only once called: such a key's size counts from the first take
   * of any key of its runtime on, and is 0 before (no sandbox, no memory, no CPU for a runtime
   * nobody calls). Other runtimes' sizes count from the start.
   */
  onceCalled?: readonly R[];
}

/**
 * One key's state: "full" (its size ready), "building" (short, a start in flight), "empty"
 * (short, nothing in flight: queued behind other keys or backing off after a failed start), "off"
 * (kept at size 0: a pool of 0, or a runtime pooled once called that nobody has called).
 */
export type PoolState = "full" | "building" | "empty" | "off";

/** One warm pool (a key: a runtime, its flavour and, namespace backend, its network mode). */
export interface PoolStatus {
  kind: string;
  /** The key's group (its runtime). */
  runtime: string;
  state: PoolState;
  ready: number;
  size: number;
  /** When it entered this state (ISO 8601). */
  since: string;
}

/** Every pool's state and how long after start they were all first full (null: not yet). */
export interface PoolsReport {
  kinds: PoolStatus[];
  fullAfterMs: number | null;
}

/**
 * The pool's bookkeeping is by key name (K below): a map key must be a value, and the typed key
 * of a name is kept beside it (`keys`), never parsed back.
 */
type K = string;

export class WarmPool<V extends PooledVm, R extends string = RuntimeName> {
  /** Every key the pool has been configured with or asked for, by name. */
  private readonly keys = new Map<K, PoolKey<R>>();
  private readonly ready = new Map<K, V[]>();
  private booting = 0;
  private closed = false;
  private readonly waiters: (() => void)[] = [];
  private readonly readyListeners = new Set<() => void>();
  /** Boot failures in a row; refilling backs off after them instead of spinning. */
  private failures = 0;
  lastError: unknown = null;
  /** When sandboxes were last taken, per key (burst only; at most `burst.takes` kept). */
  private readonly takes = new Map<K, number[]>();
  private shrinkTimer: NodeJS.Timeout | null = null;
  /** Destroys the pool started (dead, surplus or pooled at close); close() waits for them all. */
  private readonly destroying = new Set<Promise<void>>();
  /** The `onceCalled` runtimes that have been called (their sizes count from then on). */
  private readonly called = new Set<R>();
  /** When each group (runtime) was last taken from: refills favour the most recently called. */
  private readonly calledAt = new Map<string, number>();
  /** Keys a take found empty, until a sandbox of theirs is ready: refilled before all others. */
  private readonly wanted = new Set<K>();

  /** Each key's last state and since when (status()). */
  private readonly states = new Map<K, { state: PoolState; sinceMs: number }>();
  private startedAt = Date.now();
  /** ms from start() until every key first had its size ready; null until then. */
  fullAfterMs: number | null = null;

  constructor(
    private readonly boot: (key: PoolKey<R>, memoryMb: number, start: PoolStart) => Promise<V>,
    readonly config: PoolConfig<R>,
  ) {
    for (const [key] of config.sizes) this.keys.set(poolKeyName(key), key);
  }

  /** The name of `key`, remembering the key by it. */
  private nameOf(key: PoolKey<R>): K {
    const name = poolKeyName(key);
    if (!this.keys.has(name)) this.keys.set(name, key);
    return name;
  }

  start(): void {
    this.startedAt = Date.now();
    this.refill();
    this.noteStates();
  }

  /** Every key's state now and since when, in configured order, and fullAfterMs. */
  report(): PoolsReport {
    this.noteStates();
    const kinds = this.sizes().map(([key, size]) => {
      const s = this.states.get(key)!;
      return {
        kind: key,
        runtime: this.keys.get(key)!.runtime,
        state: s.state,
        ready: this.readyNamed(key),
        size,
        since: new Date(s.sinceMs).toISOString(),
      };
    });
    return { kinds, fullAfterMs: this.fullAfterMs };
  }

  /** Resolves with fullAfterMs once every key is first full, or null if closed first. */
  async whenFirstFull(): Promise<number | null> {
    await this.whenFull();
    return this.fullAfterMs;
  }

  private stateOf(key: K, size: number): PoolState {
    if (size === 0) return "off";
    if (this.readyNamed(key) >= size) return "full";
    return (this.inflight.get(key) ?? 0) > 0 ? "building" : "empty";
  }

  /** Records state changes (with their time) and the first moment every key was full. */
  private noteStates(): void {
    const now = Date.now();
    for (const [key, size] of this.sizes()) {
      const state = this.stateOf(key, size);
      if (this.states.get(key)?.state !== state) this.states.set(key, { state, sinceMs: now });
    }
    if (this.fullAfterMs === null && !this.closed && this.full())
      this.fullAfterMs = now - this.startedAt;
  }

  /**
   * A ready VM for this call, removed from the pool (never handed out twice), or null; still at
   * the background CPU weight (takeOrAwait promotes it). With
   * `refill: false` the caller calls refillNow() once its call is done, so refilling (CPU-heavy
   * under TCG) does not compete with the call on a small host.
   */
  take(key: PoolKey<R>, memoryMb: number, opts: { refill?: boolean } = {}): V | null {
    return this.takeNamed(this.nameOf(key), memoryMb, opts);
  }

  private takeNamed(runtime: K, memoryMb: number, opts: { refill?: boolean }): V | null {
    this.calledAt.set(this.groupOf(runtime), Date.now());
    this.noteCalled(runtime, opts.refill !== false);
    if (memoryMb !== this.config.memoryMb) return null;
    this.noteTake(runtime);
    const list = this.ready.get(runtime) ?? [];
    let vm: V | undefined;
    while ((vm = list.shift())) {
      if (!vm.dead) break;
      this.discard(vm);
    }
    if (!vm && this.sizeNamed(runtime) > 0) this.wanted.add(runtime);
    if (opts.refill !== false) this.refill();
    return vm ?? null;
  }

  /**
   * take(), or when nothing is ready but a start is in flight that no other caller is waiting
   * for, that sandbox once it is ready: further along than a start of the caller's own. Null when
   * there is neither, the awaited start failed or went to another caller, or `signal` aborted.
   */
  async takeOrAwait(
    key: PoolKey<R>,
    memoryMb: number,
    signal?: AbortSignal,
    opts: { refill?: boolean; maxWaitMs?: number } = {},
  ): Promise<V | null> {
    const vm = await this.takeOrAwaitAny(this.nameOf(key), memoryMb, signal, opts);
    // A sandbox whose cgroup is gone fails its call on its own; its weight does not matter then.
    await vm?.promote?.().catch(() => {});
    return vm;
  }

  private async takeOrAwaitAny(
    key: K,
    memoryMb: number,
    signal: AbortSignal | undefined,
    opts: { refill?: boolean; maxWaitMs?: number },
  ): Promise<V | null> {
    const now = this.takeNamed(key, memoryMb, opts);
    if (now || memoryMb !== this.config.memoryMb) return now;
    const claimed = this.claimed.get(key) ?? 0;
    if ((this.inflight.get(key) ?? 0) <= claimed) return null;
    this.claimed.set(key, claimed + 1);
    // Which start will be ready first is not known: every one of this key in flight is the
    // call's work now (at most the boot limit's few).
    for (const start of this.starts.get(key) ?? []) start.claim();
    // The wait's own bound (a referenced timer: the caller's call keeps the process alive).
    const bound = new AbortController();
    const timer =
      opts.maxWaitMs === undefined ? null : setTimeout(() => bound.abort(), opts.maxWaitMs);
    const stop = AbortSignal.any([...(signal ? [signal] : []), bound.signal]);
    try {
      while (!this.closed && this.readyNamed(key) === 0 && (this.inflight.get(key) ?? 0) > 0) {
        if (stop.aborted) return null;
        await new Promise<void>((r) => {
          this.waiters.push(r);
          stop.addEventListener("abort", () => r(), { once: true });
        });
      }
      if (stop.aborted) return null;
      const vm = this.takeReady(key);
      if (opts.refill !== false) this.refill();
      return vm;
    } finally {
      if (timer) clearTimeout(timer);
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

  /** The ready sandboxes of every key (for measuring what they cost; they stay in the pool). */
  readySandboxes(): [K, V[]][] {
    return [...this.ready].map(([k, list]) => [k, list.filter((v) => !v.dead)]);
  }

  /** Sandboxes being started right now (refills), of every key. */
  get starting(): number {
    return this.booting;
  }

  /** Ready sandboxes of `key` now. */
  readyCount(key: PoolKey<R>): number {
    return this.readyNamed(poolKeyName(key));
  }

  private readyNamed(key: K): number {
    return (this.ready.get(key) ?? []).filter((v) => !v.dead).length;
  }

  /**
   * The key's size as configured, 0 for a key kept only once called while its group has not
   * been (a burst's extra comes on top: target()).
   */
  size(key: PoolKey<R>): number {
    return this.sizeNamed(poolKeyName(key));
  }

  private sizeNamed(key: K): number {
    const runtime = this.keys.get(key)?.runtime;
    if (runtime === undefined) return 0;
    if (this.config.onceCalled?.includes(runtime) && !this.called.has(runtime)) return 0;
    return this.config.sizes.find(([k]) => poolKeyName(k) === key)?.[1] ?? 0;
  }

  /** A first take of a once-called runtime starts keeping its keys (refilled now unless told not). */
  private noteCalled(key: K, refill: boolean): void {
    const runtime = this.keys.get(key)?.runtime;
    if (runtime === undefined || !this.config.onceCalled?.includes(runtime)) return;
    if (this.called.has(runtime)) return;
    this.called.add(runtime);
    if (refill) this.refill();
  }

  /** A ready sandbox of this key without counting a take (the take was counted already). */
  private takeReady(key: K): V | null {
    const list = this.ready.get(key) ?? [];
    let vm: V | undefined;
    while ((vm = list.shift())) {
      if (!vm.dead) break;
      this.discard(vm);
    }
    return vm ?? null;
  }

  /** How many sandboxes of this key the pool keeps now (its size, plus a burst's extra). */
  target(key: PoolKey<R>): number {
    return this.targetNamed(poolKeyName(key));
  }

  private targetNamed(key: K): number {
    const size = this.sizeNamed(key);
    const b = this.config.burst;
    if (!b || size === 0) return size;
    const recent = (this.takes.get(key) ?? []).filter((t) => Date.now() - t < b.windowMs);
    return recent.length >= b.takes ? size + b.extra : size;
  }

  private noteTake(key: K): void {
    const b = this.config.burst;
    if (!b) return;
    const list = [...(this.takes.get(key) ?? []), Date.now()].slice(-b.takes);
    this.takes.set(key, list);
    this.scheduleShrink();
  }

  /** After a burst window passes, destroys ready sandboxes beyond each key's target. */
  private scheduleShrink(): void {
    const b = this.config.burst;
    if (!b || this.closed) return;
    if (this.shrinkTimer) clearTimeout(this.shrinkTimer);
    this.shrinkTimer = setTimeout(() => {
      this.shrinkTimer = null;
      let pending = false;
      for (const [key, list] of this.ready) {
        const surplus = list.length - this.targetNamed(key);
        for (const vm of list.splice(0, Math.max(0, surplus))) this.discard(vm);
        if (this.targetNamed(key) > this.sizeNamed(key)) pending = true;
      }
      if (pending) this.scheduleShrink();
    }, b.windowMs + 50);
    this.shrinkTimer.unref();
  }

  /** Resolves when every runtime's pool is full (or the pool is closed). */
  async whenFull(): Promise<void> {
    while (!this.closed && !this.full()) await new Promise<void>((r) => this.waiters.push(r));
  }

  /** Every configured key's name and size now, in configured order. */
  private sizes(): [K, number][] {
    return this.config.sizes.map(([key]) => {
      const name = poolKeyName(key);
      return [name, this.sizeNamed(name)];
    });
  }

  /** Every key has its size ready (a burst's extra is not waited for). */
  private full(): boolean {
    return this.sizes().every(([key, n]) => this.readyNamed(key) >= n);
  }

  private notify(): void {
    this.noteStates();
    for (const w of this.waiters.splice(0)) w();
  }

  /** How many starts may be in flight now: more while a key is in a burst (config.burst). */
  private bootLimit(): number {
    const b = this.config.burst;
    const base = this.config.maxConcurrentBoots;
    if (!b?.maxConcurrentBoots) return base;
    const inBurst = this.sizes().some(([key, size]) => this.targetNamed(key) > size);
    return inBurst ? Math.max(base, b.maxConcurrentBoots) : base;
  }

  private refill(): void {
    if (this.closed) return;
    while (this.booting < this.bootLimit()) {
      const runtime = this.neediestAfterInflight();
      if (!runtime) break;
      this.booting++;
      this.inflight.set(runtime, (this.inflight.get(runtime) ?? 0) + 1);
      void this.bootOne(runtime);
    }
    this.noteStates();
  }

  private readonly inflight = new Map<K, number>();
  /** The starts in flight per key, which a waiting call claims. */
  private readonly starts = new Map<K, Set<Start>>();
  /** Callers of takeOrAwait waiting for a start in flight, per key. */
  private readonly claimed = new Map<K, number>();

  /** A key's runtime (the refill order's group). */
  private groupOf(key: K): string {
    return this.keys.get(key)?.runtime ?? key;
  }

  /**
   * The key to start a sandbox for next, of those below their target (counting starts in
   * flight): one a call found empty first, then by tier (plain before pre-imported), then the
   * runtime called most recently (one never called last), then the largest shortfall, then the
   * configured order. Calls first: what is being asked for is built before what might be.
   */
  private neediestAfterInflight(): K | null {
    const short = this.sizes()
      .map(([key], order) => ({
        key,
        order,
        deficit: this.targetNamed(key) - this.readyNamed(key) - (this.inflight.get(key) ?? 0),
      }))
      .filter((c) => c.deficit > 0);
    const rank = (c: (typeof short)[number]): number[] => [
      this.wanted.has(c.key) ? 0 : 1,
      tierOf(this.keys.get(c.key)!),
      -(this.calledAt.get(this.groupOf(c.key)) ?? 0),
      -c.deficit,
      c.order,
    ];
    const before = (a: number[], b: number[]) => {
      for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i]! < b[i]!;
      return false;
    };
    let best: (typeof short)[number] | null = null;
    for (const c of short) if (!best || before(rank(c), rank(best))) best = c;
    return best?.key ?? null;
  }

  private async bootOne(runtime: K): Promise<void> {
    const start = new Start();
    const starts = this.starts.get(runtime) ?? new Set<Start>();
    starts.add(start);
    this.starts.set(runtime, starts);
    try {
      const vm = await this.boot(this.keys.get(runtime)!, this.config.memoryMb, start);
      this.failures = 0;
      if (this.closed) {
        await vm.destroy();
      } else {
        const list = this.ready.get(runtime) ?? [];
        list.push(vm);
        this.ready.set(runtime, list);
        this.wanted.delete(runtime);
        // A start a call waited for was raised to a call's weight; if no call waits for this key
        // any more (it took another sandbox), it parks at the background weight like any other.
        if (start.claimed && (this.claimed.get(runtime) ?? 0) === 0)
          void vm.demote?.().catch(() => {});
        for (const listener of this.readyListeners) listener();
        // A pooled VM that dies (QEMU crash, OOM) is dropped and replaced.
        void vm.exited.then(() => {
          const l = this.ready.get(runtime);
          const i = l?.indexOf(vm) ?? -1;
          if (l && i >= 0) {
            l.splice(i, 1);
            this.discard(vm);
            this.refill();
          }
        });
      }
    } catch (err) {
      this.lastError = err;
      this.failures++;
    } finally {
      starts.delete(start);
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

  /**
   * Destroys a sandbox that left the pool without a caller, tracked so close() waits for it: a
   * pooled sandbox killed as the server closes leaves through `exited`, and the process must not
   * exit before its cgroup and uid are gone.
   */
  private discard(vm: V): void {
    const p = vm.destroy().catch(() => {});
    this.destroying.add(p);
    void p.then(() => this.destroying.delete(p));
  }

  /**
   * Stops refilling, destroys every pooled VM and waits for the starts in flight (each destroys
   * its sandbox once it sees the pool closed) and for every destroy the pool started.
   */
  async close(): Promise<void> {
    this.closed = true;
    if (this.shrinkTimer) clearTimeout(this.shrinkTimer);
    const all = [...this.ready.values()].flat();
    this.ready.clear();
    this.notify();
    for (const vm of all) this.discard(vm);
    while (this.booting > 0) await new Promise<void>((r) => this.waiters.push(r));
    await Promise.all(this.destroying);
  }
}

/**
 * What a backend tells of its warm pool (Backend's onSandboxReady, whenPoolsFull, pools, pooled),
 * written once for both backends: each keeps its pool as `pool`.
 */
export abstract class PooledBackend<V extends PooledVm> {
  abstract readonly pool: WarmPool<V>;

  onSandboxReady(listener: () => void): () => void {
    return this.pool.onReady(listener);
  }

  whenPoolsFull(): Promise<number | null> {
    return this.pool.whenFirstFull();
  }

  pools(): PoolsReport {
    return this.pool.report();
  }

  /** Pooled sandboxes that would serve this runtime, of every flavour (and network mode). */
  pooled(runtime: RuntimeName): { ready: number; target: number } {
    let ready = 0;
    let target = 0;
    for (const [key] of this.pool.config.sizes) {
      if (key.runtime !== runtime) continue;
      ready += this.pool.readyCount(key);
      target += this.pool.size(key);
    }
    return { ready, target };
  }
}
