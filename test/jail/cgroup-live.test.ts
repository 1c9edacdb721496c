import { skipOutsideCi } from "../helpers/ci.js";
/**
 * Real cgroups on this host (v1 or v2), entered by the wrapper shell before bwrap, exactly as the
 * namespace backend does. Order matters and node:test runs a file's tests in sequence: the bounded
 * pids and memory tests prove the limits first; the fork bomb refuses to run unless both passed.
 *
 * The tests use their own parent directory so they never touch a running server's sandboxes.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import {
  CPU_WEIGHT,
  createCgroup,
  detectCgroups,
  listOrphanCgroups,
  listScratchrunCgroups,
  planCgroupFiles,
  reapOrphans,
  removeCgroupParents,
  type Cgroup,
  type CgroupHost,
  type CgroupLimits,
} from "../../src/jail/cgroup.js";
import { PYTHON311, hostCanJail, processesWith, runJailed } from "./jail-run.js";

const MiB = 1024 * 1024;
/** The limits the hostile test runs under; the bounded tests prove exactly these. */
const PROVEN: CgroupLimits = { memoryBytes: 64 * MiB, pids: 16, cpuQuotaPercent: 50 };
const proven = { pids: false, memory: false };

let host: CgroupHost | undefined;
let skip = skipOutsideCi(hostCanJail());
if (!skip) {
  try {
    host = detectCgroups({ parentName: "scratchrun-jailtest" });
  } catch (e) {
    skip = skipOutsideCi(`no usable cgroups: ${(e as Error).message}`);
  }
}
const h = (): CgroupHost => host ?? assert.fail("no cgroup host");
const uniqueName = (label: string) => `${label}-${randomBytes(4).toString("hex")}`;

async function assertNoCgroupLeft(): Promise<void> {
  assert.deepEqual(await listScratchrunCgroups(h()), []);
}

async function withCgroup(label: string, body: (cg: Cgroup) => Promise<void>): Promise<void> {
  const cg = await createCgroup(h(), uniqueName(label), PROVEN);
  try {
    await body(cg);
  } finally {
    await cg.destroy();
  }
  for (const dir of cg.dirs) assert.ok(!existsSync(dir), `${dir} removed`);
  await assertNoCgroupLeft();
}

after(async () => {
  if (host) {
    await reapOrphans(host);
    await removeCgroupParents(host);
  }
});

test("limit files read back as planned", { skip }, async () => {
  await withCgroup("plan", async (cg) => {
    const plan = planCgroupFiles(h().version, PROVEN, { canLimitSwap: h().canLimitSwap });
    const dirOf = {
      memory: h().hierarchies.memory,
      pids: h().hierarchies.pids,
      cpu: h().hierarchies.cpu,
    };
    for (const step of plan) {
      const mount = dirOf[step.controller];
      if (!mount) continue;
      const path = join(mount, h().parentName, cg.name, step.file);
      if (step.optional && !existsSync(path)) continue;
      const got = readFileSync(path, "utf8").trim();
      // v2 cpu.max and memory files read back in the same form they were written.
      assert.equal(got, step.value, step.file);
    }
    assert.equal(cg.procsFiles.length, cg.dirs.length);
    for (const f of cg.procsFiles) assert.ok(existsSync(f), f);
  });
});

const FORK_COUNTER = `
import errno, os, sys, time
limit = int(sys.argv[1])
started, err = [], None
for _ in range(3 * limit):
    try:
        pid = os.fork()
    except OSError as e:
        err = errno.errorcode.get(e.errno, str(e.errno))
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    started.append(pid)
for p in started:
    os.kill(p, 9)
    os.waitpid(p, 0)
print(len(started), err)
`;

test("bounded: pids.max stops new processes with EAGAIN", { skip }, async () => {
  await withCgroup("pids", async (cg) => {
    const r = await runJailed({
      argv: [PYTHON311, "-c", FORK_COUNTER, String(PROVEN.pids)],
      procsFiles: cg.procsFiles,
      killAfterMs: 60_000,
    });
    assert.equal(r.code, 0, r.stderr);
    const [count, err] = r.stdout.trim().split(" ");
    assert.equal(err, "EAGAIN", r.stdout);
    assert.ok(
      Number(count) >= 1 && Number(count) < PROVEN.pids,
      `forked ${count} of ${PROVEN.pids}`,
    );
  });
  proven.pids = true;
});

const MEMORY_HOG = `
import sys
limit_mib = int(sys.argv[1])
chunks = []
for step in range(1, 4 * limit_mib // 8 + 1):
    chunks.append(b"\\x01" * (8 << 20))  # written, so every page is really charged
    print(step * 8, flush=True)
print("survived", flush=True)
`;

test("bounded: the memory limit OOM-kills a program that allocates past it", { skip }, async () => {
  const limitMib = PROVEN.memoryBytes / MiB;
  await withCgroup("memory", async (cg) => {
    const r = await runJailed({
      argv: [PYTHON311, "-c", MEMORY_HOG, String(limitMib)],
      procsFiles: cg.procsFiles,
      killAfterMs: 60_000,
    });
    assert.doesNotMatch(r.stdout, /survived/);
    assert.equal(r.code, 128 + 9, `bwrap reports SIGKILL of the program: ${r.code} ${r.stderr}`);
    const reached = Math.max(...r.stdout.trim().split("\n").map(Number));
    assert.ok(reached < limitMib, `allocated ${reached} MiB under a ${limitMib} MiB limit`);
    const stats = await cg.stats();
    assert.ok(stats.oomKills >= 1, `oomKills ${stats.oomKills}`);
    assert.ok(stats.memoryPeakBytes <= PROVEN.memoryBytes, `peak ${stats.memoryPeakBytes}`);
    assert.ok(stats.memoryPeakBytes > PROVEN.memoryBytes / 2, `peak ${stats.memoryPeakBytes}`);
    // No swap on top of the limit: memory+swap is capped at the same value.
    const memDir = join(h().hierarchies.memory, h().parentName, cg.name);
    if (h().version === 1 && h().canLimitSwap) {
      const read = (f: string) => Number(readFileSync(join(memDir, f), "utf8").trim());
      assert.equal(read("memory.memsw.limit_in_bytes"), PROVEN.memoryBytes);
      assert.ok(read("memory.memsw.max_usage_in_bytes") <= PROVEN.memoryBytes);
    } else if (h().version === 2 && existsSync(join(memDir, "memory.swap.max"))) {
      assert.equal(readFileSync(join(memDir, "memory.swap.max"), "utf8").trim(), "0");
    }
  });
  proven.memory = true;
});

test(
  "hostile: a fork bomb in the proven jail stays bounded and is fully removed",
  { skip },
  async (t) => {
    assert.ok(proven.pids && proven.memory, "refusing to run a fork bomb: limits not proven above");
    const marker = `fbomb${randomBytes(6).toString("hex")}`;
    const cg = await createCgroup(h(), uniqueName("bomb"), PROVEN);
    let done: Promise<unknown> | undefined;
    let maxSeen = 0;
    try {
      // The trailing sleep keeps the jail's main process alive: when it exits, bwrap ends the
      // pid namespace and the bomb with it, which would prove nothing.
      done = runJailed({
        argv: ["/bin/bash", "--norc", "-c", `:(){ :|:& };:; sleep 60 # ${marker}`],
        procsFiles: cg.procsFiles,
        killAfterMs: 60_000,
      });
      // Let it rage for a while (a duration, not an assertion), sampling the cgroup as it goes.
      for (let i = 0; i < 50; i++) {
        await sleep(100);
        maxSeen = Math.max(maxSeen, (await cg.pids()).length);
      }
      assert.ok(maxSeen > 1, "the bomb really ran");
      assert.ok(maxSeen <= PROVEN.pids, `at most pids.max processes: saw ${maxSeen}`);
      t.diagnostic(`fork bomb: at most ${maxSeen} processes seen (pids.max ${PROVEN.pids})`);
      await cg.killAll();
      assert.deepEqual(await cg.pids(), []);
    } finally {
      await cg.destroy();
      await done;
    }
    assert.deepEqual(await cg.pids(), []);
    for (const dir of cg.dirs) assert.ok(!existsSync(dir), `${dir} removed`);
    assert.deepEqual(await processesWith(marker), []);
    await assertNoCgroupLeft();
  },
);

test(
  "orphans: reapOrphans kills what is inside and removes every leftover cgroup",
  { skip },
  async () => {
    const marker = `orphan${randomBytes(6).toString("hex")}`;
    const runs: Promise<unknown>[] = [];
    const cgroups: Cgroup[] = [];
    for (let i = 0; i < 2; i++) {
      const cg = await createCgroup(h(), uniqueName("orphan"), PROVEN);
      cgroups.push(cg);
      runs.push(
        runJailed({
          argv: ["/bin/sh", "-c", `sleep 600; : ${marker}`],
          procsFiles: cg.procsFiles,
          killAfterMs: 60_000,
        }),
      );
    }
    const names = cgroups.map((c) => c.name);
    const hasSleep = async (cg: Cgroup) => {
      for (const pid of await cg.pids()) {
        try {
          if (readFileSync(`/proc/${pid}/comm`, "utf8").trim() === "sleep") return true;
        } catch {
          // exited
        }
      }
      return false;
    };
    // Wait until both sandboxes are really running inside their cgroups (bounded poll).
    const ready = async () => (await Promise.all(cgroups.map(hasSleep))).every(Boolean);
    for (let i = 0; i < 400 && !(await ready()); i++) await sleep(25);
    assert.ok(await ready(), "both sandboxes started");
    assert.deepEqual(await listOrphanCgroups(h()), [...names].sort());
    assert.deepEqual((await reapOrphans(h())).sort(), [...names].sort());
    await Promise.all(runs);
    assert.deepEqual(await processesWith(marker), []);
    await assertNoCgroupLeft();
  },
);

test(
  "freezer: a frozen cgroup's processes get no CPU; thawed they run; killAll and reapOrphans take a frozen one",
  { skip },
  async () => {
    const marker = `freeze${randomBytes(6).toString("hex")}`;
    const cpuTicks = async (cg: Cgroup) => {
      let ticks = 0;
      for (const pid of await cg.pids()) {
        try {
          const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
          const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
          ticks += Number(rest[11]) + Number(rest[12]);
        } catch {
          // exited
        }
      }
      return ticks;
    };
    const spin = async (cg: Cgroup) => {
      const run = runJailed({
        argv: ["/bin/sh", "-c", `while :; do :; done # ${marker}`],
        procsFiles: cg.procsFiles,
        killAfterMs: 60_000,
      });
      // Spinning once its CPU time grows past what starting the jail took.
      const startup = await cpuTicks(cg);
      for (let i = 0; i < 400 && (await cpuTicks(cg)) <= startup + 2; i++) await sleep(25);
      assert.ok((await cpuTicks(cg)) > startup + 2, "the spinner runs");
      // Wrapped: an async function returning the promise itself would wait for the jail's end.
      return { done: run };
    };
    const plain = await createCgroup(h(), uniqueName("plain"), PROVEN);
    assert.equal(await plain.freeze(), h().version === 2, "v1: only a freezable cgroup freezes");
    await plain.destroy();

    const cg = await createCgroup(h(), uniqueName("frozen"), PROVEN, { freezable: true });
    const { done: run } = await spin(cg);
    try {
      assert.equal(await cg.freeze(), true);
      const frozenAt = await cpuTicks(cg);
      await sleep(500);
      assert.equal(await cpuTicks(cg), frozenAt, "no CPU while frozen");
      await cg.thaw();
      await sleep(500);
      assert.ok((await cpuTicks(cg)) > frozenAt, "runs again once thawed");
      assert.equal(await cg.freeze(), true);
      // A frozen v1 task acts on no signal until thawed: killAll thaws it first.
      await cg.killAll();
      assert.deepEqual(await cg.pids(), []);
    } finally {
      await cg.destroy();
      await run;
    }
    for (const dir of cg.dirs) assert.ok(!existsSync(dir), `${dir} removed`);

    // A frozen sandbox a dead server left (kill -9) is reaped all the same.
    const left = await createCgroup(h(), uniqueName("leftfrozen"), PROVEN, { freezable: true });
    const { done: leftRun } = await spin(left);
    assert.equal(await left.freeze(), true);
    assert.deepEqual(await reapOrphans(h()), [left.name]);
    await leftRun;
    assert.deepEqual(await processesWith(marker), []);
    await assertNoCgroupLeft();
  },
);

test(
  "lifecycle: a taken name is refused; destroy and killAll are idempotent",
  { skip },
  async () => {
    const cg = await createCgroup(h(), uniqueName("twice"), PROVEN);
    await assert.rejects(createCgroup(h(), cg.name, PROVEN), /cannot create cgroup/);
    // The failed second create must not have removed the first one's directories.
    for (const dir of cg.dirs) assert.ok(existsSync(dir), dir);
    await cg.killAll();
    await cg.destroy();
    await cg.destroy();
    await cg.killAll();
    assert.deepEqual(await cg.pids(), []);
    await assert.rejects(createCgroup(h(), "../escape", PROVEN), /invalid cgroup name/);
    await assertNoCgroupLeft();
  },
);

test(
  "cpu weight: files read back; on one contended CPU a call's weight gets ~10x a background's",
  { skip },
  async (t) => {
    const limits = { memoryBytes: 64 * MiB, pids: 16 };
    const bg = await createCgroup(h(), uniqueName("bg"), {
      ...limits,
      cpuWeight: CPU_WEIGHT.background,
    });
    const call = await createCgroup(h(), uniqueName("call"), {
      ...limits,
      cpuWeight: CPU_WEIGHT.background,
    });
    const weightFile = (cg: Cgroup) =>
      join(
        h().hierarchies.cpu!,
        h().parentName,
        cg.name,
        h().version === 2 ? "cpu.weight" : "cpu.shares",
      );
    const runs: Promise<unknown>[] = [];
    try {
      assert.equal(readFileSync(weightFile(bg), "utf8").trim(), h().version === 2 ? "10" : "102");
      // A pooled sandbox taken by a call is promoted.
      await call.setCpuWeight(CPU_WEIGHT.call);
      assert.equal(
        readFileSync(weightFile(call), "utf8").trim(),
        h().version === 2 ? "100" : "1024",
      );
      // Both spin on CPU 0 for the same wall time (a bound on the run, not an assertion), counting
      // the loops they got through: the CPU each received.
      const spin = [
        "import time",
        "end, n = time.time() + 2, 0",
        "while time.time() < end: n += 1",
        "print(n)",
      ].join("\n");
      const spins = [bg, call].map((cg) =>
        runJailed({
          argv: ["taskset", "-c", "0", PYTHON311, "-c", spin],
          procsFiles: cg.procsFiles,
          killAfterMs: 30_000,
        }),
      );
      runs.push(...spins);
      const [b, c] = (await Promise.all(spins)).map((r) => {
        assert.equal(r.code, 0, r.stderr);
        return Number(r.stdout.trim());
      }) as [number, number];
      const share = c / (b + c);
      t.diagnostic(
        `CPU 0 shared: call ${c} loops, background ${b} (call ${Math.round(share * 100)}%)`,
      );
      // 100:10 weights give the call ~91%; equal weights would give it ~50%.
      assert.ok(share > 0.75, `a call's share of a contended CPU: ${share.toFixed(2)}`);
    } finally {
      await Promise.allSettled(runs);
      await bg.destroy();
      await call.destroy();
    }
    await assertNoCgroupLeft();
  },
);
