import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Admission } from "../../src/engine/admission.js";
import { isScratchRunError } from "../../src/errors.js";

const tick = () => new Promise((r) => setImmediate(r));

describe("Admission: bounded concurrency, bounded queue, deadlines, aborts", () => {
  it("grants up to maxConcurrent at once and queues the rest in arrival order", async () => {
    const a = new Admission(2, 10, 60_000);
    const r1 = await a.acquire();
    const r2 = await a.acquire();
    assert.equal(a.active, 2);
    const order: number[] = [];
    const w3 = a.acquire().then((r) => (order.push(3), r));
    const w4 = a.acquire().then((r) => (order.push(4), r));
    await tick();
    assert.equal(a.queued, 2);
    assert.deepEqual(order, []);
    r1();
    const r3 = await w3;
    assert.deepEqual(order, [3]);
    assert.equal(a.active, 2);
    r2();
    const r4 = await w4;
    assert.deepEqual(order, [3, 4]);
    r3();
    r4();
    assert.equal(a.active, 0);
    assert.equal(a.queued, 0);
  });

  it("a releaser called twice frees one slot, not two", async () => {
    const a = new Admission(1, 10, 60_000);
    const r1 = await a.acquire();
    const waiting = a.acquire();
    r1();
    r1();
    const r2 = await waiting;
    assert.equal(a.active, 1);
    r2();
    assert.equal(a.active, 0);
  });

  it("refuses with BUSY once the queue is full, and the queue never grows past it", async () => {
    const a = new Admission(1, 2, 60_000);
    const r = await a.acquire();
    const q1 = a.acquire();
    const q2 = a.acquire();
    await assert.rejects(a.acquire(), (e: unknown) => isScratchRunError(e) && e.code === "BUSY");
    assert.equal(a.queued, 2);
    r();
    (await q1)();
    (await q2)();
    assert.equal(a.active, 0);
  });

  it("a queued call past its deadline leaves the queue with BUSY and a fix", async () => {
    const a = new Admission(1, 5, 20);
    const r = await a.acquire();
    await assert.rejects(
      a.acquire(),
      (e: unknown) => isScratchRunError(e) && e.code === "BUSY" && e.fix !== undefined,
    );
    assert.equal(a.queued, 0);
    r();
    assert.equal(a.active, 0, "an expired waiter never takes a slot");
  });

  it("an aborted waiter leaves the queue, and the next waiter gets the slot", async () => {
    const a = new Admission(1, 5, 60_000);
    const r = await a.acquire();
    const ac = new AbortController();
    const aborted = a.acquire(ac.signal);
    const next = a.acquire();
    await tick();
    ac.abort();
    await assert.rejects(aborted, (e: unknown) => isScratchRunError(e) && e.code === "BUSY");
    assert.equal(a.queued, 1);
    r();
    (await next)();
    assert.equal(a.active, 0);
  });
});
