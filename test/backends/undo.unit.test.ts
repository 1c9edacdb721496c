import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { UndoStack } from "../../src/backends/undo.js";

describe("a sandbox start's undo stack", () => {
  test("undoes newest first, and a failing step does not stop the ones below it", async () => {
    const done: string[] = [];
    const undo = new UndoStack();
    undo.push(() => done.push("uid"));
    undo.push(async () => {
      done.push("cgroup");
      throw new Error("busy");
    });
    undo.push(() => done.push("tap"));
    await undo.unwind();
    assert.deepEqual(done, ["tap", "cgroup", "uid"]);
  });

  test("unwinds once: a second call (a destroy racing a failed start) runs nothing again", async () => {
    let runs = 0;
    const undo = new UndoStack();
    undo.push(async () => {
      await new Promise((r) => setTimeout(r, 5));
      runs++;
    });
    await Promise.all([undo.unwind(), undo.unwind()]);
    await undo.unwind();
    assert.equal(runs, 1);
    assert.throws(() => undo.push(() => {}), /already unwound/);
  });

  test("a hand-over leaves only the owner's teardown", async () => {
    const done: string[] = [];
    const undo = new UndoStack();
    undo.push(() => done.push("uid"));
    undo.push(() => done.push("dir"));
    undo.handOver(() => done.push("vm.destroy"));
    await undo.unwind();
    assert.deepEqual(done, ["vm.destroy"]);
  });
});
