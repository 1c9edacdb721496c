import { skipOutsideCi } from "../helpers/ci.js";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { createMicrovmBackend, type MicrovmBackend } from "../../src/backends/microvm/create.js";
import { CPU_WEIGHT } from "../../src/jail/cgroup.js";
import { cpuWeightOfPid, sandboxCgroupWeights } from "../helpers/cpu-weight.js";
import {
  canRunMicrovm,
  assertNoLeftovers,
  hostLeftovers,
  makeTinyRoot,
  shJob,
  text,
  type TinyRoot,
} from "./fixture.js";

/** The pool key of plain bash clones. */
const BASH_PLAIN = { runtime: "bash", flavour: "plain" } as const;

const skip = skipOutsideCi(canRunMicrovm());
const signal = () => new AbortController().signal;

describe("microvm backend", { skip: skip ?? false, timeout: 300_000 }, () => {
  let root: TinyRoot;
  let before0: Awaited<ReturnType<typeof hostLeftovers>>;

  before(async () => {
    root = makeTinyRoot();
    before0 = await hostLeftovers();
  });
  after(async () => {
    root.cleanup();
    await assertNoLeftovers(before0, "a VM left a directory or cgroup behind");
  });

  test("runs code as the unprivileged guest user in its own kernel; two calls never share a VM", async () => {
    const backend = await createMicrovmBackend({
      rootfsDir: root.rootfs,
      disk: root.disk,
      pool: { sizes: { bash: 1 } },
    });
    try {
      await backend.pool.whenFull();
      const code =
        "cat /tmp/mark 2>/dev/null; echo mark > /tmp/mark; id -u; cat /proc/sys/kernel/random/boot_id";
      const first = await backend.run(shJob(code), { signal: signal() });
      const second = await backend.run(shJob(code), { signal: signal() });
      for (const r of [first, second]) {
        assert.equal(r.agent.failure, null);
        assert.equal(r.agent.exit?.reason, "exited");
        assert.equal(r.agent.exit?.value, 0);
        assert.match(r.isolation, /^microvm-(kvm|tcg)$/);
      }
      const [a, b] = [text(first.agent.stdout), text(second.agent.stdout)];
      // No "mark" line: nothing of the first call's /tmp survives into the second.
      assert.match(a, /^1000\n[0-9a-f-]{36}\n$/);
      assert.match(b, /^1000\n[0-9a-f-]{36}\n$/);
      assert.notEqual(a.split("\n")[1], b.split("\n")[1], "both calls ran in the same kernel");
    } finally {
      await backend.close();
    }
  });

  test("templates and pooled clones run at the background CPU weight; a call's VM at a call's", async () => {
    const backend = await createMicrovmBackend({
      rootfsDir: root.rootfs,
      disk: root.disk,
      pool: { sizes: { bash: 1 } },
    });
    try {
      await backend.pool.whenFull();
      const pooled = backend.pool.readySandboxes().flatMap(([, vms]) => vms);
      assert.equal(pooled.length, 1);
      assert.equal(cpuWeightOfPid(pooled[0]!.child.pid!), CPU_WEIGHT.background, "pooled clone");
      const running = backend.run(shJob("sleep 2; echo done"), { signal: signal() });
      let serving: number[] = [];
      for (let i = 0; i < 200 && serving.length === 0; i++) {
        await new Promise((r) => setTimeout(r, 25));
        serving = await backend.livePids(true);
      }
      assert.ok(serving.length > 0, "a VM is serving the call");
      for (const pid of serving) assert.equal(cpuWeightOfPid(pid), CPU_WEIGHT.call, "call's VM");
      const r = await running;
      assert.equal(text(r.agent.stdout), "done\n");
      assert.equal(backend.counters.clonedCalls, 1, "the call took the pooled clone");
      // A call of another memory size finds no template: it waits for that size's template, whose
      // build a call waits for and so runs at a call's weight, then runs in a clone of it (at a
      // call's weight) rather than cold-booting beside the build.
      const known = new Set(sandboxCgroupWeights().keys());
      const templatesBefore = backend.counters.templates;
      const other = backend.run(
        { ...shJob("sleep 1; echo other"), memoryMb: 192 },
        { signal: signal() },
      );
      // Each new cgroup's weight as last seen (a fresh cgroup shows the kernel's default, a call's
      // weight, for a moment before its own is written: only the last reading says what it ran at).
      const lastWeight = new Map<string, number>();
      for (let i = 0; i < 12_000 && backend.counters.templates === templatesBefore; i++) {
        await new Promise((r) => setTimeout(r, 5));
        for (const [name, weight] of sandboxCgroupWeights())
          if (!known.has(name)) lastWeight.set(name, weight);
      }
      assert.equal(
        backend.counters.templates,
        templatesBefore + 1,
        "the 192 MB template was built",
      );
      // The template's VM is destroyed once its state is saved: the new cgroup that came and went.
      const now = sandboxCgroupWeights();
      const build = [...lastWeight].filter(([name]) => !now.has(name));
      assert.equal(build.length, 1, `one template VM came and went: ${JSON.stringify(build)}`);
      assert.equal(
        build[0]![1],
        CPU_WEIGHT.call,
        "the build a call waited for ran at a call's weight",
      );
      let otherPids: number[] = [];
      for (let i = 0; i < 400 && otherPids.length === 0; i++) {
        await new Promise((r) => setTimeout(r, 25));
        otherPids = await backend.livePids(true);
      }
      assert.ok(otherPids.length > 0, "a VM is serving the call");
      for (const pid of otherPids) assert.equal(cpuWeightOfPid(pid), CPU_WEIGHT.call, "its clone");
      assert.equal(text((await other).agent.stdout), "other\n");
      assert.equal(
        backend.counters.clonedCalls,
        2,
        "it ran in a clone of the template it waited for",
      );
      assert.equal(backend.counters.bootedCalls, 0, "no call cold-booted");
    } finally {
      await backend.close();
    }
  });

  test("a clone a call waits for runs at a call's CPU weight before it is ready (calls first)", async () => {
    const backend = await createMicrovmBackend({
      rootfsDir: root.rootfs,
      disk: root.disk,
      pool: { sizes: { bash: 1 } },
    });
    try {
      await backend.pool.whenFull();
      const mb = backend.pool.config.memoryMb;
      const taken = backend.pool.take(BASH_PLAIN, mb, { refill: false });
      assert.ok(taken, "a pooled clone was ready");
      await taken.destroy();
      const known = new Set(sandboxCgroupWeights().keys());
      backend.pool.refillNow();
      let fresh: string | undefined;
      for (let i = 0; i < 1000 && fresh === undefined; i++) {
        await new Promise((r) => setTimeout(r, 10));
        fresh = [...sandboxCgroupWeights().keys()].find((n) => !known.has(n));
      }
      assert.ok(fresh, "the refill's cgroup appeared");
      assert.equal(
        sandboxCgroupWeights().get(fresh),
        CPU_WEIGHT.background,
        "a refill nobody waits for",
      );
      const waiting = backend.pool.takeOrAwait(BASH_PLAIN, mb, undefined, { refill: false });
      // Handed out, it is promoted anyway (takeOrAwait): the raise must come before it joined the
      // pool (onReady is told before the waiting call gets it).
      let joined = false;
      const unsubscribe = backend.pool.onReady(() => (joined = true));
      let weight: number | undefined;
      let whileStarting = false;
      for (let i = 0; i < 500; i++) {
        await new Promise((r) => setTimeout(r, 2));
        weight = sandboxCgroupWeights().get(fresh);
        whileStarting = !joined;
        if (weight === CPU_WEIGHT.call) break;
      }
      unsubscribe();
      assert.equal(weight, CPU_WEIGHT.call, "the clone the call waits for, raised");
      assert.ok(whileStarting, "raised while it was still starting, not when handed out");
      const vm = await waiting;
      assert.ok(vm, "the call got the clone it waited for");
      await vm.destroy();
    } finally {
      await backend.close();
    }
  });

  test("the root disk is read-only to the code and /tmp is RAM-backed", async () => {
    const backend = await createMicrovmBackend({
      rootfsDir: root.rootfs,
      disk: root.disk,
      pool: { mode: "boot" },
    });
    try {
      const r = await backend.run(
        shJob("touch /bin/x 2>&1 || echo denied; grep ' /tmp ' /proc/mounts | cut -d' ' -f3"),
        { signal: signal() },
      );
      assert.equal(text(r.agent.stdout).split("\n").slice(-3).join("|"), "denied|tmpfs|");
    } finally {
      await backend.close();
    }
  });

  test("QEMU runs under two seccomp filters: its own -sandbox and our policy", async () => {
    const backend = await createMicrovmBackend({
      rootfsDir: root.rootfs,
      disk: root.disk,
      pool: { mode: "boot" },
    });
    try {
      let seen: string[] = [];
      await backend.run(shJob("echo up; sleep 1"), {
        signal: signal(),
        onEvent: (e) => {
          if (e.type !== "stdout" || seen.length) return;
          seen = ["pending"];
          void backend.livePids().then((pids) => {
            seen = pids.flatMap((pid) => {
              try {
                const status = readFileSync(`/proc/${pid}/status`, "utf8");
                if (!/^Name:\s+qemu-system/m.test(status)) return [];
                return [/^Seccomp_filters:\s+(\d+)/m.exec(status)?.[1] ?? "none"];
              } catch {
                return [];
              }
            });
          });
        },
      });
      assert.ok(seen.length >= 1 && seen[0] !== "pending", `no QEMU process seen: ${seen}`);
      for (const n of seen) assert.ok(Number(n) >= 2, `QEMU has ${n} seccomp filters`);
    } finally {
      await backend.close();
    }
  });

  test("QEMU killed mid-call: a clean failure, and nothing is left behind", async () => {
    const backend = await createMicrovmBackend({
      rootfsDir: root.rootfs,
      disk: root.disk,
      pool: { mode: "boot" },
    });
    try {
      let killed = 0;
      const outcome = await backend.run(shJob("echo before; sleep 60"), {
        signal: signal(),
        onEvent: (e) => {
          if (e.type !== "stdout" || killed) return;
          killed = -1;
          void backend.livePids().then((pids) => {
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
      assert.equal(text(outcome.agent.stdout), "before\n", "partial output is kept");
      assert.deepEqual(await backend.livePids(), []);
    } finally {
      await backend.close();
    }
  });

  test("a call's VM has exited when run() settles; close() waits for the rest of its teardown", async () => {
    const backend = await createMicrovmBackend({
      rootfsDir: root.rootfs,
      disk: root.disk,
      pool: { sizes: { bash: 1 } },
    });
    // Exited: no /proc entry, or a zombie (the jail's processes, reparented to the host's init,
    // wait there to be reaped; their memory is freed and they are in no cgroup).
    const assertExited = (pid: number, when: string) => {
      let status: string;
      try {
        status = readFileSync(`/proc/${pid}/status`, "utf8");
      } catch {
        return;
      }
      const state = /^State:\s+(\S)/m.exec(status)?.[1];
      assert.ok(state === "Z" || state === "X", `pid ${pid} still runs ${when}:\n${status}`);
    };
    let pids: Promise<number[]> = Promise.resolve([]);
    try {
      await backend.pool.whenFull();
      const r = await backend.run(shJob("echo hi"), {
        signal: signal(),
        onEvent: (e) => {
          if (e.type === "started") pids = backend.livePids(true);
        },
      });
      assert.equal(text(r.agent.stdout), "hi\n");
      assert.ok((await pids).length > 0, "the call's VM had no host process");
      // Its cgroup, directory and uid may still be being removed; its processes are gone.
      for (const pid of await pids) assertExited(pid, "after run() settled");
    } finally {
      await backend.close();
    }
    for (const pid of await pids) assertExited(pid, "after close()");
  });

  test("the pool refills after a burst larger than itself; each VM serves one call", async () => {
    const backend: MicrovmBackend = await createMicrovmBackend({
      rootfsDir: root.rootfs,
      disk: root.disk,
      pool: { sizes: { bash: 2 }, mode: "boot" },
    });
    try {
      await backend.pool.whenFull();
      assert.equal(backend.pool.readyCount(BASH_PLAIN), 2);
      const burst = await Promise.all(
        [1, 2, 3].map(() =>
          backend.run(shJob("cat /proc/sys/kernel/random/boot_id"), { signal: signal() }),
        ),
      );
      const bootIds = new Set(burst.map((r) => text(r.agent.stdout)));
      assert.equal(bootIds.size, 3, "two calls of the burst shared a VM");
      await backend.pool.whenFull();
      assert.equal(backend.pool.readyCount(BASH_PLAIN), 2);
    } finally {
      await backend.close();
    }
    assert.deepEqual(await backend.livePids(), []);
  });
});
