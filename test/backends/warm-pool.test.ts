import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  poolKeyName,
  WarmPool,
  type PooledVm,
  type PoolKey,
  type PoolStart,
} from "../../src/backends/pool.js";

/** The one key of the single-key pools below. */
const K = { runtime: "k", flavour: "plain" } as const;
/** The keys of the two-runtime pools below, by the names their reports give them. */
const KEYS = {
  "a/plain": { runtime: "a", flavour: "plain" },
  "a/preimport": { runtime: "a", flavour: "preimport" },
  "b/plain": { runtime: "b", flavour: "plain" },
  "b/preimport": { runtime: "b", flavour: "preimport" },
  "old/plain": { runtime: "old", flavour: "plain" },
  "new/plain": { runtime: "new", flavour: "plain" },
  "new/preimport": { runtime: "new", flavour: "preimport" },
} as const satisfies Record<string, PoolKey<string>>;

/**
 * The pool's bookkeeping with sandboxes whose starts the test completes by hand: what a caller
 * gets, when it waits, and that nothing is handed out twice. The real sandboxes behind it are
 * tested in test/jail/namespace-pool.test.ts and test/microvm/.
 */

class Fake implements PooledVm {
  static next = 0;
  readonly id = Fake.next++;
  dead = false;
  destroyed = false;
  /** Set when destroy() has finished, `destroyMs` after it began (a cgroup's removal takes time). */
  removed = false;
  destroyMs = 0;
  readonly memoryMb = 256;
  private exit!: () => void;
  readonly exited = new Promise<void>((r) => (this.exit = r));
  die(): void {
    this.dead = true;
    this.exit();
  }
  async destroy(): Promise<void> {
    this.destroyed = true;
    await new Promise((r) => setTimeout(r, this.destroyMs));
    this.removed = true;
  }
}

/** A pool whose starts wait until the test resolves (or rejects) them, in order. */
function manual(size: number, burst?: { extra: number; takes: number; windowMs: number }) {
  const starts: { resolve: (v: Fake) => void; reject: (e: Error) => void }[] = [];
  const pool = new WarmPool<Fake, string>(
    () => new Promise<Fake>((resolve, reject) => starts.push({ resolve, reject })),
    { sizes: [[K, size]], memoryMb: 256, maxConcurrentBoots: 1, ...(burst ? { burst } : {}) },
  );
  const tick = () => new Promise((r) => setImmediate(r));
  const finish = async (fail = false) => {
    await tick();
    const s = starts.shift();
    assert.ok(s, "a start is in flight");
    if (fail) s.reject(new Error("start failed"));
    else s.resolve(new Fake());
    await tick();
  };
  return { pool, starts, finish, tick };
}

describe("WarmPool", () => {
  test("take hands each sandbox out once, skips dead ones and destroys them", async () => {
    const { pool, finish } = manual(2);
    pool.start();
    await finish();
    await finish();
    assert.equal(pool.readyCount(K), 2);
    const first = pool.take(K, 256, { refill: false });
    assert.ok(first);
    const ready = pool.take(K, 256, { refill: false });
    assert.ok(ready);
    assert.notEqual(first, ready);
    assert.equal(pool.take(K, 256, { refill: false }), null);
    await pool.close();
  });

  test("a sandbox that dies while pooled is dropped, destroyed and replaced", async () => {
    const { pool, finish, starts, tick } = manual(1);
    pool.start();
    await finish();
    const vm = pool.take(K, 256, { refill: false });
    assert.ok(vm);
    pool.refillNow();
    await finish();
    assert.equal(pool.readyCount(K), 1);
    // Kill the pooled one: the pool notices through `exited` and starts another.
    const pooled = (pool as unknown as { ready: Map<string, Fake[]> }).ready.get("k/plain")![0]!;
    pooled.die();
    await tick();
    assert.equal(pooled.destroyed, true);
    assert.equal(pool.readyCount(K), 0);
    assert.equal(starts.length, 1, "a replacement is starting");
    await finish();
    assert.equal(pool.readyCount(K), 1);
    await pool.close();
  });

  test("close waits for every destroy the pool started, a pooled sandbox's that died just before too", async () => {
    const { pool, finish, tick, starts } = manual(2);
    pool.start();
    await finish();
    await finish();
    const [a, b] = (pool as unknown as { ready: Map<string, Fake[]> }).ready.get("k/plain")!;
    assert.ok(a && b);
    a.destroyMs = 200;
    b.destroyMs = 10;
    // The server kills its jails as it closes: one leaves the pool through `exited` first.
    a.die();
    await tick();
    assert.equal(a.destroyed, true, "the dead one is being destroyed");
    assert.equal(starts.length, 1, "its replacement is starting");
    const closing = pool.close();
    await finish(); // the replacement arrives after close: destroyed, not pooled
    await closing;
    assert.equal(a.removed, true, "close waited for the dead sandbox's destroy");
    assert.equal(b.removed, true, "close waited for the pooled sandbox's destroy");
  });

  test("takeOrAwait waits for the start in flight; a second caller does not claim it too", async () => {
    const { pool, finish, starts } = manual(1);
    pool.start();
    await new Promise((r) => setImmediate(r));
    assert.equal(starts.length, 1);
    const waiting = pool.takeOrAwait(K, 256);
    const second = await pool.takeOrAwait(K, 256);
    assert.equal(second, null, "only one start in flight, already claimed");
    await finish();
    const got = await waiting;
    assert.ok(got instanceof Fake);
    assert.equal(got.dead, false);
    // Taking it started the refill.
    assert.equal(starts.length, 1);
    await finish();
    await pool.close();
  });

  test("takeOrAwait gives null when the awaited start fails, and at once for another memory size", async () => {
    const { pool, finish } = manual(1);
    pool.start();
    await new Promise((r) => setImmediate(r));
    assert.equal(await pool.takeOrAwait(K, 512), null);
    const waiting = pool.takeOrAwait(K, 256);
    await finish(true);
    assert.equal(await waiting, null);
    await finish(); // the start its take() asked for
    await pool.close();
  });

  test("takeOrAwait gives null when the caller aborts while it waits", async () => {
    const { pool, finish } = manual(1);
    pool.start();
    await new Promise((r) => setImmediate(r));
    const abort = new AbortController();
    const waiting = pool.takeOrAwait(K, 256, abort.signal);
    abort.abort();
    assert.equal(await waiting, null);
    await finish();
    assert.equal(pool.readyCount(K), 1, "the start it waited for still joins the pool");
    await pool.close();
  });

  test("onReady is told of every sandbox that joins the pool, until unsubscribed", async () => {
    const { pool, finish } = manual(1);
    let told = 0;
    const off = pool.onReady(() => told++);
    pool.start();
    await finish();
    assert.equal(told, 1);
    pool.take(K, 256);
    await finish();
    assert.equal(told, 2);
    off();
    pool.take(K, 256);
    await finish();
    assert.equal(told, 2);
    await pool.close();
  });

  test("takeOrAwait with maxWaitMs stops waiting for a slow start, which still joins the pool", async () => {
    const { pool, finish } = manual(1);
    pool.start();
    await new Promise((r) => setImmediate(r));
    const t0 = Date.now();
    assert.equal(await pool.takeOrAwait(K, 256, undefined, { maxWaitMs: 50 }), null);
    assert.ok(Date.now() - t0 >= 45, "it waited");
    await finish();
    assert.equal(pool.readyCount(K), 1);
    await pool.close();
  });

  test("burst: a key taken twice within the window keeps one more ready, then drops it when idle", async () => {
    const { pool, finish, starts, tick } = manual(1, { extra: 1, takes: 2, windowMs: 150 });
    pool.start();
    await finish();
    assert.equal(pool.target(K), 1);
    pool.take(K, 256, { refill: false });
    assert.equal(pool.target(K), 1, "one take is no burst");
    pool.take(K, 256, { refill: false });
    assert.equal(pool.target(K), 2, "two takes are");
    pool.refillNow();
    await finish();
    await finish();
    assert.equal(pool.readyCount(K), 2, "the extra one is kept ready");
    assert.equal(starts.length, 0);
    const kept = pool.readySandboxes()[0]![1];
    // No take for a window: back to the size, the surplus destroyed.
    await new Promise((r) => setTimeout(r, 300));
    await tick();
    assert.equal(pool.target(K), 1);
    assert.equal(pool.readyCount(K), 1);
    assert.equal(kept.filter((v) => v.destroyed).length, 1);
    await pool.close();
  });

  test("whenFull waits for the sizes only, not for a burst's extra", async () => {
    const { pool, finish } = manual(1, { extra: 1, takes: 2, windowMs: 10_000 });
    pool.start();
    await finish();
    pool.take(K, 256, { refill: false });
    pool.take(K, 256, { refill: false });
    pool.refillNow();
    await finish();
    let full = false;
    await Promise.race([
      pool.whenFull().then(() => (full = true)),
      new Promise((r) => setTimeout(r, 50)),
    ]);
    assert.equal(full, true);
    assert.equal(pool.starting, 1, "the extra one is being started");
    await finish();
    await pool.close();
  });
  test("once called: a key of a group nobody has called keeps nothing; its group's first take starts keeping it", async () => {
    const starts: { key: string; resolve: (v: Fake) => void }[] = [];
    const pool = new WarmPool<Fake, string>(
      (key) => new Promise<Fake>((resolve) => starts.push({ key: poolKeyName(key), resolve })),
      {
        sizes: [
          [KEYS["old/plain"], 1],
          [KEYS["new/plain"], 1],
          [KEYS["new/preimport"], 1],
        ],
        memoryMb: 256,
        maxConcurrentBoots: 3,
        onceCalled: ["new"],
      },
    );
    const tick = () => new Promise((r) => setImmediate(r));
    pool.start();
    await tick();
    assert.deepEqual(
      starts.map((s) => s.key),
      ["old/plain"],
      "only the key kept from the start is started",
    );
    assert.equal(pool.size(KEYS["new/plain"]), 0);
    starts.shift()?.resolve(new Fake());
    await tick();
    await pool.whenFull(); // full without the once-called keys: nothing waits for them
    // A call at another memory size still counts as the runtime's first call.
    assert.equal(pool.take(KEYS["new/preimport"], 512), null);
    await tick();
    assert.deepEqual(starts.map((s) => s.key).sort(), ["new/plain", "new/preimport"]);
    assert.equal(pool.size(KEYS["new/plain"]), 1);
    assert.equal(pool.size(KEYS["new/preimport"]), 1);
    for (const s of starts.splice(0)) s.resolve(new Fake());
    await tick();
    assert.equal(pool.readyCount(KEYS["new/plain"]), 1);
    assert.equal(pool.readyCount(KEYS["new/preimport"]), 1);
    assert.equal(pool.readyCount(KEYS["old/plain"]), 1);
    await pool.close();
  });

  /** A pool of four keys (two runtimes, two tiers) starting one at a time, started by hand. */
  function tiered() {
    type Key = "a/plain" | "a/preimport" | "b/plain" | "b/preimport";
    const starts: { key: Key; resolve: (v: Fake) => void }[] = [];
    const pool = new WarmPool<Fake, string>(
      (key) =>
        new Promise<Fake>((resolve) => starts.push({ key: poolKeyName(key) as Key, resolve })),
      {
        sizes: [
          [KEYS["a/plain"], 1],
          [KEYS["a/preimport"], 1],
          [KEYS["b/plain"], 1],
          [KEYS["b/preimport"], 1],
        ],
        memoryMb: 256,
        maxConcurrentBoots: 1,
      },
    );
    const tick = () => new Promise((r) => setImmediate(r));
    /** Finishes the start in flight and says which key the next one is for. */
    const next = async (): Promise<Key | undefined> => {
      await tick();
      starts.shift()?.resolve(new Fake());
      await tick();
      return starts[0]?.key;
    };
    return { pool, starts, next, tick };
  }

  test("refill order: every runtime's plain sandbox before any pre-imported one", async () => {
    const { pool, starts, next, tick } = tiered();
    pool.start();
    await tick();
    // Configured order a/plain, a/preimport, b/plain: b's plain one comes before a's variant.
    assert.equal(starts[0]?.key, "a/plain");
    assert.equal(await next(), "b/plain");
    assert.equal(await next(), "a/preimport");
    assert.equal(await next(), "b/preimport");
    await next();
    await pool.close();
  });

  test("refill order: the runtime called gets its variant before one nobody called", async () => {
    const { pool, starts, next, tick } = tiered();
    pool.start();
    await tick();
    assert.equal(await next(), "b/plain");
    // b is called (its plain sandbox still starting): b's variant goes before a's.
    assert.equal(pool.take(KEYS["b/plain"], 256, { refill: false }), null);
    assert.equal(await next(), "b/preimport");
    assert.equal(await next(), "a/preimport");
    await next();
    assert.equal(starts.length, 0);
    await pool.close();
  });

  test("refill order: a key a call found empty comes first, whatever its tier", async () => {
    const { pool, starts, next, tick } = tiered();
    pool.start();
    await tick();
    assert.equal(await next(), "b/plain");
    assert.equal(await next(), "a/preimport");
    // a's variant is being started; a call finds b's variant empty and a's plain one taken.
    assert.ok(pool.take(KEYS["a/plain"], 256, { refill: false }));
    assert.equal(pool.take(KEYS["b/preimport"], 256, { refill: false }), null);
    // b/preimport was wanted by a call: before a/plain (tier 0, called more recently).
    assert.equal(await next(), "b/preimport");
    assert.equal(await next(), "a/plain");
    await next();
    assert.equal(starts.length, 0);
    await pool.close();
  });

  test("takeOrAwait promotes the sandbox it hands out (take leaves that to its caller)", async () => {
    class Promotable extends Fake {
      promoted = 0;
      async promote(): Promise<void> {
        this.promoted++;
      }
    }
    const made: Promotable[] = [];
    const pool = new WarmPool<Promotable, string>(
      async () => {
        const p = new Promotable();
        made.push(p);
        return p;
      },
      { sizes: [[K, 2]], memoryMb: 256, maxConcurrentBoots: 1 },
    );
    pool.start();
    await pool.whenFull();
    assert.deepEqual(
      made.map((p) => p.promoted),
      [0, 0],
      "pooled sandboxes stay at the background weight",
    );
    const vm = await pool.takeOrAwait(K, 256);
    assert.equal(vm?.promoted, 1);
    assert.equal(made.filter((p) => p.promoted > 0).length, 1);
    await pool.close();
  });

  test("a start a call waits for is claimed (its boot raises it to a call's weight); one nobody waits for is not", async () => {
    const starts: { start: PoolStart; resolve: (v: Fake) => void; raised: number }[] = [];
    const pool = new WarmPool<Fake, string>(
      (_k, _mb, start) =>
        new Promise<Fake>((resolve) => {
          const s = { start, resolve, raised: 0 };
          start.onClaimed(() => s.raised++);
          starts.push(s);
        }),
      { sizes: [[K, 1]], memoryMb: 256, maxConcurrentBoots: 1 },
    );
    pool.start();
    await new Promise((r) => setImmediate(r));
    assert.equal(starts.length, 1);
    assert.equal(
      starts[0]!.start.claimed,
      false,
      "a refill nobody waits for stays background work",
    );
    starts[0]!.resolve(new Fake());
    await new Promise((r) => setImmediate(r));
    // Taking the ready one starts a refill; a second call finds none ready and waits for it.
    assert.ok(await pool.takeOrAwait(K, 256));
    await new Promise((r) => setImmediate(r));
    assert.equal(starts.length, 2);
    assert.equal(starts[1]!.start.claimed, false);
    const waiting = pool.takeOrAwait(K, 256);
    assert.equal(starts[1]!.start.claimed, true, "the call waits for it: the call's work now");
    assert.equal(starts[1]!.raised, 1, "its boot was told once");
    starts[1]!.start.onClaimed(() => starts[1]!.raised++);
    assert.equal(starts[1]!.raised, 2, "a listener added after the claim runs at once");
    starts[1]!.resolve(new Fake());
    assert.ok(await waiting);
    await new Promise((r) => setImmediate(r));
    assert.equal(starts[2]?.start.claimed, false, "the next refill is background again");
    starts[2]!.resolve(new Fake());
    await pool.close();
  });

  test("burst: back-to-back takes allow the burst's concurrent starts; outside a burst, the pool's", async () => {
    let inflight = 0;
    let most = 0;
    const pending: (() => void)[] = [];
    const pool = new WarmPool<Fake, string>(
      () =>
        new Promise<Fake>((resolve) => {
          inflight++;
          most = Math.max(most, inflight);
          pending.push(() => {
            inflight--;
            resolve(new Fake());
          });
        }),
      {
        sizes: [[K, 1]],
        memoryMb: 256,
        maxConcurrentBoots: 1,
        burst: { extra: 2, takes: 2, windowMs: 10_000, maxConcurrentBoots: 2 },
      },
    );
    const tick = () => new Promise((r) => setImmediate(r));
    pool.start();
    await tick();
    assert.equal(inflight, 1);
    pending.shift()!();
    await tick();
    assert.equal(most, 1, "filling to its size: one start at a time");
    assert.ok(pool.take(K, 256));
    await tick();
    assert.equal(inflight, 1, "one take is no burst");
    assert.equal(pool.take(K, 256), null);
    await tick();
    assert.equal(pool.target(K), 3);
    assert.equal(inflight, 2, "in a burst: two starts at once");
    while (pending.length) {
      pending.shift()!();
      await tick();
    }
    assert.equal(most, 2);
    assert.equal(pool.readyCount(K), 3);
    await pool.close();
  });

  test("status: each key's state and since when; fullAfterMs once every key was full", async () => {
    const { pool, starts, next, tick } = tiered();
    assert.equal(pool.fullAfterMs, null);
    pool.start();
    await tick();
    const states = () => Object.fromEntries(pool.report().kinds.map((k) => [k.kind, k.state]));
    assert.deepEqual(states(), {
      "a/plain": "building",
      "a/preimport": "empty",
      "b/plain": "empty",
      "b/preimport": "empty",
    });
    const since = Date.parse(pool.report().kinds[0]!.since);
    await next();
    assert.equal(states()["a/plain"], "full");
    assert.ok(Date.parse(pool.report().kinds[0]!.since) >= since);
    assert.equal(pool.report().kinds[0]!.runtime, "a", "the key's group");
    assert.equal(states()["b/plain"], "building");
    assert.equal(pool.fullAfterMs, null, "not every key is full yet");
    await next();
    await next();
    await next();
    assert.equal(starts.length, 0);
    assert.ok(
      Object.values(states()).every((s) => s === "full"),
      JSON.stringify(states()),
    );
    assert.ok(pool.fullAfterMs !== null && pool.fullAfterMs >= 0);
    // A take leaves its key short and refilling.
    assert.ok(pool.take(KEYS["a/plain"], 256));
    assert.equal(states()["a/plain"], "building");
    await next();
    await pool.close();
  });
});
