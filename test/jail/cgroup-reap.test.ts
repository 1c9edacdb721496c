import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { after, test } from "node:test";
import {
  createCgroup,
  detectCgroups,
  listScratchrunCgroups,
  reapStaleEmptyCgroups,
  removeCgroupParents,
} from "../../src/jail/cgroup.js";

const host = detectCgroups({ parentName: "scratchrun-reaptest" });
const limits = { memoryBytes: 64 << 20, pids: 16 };

after(async () => {
  for (const dir of await listScratchrunCgroups(host)) assert.fail(`left behind: ${dir}`);
  await removeCgroupParents(host);
});

test("an empty cgroup past the age bound is reaped; a young one is not", async () => {
  const young = await createCgroup(host, "young", limits);
  const old = await createCgroup(host, "old", limits);
  const removedNone = await reapStaleEmptyCgroups(host, 60_000);
  assert.deepEqual(removedNone, []);
  const removed = await reapStaleEmptyCgroups(host, 0);
  assert.deepEqual(removed.sort(), [...young.dirs, ...old.dirs].sort());
  for (const d of [...young.dirs, ...old.dirs]) assert.equal(existsSync(d), false);
});

test("a cgroup with a process in it is never reaped, however old", async () => {
  const busy = await createCgroup(host, "busy", limits);
  const child = spawn("/bin/sh", [
    "-c",
    'for f; do echo $$ > "$f"; done; exec sleep 30',
    "sh",
    ...busy.procsFiles,
  ]);
  const closed = new Promise((r) => child.once("close", r));
  await new Promise((r) => setTimeout(r, 200));
  try {
    assert.deepEqual(await reapStaleEmptyCgroups(host, 0), []);
    for (const d of busy.dirs) assert.equal(existsSync(d), true);
  } finally {
    await busy.destroy();
    await closed;
  }
});
