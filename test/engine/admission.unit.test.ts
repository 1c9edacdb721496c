import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Admission, type Admitted } from "../../src/engine/admission.js";
import type { Backend, BackendOutcome, RunOptions, SandboxJob } from "../../src/backends/types.js";
import { Engine } from "../../src/engine/engine.js";
import { isScratchRunError } from "../../src/errors.js";
import { parseExecRequest } from "../../src/schema/validate.js";

const tick = () => new Promise((r) => setImmediate(r));

/** The slot's releaser; fails the test when the call was not admitted. */
async function slot(p: Promise<Admitted>): Promise<() => void> {
  const a = await p;
  assert.ok(a.ok, "admitted");
  return a.release;
}

describe("Admission: bounded concurrency, bounded queue, deadlines, aborts", () => {
  it("grants up to maxConcurrent at once and queues the rest in arrival order", async () => {
    const a = new Admission(2, 10, 60_000);
    const r1 = await slot(a.acquire());
    const r2 = await slot(a.acquire());
    assert.equal(a.active, 2);
    const order: number[] = [];
    const w3 = slot(a.acquire()).then((r) => (order.push(3), r));
    const w4 = slot(a.acquire()).then((r) => (order.push(4), r));
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
    const r1 = await slot(a.acquire());
    const waiting = slot(a.acquire());
    r1();
    r1();
    const r2 = await waiting;
    assert.equal(a.active, 1);
    r2();
    assert.equal(a.active, 0);
  });

  it("a released slot goes to the first waiter: a call arriving in between queues behind it", async () => {
    const a = new Admission(1, 10, 60_000);
    const r1 = await slot(a.acquire());
    const first = slot(a.acquire());
    await tick();
    r1();
    // Before the waiter resumes: the newcomer must not take the slot it was handed.
    const late = slot(a.acquire());
    await tick();
    assert.equal(a.active, 1, "never more than maxConcurrent");
    assert.equal(a.queued, 1, "the newcomer waits");
    (await first)();
    (await late)();
    assert.equal(a.active, 0);
  });

  it("refuses with BUSY once the queue is full, and the queue never grows past it", async () => {
    const a = new Admission(1, 2, 60_000);
    const r = await slot(a.acquire());
    const q1 = slot(a.acquire());
    const q2 = slot(a.acquire());
    await assert.rejects(a.acquire(), (e: unknown) => isScratchRunError(e) && e.code === "BUSY");
    assert.equal(a.queued, 2);
    r();
    (await q1)();
    (await q2)();
    assert.equal(a.active, 0);
  });

  it("a queued call past its deadline leaves the queue with BUSY and a fix", async () => {
    const a = new Admission(1, 5, 20);
    const r = await slot(a.acquire());
    await assert.rejects(
      a.acquire(),
      (e: unknown) => isScratchRunError(e) && e.code === "BUSY" && e.fix !== undefined,
    );
    assert.equal(a.queued, 0);
    r();
    assert.equal(a.active, 0, "an expired waiter never takes a slot");
  });

  it("a waiter whose signal aborts is answered cancelled, not BUSY, and the next waiter gets the slot", async () => {
    const a = new Admission(1, 5, 60_000);
    const r = await slot(a.acquire());
    const ac = new AbortController();
    const aborted = a.acquire(ac.signal);
    const next = slot(a.acquire());
    await tick();
    ac.abort();
    assert.deepEqual(await aborted, { ok: false, reason: "cancelled" });
    assert.equal(a.queued, 1);
    r();
    (await next)();
    assert.equal(a.active, 0, "the cancelled waiter never took a slot");
  });

  it("a signal aborted before the call arrives takes no slot, free or not, and never waits", async () => {
    const a = new Admission(1, 5, 60_000);
    const gone = AbortSignal.abort();
    assert.deepEqual(await a.acquire(gone), { ok: false, reason: "cancelled" });
    assert.equal(a.active, 0, "a free slot stays free");
    const r = await slot(a.acquire());
    // With the slot taken, an already-aborted signal would never fire its abort event: the call
    // must not sit in the queue until its deadline.
    assert.deepEqual(await a.acquire(gone), { ok: false, reason: "cancelled" });
    assert.equal(a.queued, 0);
    r();
    assert.equal(a.active, 0);
  });

  it("a waiter granted just before its signal aborts keeps its slot (the run answers the cancel)", async () => {
    const a = new Admission(1, 5, 60_000);
    const r = await slot(a.acquire());
    const ac = new AbortController();
    const waiting = a.acquire(ac.signal);
    await tick();
    r();
    ac.abort();
    const got = await waiting;
    assert.equal(got.ok, true);
    if (got.ok) got.release();
    assert.equal(a.active, 0);
  });
});

/** A backend whose run() never returns until its signal aborts, counting the jobs it was given. */
class HeldBackend implements Backend {
  readonly name = "namespace" as const;
  readonly isolation = "namespace" as const;
  readonly codeIds = null;
  runs = 0;
  run(_job: SandboxJob, options: RunOptions): Promise<BackendOutcome> {
    this.runs++;
    return new Promise((resolve) => {
      const done = () =>
        resolve({
          agent: {
            exit: {
              reason: "killed",
              value: 0,
              stdoutTruncated: false,
              stderrTruncated: false,
              durationMs: 5,
              oomKills: 0,
              message: "",
            },
            stdout: new Uint8Array(),
            stderr: new Uint8Array(),
            shown: [],
            files: [],
            failure: null,
            startedAfterMs: 1,
            pid: 2,
          },
          isolation: this.isolation,
          oomKilled: false,
          sandboxReadyMs: 0,
        });
      if (options.signal.aborted) done();
      else options.signal.addEventListener("abort", done, { once: true });
    });
  }
  openSession(): Promise<never> {
    return Promise.reject(new Error("no sessions here"));
  }
  onSandboxReady(): () => void {
    return () => {};
  }
  pooled() {
    return { ready: 0, target: 0 };
  }
  pools() {
    return { kinds: [], fullAfterMs: null };
  }
  async whenPoolsFull() {
    return null;
  }
  async close(): Promise<void> {}
}

describe("Engine: a call cancelled while queued is answered like a cancelled running call", () => {
  it("exit_reason cancelled, no sandbox started, its slot never taken", async () => {
    const backend = new HeldBackend();
    const engine = new Engine(backend, {
      maxConcurrent: 1,
      maxQueued: 4,
      queueDeadlineMs: 60_000,
      ceiling: { timeoutMs: 900_000, memoryMb: 4096, memorySource: "host" },
    });
    const req = parseExecRequest({ runtime: "bash", code: "sleep 5", return_files: ["out.txt"] });
    const running = new AbortController();
    const queued = new AbortController();
    const stages: string[] = [];
    const first = engine.execute(req, { signal: running.signal });
    await tick();
    const second = engine.execute(req, {
      signal: queued.signal,
      onProgress: (p) => stages.push(p.stage),
    });
    await tick();
    assert.equal(engine.admission.queued, 1);
    queued.abort();
    const inQueue = await second;
    running.abort();
    const inRun = await first;
    assert.equal(backend.runs, 1, "the queued call never reached the backend");
    assert.deepEqual(stages, ["queued"], "it never reported starting");
    assert.equal(inQueue.result.exit_reason, "cancelled");
    assert.equal(inRun.result.exit_reason, "cancelled");
    for (const k of ["exit_code", "signal", "message", "isolation", "stdout", "stderr"] as const)
      assert.deepEqual(inQueue.result[k], inRun.result[k], k);
    assert.deepEqual(
      inQueue.result.files.map((f) => f.path),
      ["/home/user/out.txt"],
      "each requested file is accounted for",
    );
    assert.equal(engine.admission.active, 0);
    assert.equal(engine.admission.queued, 0);
  });
});
