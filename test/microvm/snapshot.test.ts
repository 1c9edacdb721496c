import { skipOutsideCi } from "../helpers/ci.js";
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  createMicrovmBackend,
  type MicrovmBackend,
  type PoolOptions,
} from "../../src/backends/microvm/create.js";
import { readFileSync } from "node:fs";
import { descendants, running } from "../helpers/procs.js";

import {
  canRunMicrovm,
  assertNoLeftovers,
  hostLeftovers,
  makeTinyRoot,
  shJob,
  text,
  type TinyRoot,
} from "./fixture.js";

const skip = skipOutsideCi(canRunMicrovm());

const signal = () => new AbortController().signal;

// One backend in restore mode for the whole file: its template is built once (~2-4 s under TCG)
// and every call below runs in a clone restored from it.
/**
 * A restore-mode backend on a tiny root for the calling describe(), with the host checked for
 * leftovers once it is closed; `ready` runs before the tests.
 */
function tinyBackend(
  pool: PoolOptions,
  ready: (b: MicrovmBackend) => Promise<void> = async () => {},
): () => MicrovmBackend {
  let root: TinyRoot;
  let backend: MicrovmBackend | undefined;
  let before0: Awaited<ReturnType<typeof hostLeftovers>>;
  before(async () => {
    root = makeTinyRoot();
    before0 = await hostLeftovers();
    backend = await createMicrovmBackend({ rootfsDir: root.rootfs, disk: root.disk, pool });
    await ready(backend);
  });
  after(async () => {
    await backend?.close();
    root.cleanup();
    await assertNoLeftovers(before0, "a VM or template left something behind");
  });
  return () => {
    if (!backend) throw new Error("the backend is not started yet");
    return backend;
  };
}

describe("microvm snapshot/restore", { skip: skip ?? false, timeout: 300_000 }, () => {
  let backend: MicrovmBackend;
  const started = tinyBackend({ sizes: { bash: 2 }, mode: "restore" }, async (b) => {
    await b.pool.whenFull();
    assert.equal(b.templateError, null);
  });
  before(() => {
    backend = started();
  });

  const run = (code: string, overrides: Parameters<typeof shJob>[1] = {}) =>
    backend.run(shJob(code, overrides), { signal: signal() });

  test("clones of one template do not share RNG output, boot id or /tmp; each serves one call", async () => {
    const code =
      "cat /tmp/mark 2>/dev/null; echo mark > /tmp/mark; cat /proc/sys/kernel/random/boot_id; " +
      "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; date +%s";
    const templatesBefore = backend.counters.templates;
    const clonedBefore = backend.counters.clonedCalls;
    const results = await Promise.all([run(code), run(code), run(code)]);
    assert.equal(backend.counters.templates, templatesBefore, "a new template was built");
    assert.equal(backend.counters.clonedCalls - clonedBefore, 3, "a call did not run in a clone");
    const seen = { boot: new Set<string>(), rnd: new Set<string>() };
    for (const r of results) {
      assert.equal(r.agent.failure, null);
      assert.equal(r.agent.exit?.reason, "exited");
      const [boot, rnd, secs] = text(r.agent.stdout).split("\n");
      assert.match(boot ?? "", /^[0-9a-f-]{36}$/, "no 'mark' line: no clone saw another's /tmp");
      assert.match(rnd ?? "", /^[0-9a-f]{64}$/);
      seen.boot.add(boot!);
      seen.rnd.add(rnd!);
      // The guest clock was set from the host on restore, not left at the template's save time.
      assert.ok(Math.abs(Number(secs) - Date.now() / 1000) < 120, `guest clock ${secs}`);
    }
    assert.equal(seen.boot.size, 3, "two clones share a boot id");
    assert.equal(seen.rnd.size, 3, "two clones produced the same random bytes");
  });

  test("a clone is destroyed after its call: its processes are gone before run() settles", async () => {
    let pidsDuring: number[] = [];
    const r = await backend.run(shJob("echo hi; sleep 0.2"), {
      signal: signal(),
      onEvent: (e) => {
        if (e.type === "started") void backend.livePids(true).then((p) => (pidsDuring = p));
      },
    });
    assert.equal(text(r.agent.stdout), "hi\n");
    assert.ok(pidsDuring.length > 0, "saw no process of the serving VM");
    // Gone, or a zombie (killed, only waiting to be reaped by whoever inherited it). kill() waited
    // until the cgroup was empty, and the kernel takes a SIGKILLed process out of its cgroup a
    // step before it becomes a zombie: on a loaded host (CI, load ~30) one was seen preempted
    // there, so a process may take a bounded moment more; a live QEMU would run on for good.
    const deadline = Date.now() + 2000;
    while (pidsDuring.some(running) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10));
    for (const pid of pidsDuring) assert.ok(!running(pid), `pid ${pid} of a finished call runs on`);
  });

  test("OOM inside the VM is reported as oomKilled", async () => {
    // Bounded: the guest has memory_mb + 64 MiB of RAM and QEMU's cgroup caps the host side.
    // Three dd's each fill a 150 MB buffer from /dev/zero at once and hold it (blocked writing
    // into a pipe nobody reads yet): 450 MB in a 320 MB guest, a quick and certain OOM.
    const hog = "dd if=/dev/zero bs=150M count=1 2>/dev/null | sleep 5";
    const r = await run(`(${hog}) & (${hog}) & (${hog}) & wait; echo survived`, {
      timeoutMs: 60_000,
    });
    assert.equal(r.agent.failure, null);
    assert.ok((r.agent.exit?.oomKills ?? 0) > 0, JSON.stringify(r.agent.exit));
    assert.equal(r.oomKilled, true);
  });

  test("the deadline stops the code: reason timeout, partial output kept, VM gone", async () => {
    const r = await run("echo partial; sleep 60; echo never", { timeoutMs: 1500 });
    assert.equal(r.agent.failure, null);
    assert.equal(r.agent.exit?.reason, "timeout");
    assert.equal(text(r.agent.stdout), "partial\n");
  });

  test("the code (uid 1000) cannot signal init (root, PID 1)", async () => {
    // Init (root, PID 1) powers the VM off; the agent (root too) is covered by
    // guest-security.test.ts.
    const r = await run("kill -9 1 2>/dev/null && echo killed || echo denied");
    assert.equal(r.agent.failure, null);
    assert.equal(text(r.agent.stdout), "denied\n");
  });

  test("module loading is disabled in the guest", async () => {
    const r = await run("cat /proc/sys/kernel/modules_disabled");
    assert.equal(text(r.agent.stdout), "1\n");
  });

  test("QEMU killed mid-call: a clean failure, partial output kept, nothing left", async () => {
    let killed = 0;
    const outcome = await backend.run(shJob("echo before; sleep 60"), {
      signal: signal(),
      onEvent: (e) => {
        if (e.type !== "stdout" || killed) return;
        killed = -1;
        // Only this call's VM is running code; pooled clones are paused, leave them alone.
        void backend.livePids(true).then((pids) => {
          for (const pid of pids) {
            try {
              process.kill(pid, "SIGKILL");
              killed++;
            } catch {
              // raced with exit
            }
          }
        });
      },
    });
    assert.ok(killed > 0, "the test killed no process");
    assert.equal(outcome.agent.exit, null);
    assert.equal(outcome.agent.failure?.kind, "eof");
    assert.equal(text(outcome.agent.stdout), "before\n");
    // The pool still works after that.
    const next = await run("echo after");
    assert.equal(text(next.agent.stdout), "after\n");
  });
});

// A runtime pooled once called: no template, clone or memory until its first call; then kept.
describe("microvm: a once-called runtime", { skip: skip ?? false, timeout: 300_000 }, () => {
  const started = tinyBackend({ sizes: { bash: 1 }, onceCalled: ["bash"], mode: "restore" });

  test("keeps nothing before its first call, then builds its template and keeps a clone ready", async () => {
    const backend = started();
    await backend.pool.whenFull(); // full at once: nothing is kept for bash yet
    await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual(backend.pooled("bash"), { ready: 0, target: 0 });
    assert.equal(backend.counters.templates, 0, "no template before a call");
    assert.equal(backend.pool.starting, 0, "no clone being made");
    assert.deepEqual(
      descendants(process.pid).filter((pid) => {
        try {
          return readFileSync(`/proc/${pid}/comm`, "utf8").startsWith("qemu");
        } catch {
          return false;
        }
      }),
      [],
      "no VM runs for a runtime nobody called",
    );

    const first = await backend.run(shJob("echo first"), { signal: signal() });
    assert.equal(text(first.agent.stdout), "first\n");
    assert.equal(backend.counters.templates, 1, "the first call waited for its template");
    assert.equal(backend.counters.clonedCalls, 1, "and ran in a clone of it");
    assert.equal(backend.counters.bootedCalls, 0, "nothing cold-booted beside the build");
    assert.equal(backend.pooled("bash").target, 1, "called once: pooled from now on");
    await backend.pool.whenFull();
    assert.deepEqual(backend.pooled("bash"), { ready: 1, target: 1 });

    const second = await backend.run(shJob("echo second"), { signal: signal() });
    assert.equal(text(second.agent.stdout), "second\n");
    assert.equal(backend.counters.clonedCalls, 2, "the next call runs in a pooled clone");
    assert.equal(backend.counters.templates, 1, "one template for both");
  });
});
