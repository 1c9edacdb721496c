/** Pure parts of the cgroup layer: limit plans for both versions, mount detection, parsers. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { isValidCgroupName, parseCgroupMounts } from "../../src/jail/cgroup-detect.js";
import { detectCgroups, planCgroupFiles } from "../../src/jail/cgroup.js";
import {
  CPU_WEIGHT,
  cpuWeightFile,
  parseFlatKeyed,
  parsePids,
} from "../../src/jail/cgroup-plan.js";

const MiB = 1024 * 1024;

test("v2 plan: memory.max, no swap, oom.group, pids.max, cpu.max", () => {
  assert.deepEqual(
    planCgroupFiles(2, { memoryBytes: 256 * MiB, pids: 128, cpuQuotaPercent: 100 }),
    [
      { controller: "memory", file: "memory.max", value: "268435456" },
      { controller: "memory", file: "memory.swap.max", value: "0", optional: true },
      { controller: "memory", file: "memory.oom.group", value: "1", optional: true },
      { controller: "pids", file: "pids.max", value: "128" },
      { controller: "cpu", file: "cpu.max", value: "100000 100000" },
    ],
  );
  const half = planCgroupFiles(2, { memoryBytes: 64 * MiB, pids: 16, cpuQuotaPercent: 50 });
  assert.equal(half.find((s) => s.file === "cpu.max")?.value, "50000 100000");
  const twoCores = planCgroupFiles(2, { memoryBytes: 64 * MiB, pids: 16, cpuQuotaPercent: 200 });
  assert.equal(twoCores.find((s) => s.file === "cpu.max")?.value, "200000 100000");
  const noCpu = planCgroupFiles(2, { memoryBytes: 64 * MiB, pids: 16 });
  assert.ok(!noCpu.some((s) => s.controller === "cpu"));
});

test("v1 plan: limit before memsw (kernel requires memsw >= limit), pids, cfs quota", () => {
  const plan = planCgroupFiles(1, { memoryBytes: 64 * MiB, pids: 16, cpuQuotaPercent: 50 });
  assert.deepEqual(plan, [
    { controller: "memory", file: "memory.limit_in_bytes", value: String(64 * MiB) },
    { controller: "memory", file: "memory.memsw.limit_in_bytes", value: String(64 * MiB) },
    { controller: "pids", file: "pids.max", value: "16" },
    { controller: "cpu", file: "cpu.cfs_period_us", value: "100000" },
    { controller: "cpu", file: "cpu.cfs_quota_us", value: "50000" },
  ]);
  const noSwapAccounting = planCgroupFiles(
    1,
    { memoryBytes: 64 * MiB, pids: 16 },
    { canLimitSwap: false },
  );
  assert.ok(!noSwapAccounting.some((s) => s.file.startsWith("memory.memsw")));
  assert.deepEqual(noSwapAccounting[1], {
    controller: "memory",
    file: "memory.swappiness",
    value: "0",
  });
});

test("limits no caller should pass are refused", () => {
  for (const bad of [
    { memoryBytes: 0, pids: 16 },
    { memoryBytes: 1024, pids: 16 },
    { memoryBytes: 64 * MiB + 0.5, pids: 16 },
    { memoryBytes: Number.NaN, pids: 16 },
    { memoryBytes: 64 * MiB, pids: 0 },
    { memoryBytes: 64 * MiB, pids: -1 },
    { memoryBytes: 64 * MiB, pids: 1.5 },
    { memoryBytes: 64 * MiB, pids: 16, cpuQuotaPercent: 0 },
    { memoryBytes: 64 * MiB, pids: 16, cpuQuotaPercent: Number.POSITIVE_INFINITY },
  ]) {
    assert.throws(() => planCgroupFiles(2, bad), RangeError, JSON.stringify(bad));
    assert.throws(() => planCgroupFiles(1, bad), RangeError, JSON.stringify(bad));
  }
});

test("every plan value is a plain decimal (nothing a cgroup file would misparse)", () => {
  for (const version of [1, 2] as const) {
    for (const memoryBytes of [4 * MiB, 256 * MiB, 2 ** 40]) {
      for (const s of planCgroupFiles(version, {
        memoryBytes,
        pids: 4096,
        cpuQuotaPercent: 33.3,
      })) {
        assert.match(s.value, /^\d+( \d+)?$/, `${s.file}=${s.value}`);
      }
    }
  }
});

const HYBRID = `
25 1 0:23 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:24 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
30 25 0:28 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
31 25 0:29 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids
32 25 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
33 25 0:31 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
`;

test("mountinfo: v1 controllers per hierarchy, v2 mounts, named hierarchies ignored", () => {
  assert.deepEqual(parseCgroupMounts(HYBRID), [
    { version: 2, mountPoint: "/sys/fs/cgroup/unified", controllers: [] },
    { version: 1, mountPoint: "/sys/fs/cgroup/memory", controllers: ["memory"] },
    { version: 1, mountPoint: "/sys/fs/cgroup/pids", controllers: ["pids"] },
    { version: 1, mountPoint: "/sys/fs/cgroup/cpu,cpuacct", controllers: ["cpu", "cpuacct"] },
    { version: 1, mountPoint: "/sys/fs/cgroup/systemd", controllers: [] },
  ]);
  const escaped = "40 1 0:40 / /mnt/cg\\040v1 rw - cgroup cgroup rw,pids\n";
  assert.equal(parseCgroupMounts(escaped)[0]?.mountPoint, "/mnt/cg v1");
  // Optional fields before the separator do not shift the fstype.
  const optional = "41 1 0:41 / /sys/fs/cgroup rw shared:9 master:2 - cgroup2 cgroup2 rw\n";
  assert.deepEqual(parseCgroupMounts(optional), [
    { version: 2, mountPoint: "/sys/fs/cgroup", controllers: [] },
  ]);
  assert.deepEqual(parseCgroupMounts("garbage\n\n1 2 3 - ext4 /dev/sda rw\n"), []);
});

test("detection without memory or pids fails with a fix, never a half-working host", () => {
  const noPids = HYBRID.split("\n")
    .filter((l) => !l.includes("rw,pids"))
    .join("\n");
  assert.throws(
    () => detectCgroups({ mountinfo: noPids }),
    (e: Error) =>
      /pids/.test(e.message) && /unified_cgroup_hierarchy|mount -t cgroup/.test(e.message),
  );
  assert.throws(() => detectCgroups({ mountinfo: "" }), /memory and pids/);
  // An empty v2 mount (hybrid host) is not mistaken for a usable v2 host.
  const host = detectCgroups({ mountinfo: HYBRID });
  assert.equal(host.version, 1);
  assert.equal(host.hierarchies.cpu, "/sys/fs/cgroup/cpu,cpuacct");
});

test("names: only [A-Za-z0-9_-], so no name can leave the parent directory", () => {
  for (const ok of ["ns-0123abcd", "a", "A_b-9", "x".repeat(64)])
    assert.ok(isValidCgroupName(ok), ok);
  for (const bad of [
    "",
    ".",
    "..",
    "../x",
    "a/b",
    "/abs",
    "-lead",
    "_lead",
    "a b",
    "a.b",
    "x".repeat(65),
    "a\n",
    "é",
  ]) {
    assert.ok(!isValidCgroupName(bad), JSON.stringify(bad));
  }
  assert.throws(() => detectCgroups({ mountinfo: HYBRID, parentName: "../etc" }));
});

test("parsers: flat-keyed files and cgroup.procs", () => {
  const oomControl = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
  assert.equal(parseFlatKeyed(oomControl).get("oom_kill"), 3);
  const events = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 1\n";
  assert.equal(parseFlatKeyed(events).get("oom_kill"), 1);
  assert.equal(parseFlatKeyed("oom_kill x\nbad line here\n").size, 0);
  assert.deepEqual(parsePids("12\n345\n\n7\n"), [12, 345, 7]);
  assert.deepEqual(parsePids(""), []);
});

test("cpu weight: v2 cpu.weight as given, v1 cpu.shares on its 1024 scale; bad weights refused", () => {
  assert.deepEqual(cpuWeightFile(2, CPU_WEIGHT.background), {
    controller: "cpu",
    file: "cpu.weight",
    value: "10",
  });
  assert.equal(cpuWeightFile(1, CPU_WEIGHT.background).value, "102");
  assert.equal(cpuWeightFile(1, CPU_WEIGHT.call).value, "1024");
  assert.equal(cpuWeightFile(1, 1).value, "10");
  assert.equal(cpuWeightFile(1, 10_000).value, "102400");
  const plan = planCgroupFiles(1, { memoryBytes: 64 * MiB, pids: 16, cpuWeight: 10 });
  assert.deepEqual(plan.at(-1), { controller: "cpu", file: "cpu.shares", value: "102" });
  for (const bad of [0, 10_001, 1.5, Number.NaN])
    assert.throws(
      () => planCgroupFiles(2, { memoryBytes: 64 * MiB, pids: 16, cpuWeight: bad }),
      RangeError,
    );
  assert.ok(CPU_WEIGHT.background < CPU_WEIGHT.call);
});
