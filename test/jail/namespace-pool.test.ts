import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { NamespaceBackend } from "../../src/backends/namespace/backend.js";
import type { BackendOutcome, SandboxJob } from "../../src/backends/types.js";
import { toAgentRequest } from "../../src/engine/request.js";
import { findRootfs } from "../../src/images/locate.js";
import { parseExecRequest } from "../../src/schema/validate.js";
import { LIMITS } from "../../src/schema/limits.js";
import { AGENT_DIR, preimportsOf } from "../../src/compose/engine-factory.js";
import { flavourFor } from "../../src/engine/preimport-route.js";
import { CPU_WEIGHT } from "../../src/jail/cgroup.js";
import { cpuWeightOfPid, sandboxCgroupWeights } from "../helpers/cpu-weight.js";
import { assertNoLeaks, SANDBOX_UID_MAX, SANDBOX_UID_MIN, snapshot } from "../helpers/leaks.js";
import { settingsFrom } from "../../src/schema/settings/values.js";

/** The pool key of bash jails without a network, plain. */
const NONE_BASH = { network: "none", runtime: "bash", flavour: "plain" } as const;

/**
 * The namespace backend's warm pool, driven directly: jails started to the agent's READY ahead
 * of the calls, per runtime (a python jail's agent pre-started the interpreter; a pre-imported
 * one also imported numpy, pandas and matplotlib). What must hold: a jail serves one call, a call
 * the pool cannot serve starts its own, a dead idle jail is replaced, every process of a call's
 * jail is gone when run() settles (removing its cgroup and uid follows in the background; close()
 * waits for it), and a pooled jail's limit is the default memory size, pre-imported pages
 * included.
 */

const image = findRootfs(settingsFrom(process.env).images);
const preimport = image.ok ? preimportsOf(image.manifest) : {};

function job(
  runtime: "bash" | "python3.11",
  code: string,
  memoryMb: number = LIMITS.memoryMb.default,
): SandboxJob {
  const req = parseExecRequest({ runtime, code, network: "none", memory_mb: memoryMb });
  return {
    runtime,
    memoryMb,
    egress: { kind: "none" },
    request: toAgentRequest(req, null) /* NamespaceBackend.codeIds */,
    flavour: flavourFor(req, preimport[runtime]),
  };
}

const stdout = (o: BackendOutcome) => Buffer.from(o.agent.stdout).toString("utf8");

interface Proc {
  pid: number;
  ppid: number;
  uid: number;
  zombie: boolean;
}

function procs(): Proc[] {
  const out: Proc[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const status = readFileSync(`/proc/${entry}/status`, "utf8");
      out.push({
        pid: Number(entry),
        ppid: Number(/^PPid:\s+(\d+)/m.exec(status)?.[1]),
        uid: Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]),
        zombie: /^State:\s+Z/m.test(status),
      });
    } catch {
      // exited while we looked
    }
  }
  return out;
}

/** Host uids of this test process's live jails (their top process is our child). */
function jailUids(): number[] {
  return procs()
    .filter((p) => p.ppid === process.pid && p.uid >= SANDBOX_UID_MIN && p.uid < SANDBOX_UID_MAX)
    .map((p) => p.uid);
}

/** The uid of the live jail whose processes include `comm` (or include no python, for bash). */
function jailRunning(comm: string | null, among = jailUids()): number | undefined {
  const names = (uid: number) =>
    procs()
      .filter((p) => p.uid === uid && !p.zombie)
      .map((p) => {
        try {
          return readFileSync(`/proc/${p.pid}/comm`, "utf8").trim();
        } catch {
          return "";
        }
      });
  return among.find((u) =>
    comm === null ? !names(u).some((n) => n.startsWith("python")) : names(u).includes(comm),
  );
}

describe("namespace backend: warm pool and teardown", () => {
  const base = snapshot();
  let backend: NamespaceBackend;
  const run = (j: SandboxJob) => backend.run(j, { signal: new AbortController().signal });

  before(async () => {
    const rootfs = findRootfs(settingsFrom(process.env).images);
    if (!rootfs.ok) throw new Error(rootfs.error);
    backend = new NamespaceBackend({
      rootfsDir: rootfs.dir,
      agentDir: AGENT_DIR,
      poolSizes: { bash: 1, "python3.11": 1 },
      preimport,
    });
    await backend.pool.whenFull();
  });

  after(async () => {
    await backend.close();
    await assertNoLeaks(base);
  });

  test("a pooled jail serves one call; the next call gets a new one", async () => {
    // Each call finds every writable area empty and leaves a marker in each: a jail that served
    // two calls would show the earlier call's markers. (Namespace inode numbers are no identity:
    // the kernel reuses a freed one for the next jail.)
    const areas = "/tmp /home/user /dev/shm /run/scratchrun";
    for (let i = 0; i < 4; i++) {
      await backend.pool.whenFull();
      const pooled = backend.counters.pooledCalls;
      const code = [
        // Everything in the scratch areas, and markers in the code dir (which holds this script).
        `find ${areas} -mindepth 1 \\( -name 'm-*' -o ! -path '/run/scratchrun/*' \\) | wc -l`,
        `for d in ${areas}; do : > $d/m-${i} 2>/dev/null; done`,
        `find ${areas} -name m-${i} | wc -l`,
      ].join("\n");
      const out = await run(job("bash", code));
      assert.equal(out.agent.exit?.reason, "exited", Buffer.from(out.agent.stderr).toString());
      assert.equal(backend.counters.pooledCalls, pooled + 1, "served from the pool");
      const [found, written] = stdout(out).trim().split("\n").map(Number);
      assert.equal(found, 0, `call ${i} found files of an earlier call`);
      assert.ok((written ?? 0) >= 3, `call ${i} wrote its markers (${written})`);
    }
  });

  test("back-to-back calls wait for the refill in flight rather than start their own", async () => {
    await backend.pool.whenFull();
    const { pooledCalls, preimportedCalls, coldCalls } = backend.counters;
    for (let i = 0; i < 5; i++) assert.equal(stdout(await run(job("bash", "echo hi"))), "hi\n");
    assert.deepEqual(backend.counters, {
      pooledCalls: pooledCalls + 5,
      preimportedCalls,
      coldCalls,
    });
  });

  test("a burst larger than the pool: every call served, each by its own jail, then refilled", async () => {
    await backend.pool.whenFull();
    const before = backend.counters.pooledCalls + backend.counters.coldCalls;
    const outs = await Promise.all(
      Array.from({ length: 4 }, () => run(job("bash", "readlink /proc/self/ns/mnt; sleep 0.2"))),
    );
    const ids = outs.map((o) => stdout(o).trim());
    assert.equal(new Set(ids).size, 4, ids.join(", "));
    assert.equal(backend.counters.pooledCalls + backend.counters.coldCalls, before + 4);
    await backend.pool.whenFull();
    // Four takes within the burst window: the bash pool keeps one more jail for a while.
    assert.equal(backend.pool.target(NONE_BASH), 2);
    for (let i = 0; i < 200 && backend.pool.readyCount(NONE_BASH) < 2; i++)
      await new Promise((r) => setTimeout(r, 25));
    assert.equal(backend.pool.readyCount(NONE_BASH), 2);
  });

  test("another memory size starts its own jail, with that limit", async () => {
    const cold = backend.counters.coldCalls;
    const alloc = "b = bytearray(96 * 1024 * 1024); print('allocated')";
    const out = await run(job("python3.11", alloc, 64));
    assert.equal(backend.counters.coldCalls, cold + 1);
    assert.equal(out.oomKilled, true, "96 MiB in a 64 MiB jail");
    assert.doesNotMatch(stdout(out), /allocated/);
  });

  test("a pooled jail waits at the background CPU weight; the call that takes it runs at a call's", async () => {
    await backend.pool.whenFull();
    const pooled = backend.pool.readySandboxes().flatMap(([, jails]) => jails);
    assert.ok(pooled.length > 0);
    for (const jail of pooled)
      assert.equal(cpuWeightOfPid(jail.child.pid!), CPU_WEIGHT.background, "a pooled jail");
    const calls = backend.counters.pooledCalls;
    const marker = `sr-weight-${process.pid}`;
    const running = run(job("bash", `exec -a ${marker} sleep 3`));
    let pid: number | undefined;
    for (let i = 0; i < 200 && pid === undefined; i++) {
      await new Promise((r) => setTimeout(r, 25));
      pid = procs().find((p) => {
        try {
          return readFileSync(`/proc/${p.pid}/cmdline`, "utf8").startsWith(marker);
        } catch {
          return false;
        }
      })?.pid;
    }
    assert.ok(pid !== undefined, "the call's code is running");
    assert.equal(cpuWeightOfPid(pid), CPU_WEIGHT.call, "the call's code");
    await running;
    assert.equal(backend.counters.pooledCalls, calls + 1, "the call took a pooled jail");
  });

  test("a start a call waits for runs at a call's CPU weight before it is ready (calls first)", async () => {
    await backend.pool.whenFull();
    // The pre-imported kind: its start takes ~0.6 s of CPU, long enough to look at it meanwhile.
    const kind = { network: "none", runtime: "python3.11", flavour: "preimport" } as const;
    const taken = backend.pool.take(kind, LIMITS.memoryMb.default, { refill: false });
    assert.ok(taken, "a pre-imported jail was ready");
    await taken.destroy();
    const known = new Set(sandboxCgroupWeights().keys());
    backend.pool.refillNow();
    let fresh: string | undefined;
    for (let i = 0; i < 400 && fresh === undefined; i++) {
      await new Promise((r) => setTimeout(r, 5));
      fresh = [...sandboxCgroupWeights().keys()].find((n) => !known.has(n));
    }
    assert.ok(fresh, "the refill's cgroup appeared");
    assert.equal(backend.pool.readyCount(kind), 0);
    assert.equal(
      sandboxCgroupWeights().get(fresh),
      CPU_WEIGHT.background,
      "a refill nobody waits for",
    );
    const waiting = backend.pool.takeOrAwait(kind, LIMITS.memoryMb.default, undefined, {
      refill: false,
    });
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
    assert.equal(weight, CPU_WEIGHT.call, "the jail the call waits for, raised");
    assert.ok(whileStarting, "raised while it was still starting, not when handed out");
    const jail = await waiting;
    assert.ok(jail, "the call got the start it waited for");
    await jail.destroy();
    await backend.pool.whenFull();
  });

  test("a pooled jail holds the default memory limit", async () => {
    await backend.pool.whenFull();
    const pooled = backend.counters.pooledCalls;
    const over = LIMITS.memoryMb.default + 64;
    const out = await run(job("python3.11", `b = bytearray(${over} * 1024 * 1024); print('x')`));
    assert.equal(backend.counters.pooledCalls, pooled + 1);
    assert.equal(
      out.oomKilled,
      true,
      `${over} MiB in a pooled ${LIMITS.memoryMb.default} MiB jail`,
    );
    const small = await run(job("python3.11", "b = bytearray(64 * 1024 * 1024); print('fits')"));
    assert.equal(stdout(small), "fits\n");
  });

  test("an idle pooled jail that dies is replaced, and calls still work", async () => {
    await backend.pool.whenFull();
    // Every idle bash jail (a burst earlier may have left the pool holding two): kill them all, so
    // the pool must start another whatever its target is now.
    const bashUids = jailUids().filter((u) => jailRunning(null, [u]) === u);
    assert.ok(bashUids.length > 0, "the pooled bash jail's processes are visible");
    for (const p of procs())
      if (bashUids.includes(p.uid) && !p.zombie) process.kill(p.pid, "SIGKILL");
    // The pool notices (its top process exits), drops it and starts another: wait for that jail
    // itself (whenFull alone can answer before the pool has seen the exit).
    // Another uid than the dead ones': a jail still starting when `before` was taken (a burst's
    // second start) may be the one that replaces them. Found by the pool's own bash kind, not by
    // its processes: a python jail not yet past its exec has no python process either.
    const uidOf = (pid: number) => procs().find((p) => p.pid === pid)?.uid;
    const replaced = async () => {
      if (bashUids.some((u) => jailUids().includes(u))) return false;
      const ready = Object.fromEntries(backend.pool.readySandboxes())["none/bash/plain"] ?? [];
      for (const jail of ready) {
        const uids = ((await jail.usage?.())?.pids ?? []).map(uidOf);
        if (uids.length > 0 && uids.every((u) => u !== undefined && !bashUids.includes(u)))
          return true;
      }
      return false;
    };
    for (let i = 0; i < 400 && !(await replaced()); i++)
      await new Promise((r) => setTimeout(r, 25));
    assert.ok(
      bashUids.every((u) => !jailUids().includes(u)),
      "the dead jails are gone",
    );
    assert.ok(await replaced(), "a new bash jail in the pool, as another uid");
    const out = await run(job("bash", "echo alive"));
    assert.equal(stdout(out), "alive\n");
  });

  test("when run() settles, every process of the call's jail has exited", async () => {
    for (const pooled of [true, false]) {
      await backend.pool.whenFull();
      const idle = jailRunning(null);
      const out = await run(
        job(
          "bash",
          "sleep 30 & setsid sleep 30 & echo started",
          pooled ? LIMITS.memoryMb.default : 128,
        ),
      );
      assert.equal(stdout(out), "started\n");
      // The pooled jail this call used (its uid), or, for a cold call, whatever is not the pool's.
      const live = procs().filter(
        (p) =>
          !p.zombie &&
          p.uid >= SANDBOX_UID_MIN &&
          p.uid < SANDBOX_UID_MAX &&
          (pooled ? p.uid === idle : !jailUids().includes(p.uid)),
      );
      assert.deepEqual(live, [], `pooled=${pooled}: processes of the call's jail still run`);
    }
  });

  test("a pooled python jail's agent pre-started the interpreter; a pre-imported one imported the stack", async () => {
    await backend.pool.whenFull();
    const who =
      "import sys\nprint(open('/proc/self/cmdline').read().split('\\0')[1], 'numpy' in sys.modules)";
    const plain = await run(job("python3.11", who));
    assert.equal(stdout(plain), "/opt/scratchrun/prestart.py False\n");
    await backend.pool.whenFull();
    const pre = backend.counters.preimportedCalls;
    const sci = await run(job("python3.11", `import numpy\n${who}`));
    assert.equal(stdout(sci), "/opt/scratchrun/prestart.py True\n");
    assert.equal(backend.counters.preimportedCalls, pre + 1);
  });

  test("a pre-imported jail's pages count against its memory limit", async () => {
    await backend.pool.whenFull();
    // What an idle pre-imported jail is charged (its limit is the default memory size).
    const kinds = Object.fromEntries(backend.pool.readySandboxes());
    const idle = kinds["none/python3.11/preimport"]?.[0];
    assert.ok(idle?.usage, "a pre-imported jail is pooled");
    const charged = (await idle.usage()).memoryBytes / 1024 / 1024;
    assert.ok(charged > 40, `pre-imported jail charged ${charged.toFixed(1)} MiB`);
    // The same allocation after `import numpy` fits a plain interpreter's jail and not a
    // pre-imported one's: 63 MB of it is the imports.
    const mb = LIMITS.memoryMb.default - 40;
    const code = `import numpy\nb = bytearray(${mb} * 1024 * 1024)\nprint('fits')`;
    const pre = backend.counters.preimportedCalls;
    const sci = await run(job("python3.11", code));
    assert.equal(backend.counters.preimportedCalls, pre + 1);
    assert.equal(
      sci.oomKilled,
      true,
      `${mb} MiB on top of the pre-imports in ${LIMITS.memoryMb.default}`,
    );
    await backend.pool.whenFull();
    const plain = await run(job("python3.11", `pass\n${code}`));
    assert.equal(stdout(plain), "fits\n");
    assert.equal(plain.oomKilled, false);
  });
});
