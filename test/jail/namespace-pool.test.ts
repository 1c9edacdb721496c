import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { NamespaceBackend } from "../../src/backends/namespace/backend.js";
import type { BackendOutcome, SandboxJob } from "../../src/backends/types.js";
import { toAgentRequest } from "../../src/engine/request.js";
import { findRootfs } from "../../src/images/locate.js";
import { execInputSchema } from "../../src/schema/exec.js";
import { LIMITS } from "../../src/schema/limits.js";
import { AGENT_DIR } from "../../src/setup/engine-factory.js";
import { assertNoLeaks, SANDBOX_UID_MAX, SANDBOX_UID_MIN, snapshot } from "../helpers/leaks.js";

/**
 * The namespace backend's warm pool, driven directly: jails started to the agent's READY ahead
 * of the calls. What must hold: a jail serves one call, a call the pool cannot serve starts its
 * own, a dead idle jail is replaced, and every process of a call's jail is gone when run()
 * settles (removing its cgroup and uid follows in the background; close() waits for it).
 */

function job(
  runtime: "bash" | "python3.11",
  code: string,
  memoryMb: number = LIMITS.memoryMb.default,
): SandboxJob {
  const req = execInputSchema.parse({ runtime, code, network: "none", memory_mb: memoryMb });
  return { runtime, memoryMb, network: "none", request: toAgentRequest(req, null) };
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

describe("namespace backend: warm pool and teardown", () => {
  const base = snapshot();
  let backend: NamespaceBackend;
  const run = (j: SandboxJob) => backend.run(j, { signal: new AbortController().signal });

  before(async () => {
    const rootfs = findRootfs();
    if (!rootfs.ok) throw new Error(rootfs.error);
    backend = new NamespaceBackend({ rootfsDir: rootfs.dir, agentDir: AGENT_DIR, poolSize: 1 });
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
    const { pooledCalls, coldCalls } = backend.counters;
    for (let i = 0; i < 5; i++) assert.equal(stdout(await run(job("bash", "echo hi"))), "hi\n");
    assert.deepEqual(backend.counters, { pooledCalls: pooledCalls + 5, coldCalls });
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
    assert.equal(backend.pool.readyCount("none"), 1);
  });

  test("another memory size starts its own jail, with that limit", async () => {
    const cold = backend.counters.coldCalls;
    const alloc = "b = bytearray(96 * 1024 * 1024); print('allocated')";
    const out = await run(job("python3.11", alloc, 64));
    assert.equal(backend.counters.coldCalls, cold + 1);
    assert.equal(out.oomKilled, true, "96 MiB in a 64 MiB jail");
    assert.doesNotMatch(stdout(out), /allocated/);
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
    const [uid] = jailUids();
    assert.ok(uid !== undefined, "the pooled jail's processes are visible");
    for (const p of procs()) if (p.uid === uid && !p.zombie) process.kill(p.pid, "SIGKILL");
    // The pool notices (its top process exits), drops it and starts another.
    for (let i = 0; i < 200 && !jailUids().some((u) => u !== uid); i++)
      await new Promise((r) => setTimeout(r, 25));
    await backend.pool.whenFull();
    assert.notEqual(jailUids()[0], uid, "a new jail, as another uid");
    const out = await run(job("bash", "echo alive"));
    assert.equal(stdout(out), "alive\n");
  });

  test("when run() settles, every process of the call's jail has exited", async () => {
    for (const pooled of [true, false]) {
      await backend.pool.whenFull();
      const [idle] = jailUids();
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
});
