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

/** Puts a sleeping process into the cgroup, as a jail's wrapper would. */
function populate(procsFiles: string[]) {
  const child = spawn("/bin/sh", [
    "-c",
    'for f; do echo $$ > "$f"; done; exec sleep 30',
    "sh",
    ...procsFiles,
  ]);
  return new Promise((r) => child.once("close", r));
}

test("an empty cgroup still empty after the recheck is reaped; one filled meanwhile is not", async () => {
  const dead = await createCgroup(host, "dead", limits);
  const starting = await createCgroup(host, "starting", limits);
  // Both empty when the reaper looks; "starting" gets its process during the recheck, as a
  // live server's new jail does within milliseconds.
  const reaping = reapStaleEmptyCgroups(host, 500);
  await new Promise((r) => setTimeout(r, 100));
  const closed = populate(starting.procsFiles);
  try {
    const removed = await reaping;
    assert.deepEqual(removed.sort(), [...dead.dirs].sort());
    for (const d of dead.dirs) assert.equal(existsSync(d), false);
    for (const d of starting.dirs) assert.equal(existsSync(d), true);
  } finally {
    await starting.destroy();
    await closed;
  }
});

test("a cgroup with a process in it is never reaped", async () => {
  const busy = await createCgroup(host, "busy", limits);
  const closed = populate(busy.procsFiles);
  await new Promise((r) => setTimeout(r, 200));
  try {
    assert.deepEqual(await reapStaleEmptyCgroups(host, 0), []);
    for (const d of busy.dirs) assert.equal(existsSync(d), true);
  } finally {
    await busy.destroy();
    await closed;
  }
});
