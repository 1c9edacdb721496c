import assert from "node:assert/strict";
import { test } from "node:test";
import { TaskRegistry, type TaskEnd } from "../../src/mcp/tasks.js";
import { settingsFrom } from "../../src/schema/settings/values.js";

const taskAfterMsFromEnv = (env: Record<string, string>) => settingsFrom(env).taskAfterMs;

/** A call whose end the test decides. */
function pending() {
  let settle!: (end: TaskEnd) => void;
  const run = new Promise<TaskEnd>((r) => (settle = r));
  return { run, settle, controller: new AbortController() };
}
const tick = () => new Promise((r) => setImmediate(r));
const ok = (text: string): TaskEnd => ({ result: { content: [{ type: "text", text }] } });

test("a task is its owner's alone: another owner reads, lists and cancels nothing", () => {
  const tasks = new TaskRegistry();
  const call = pending();
  const t = tasks.adopt("key-a", 60_000, call.controller, call.run);
  assert.equal(tasks.get("key-a", t.taskId)?.status, "working");
  assert.equal(tasks.get("key-b", t.taskId), undefined);
  assert.deepEqual(tasks.list("key-b"), []);
  assert.equal(tasks.cancel("key-b", t.taskId), undefined);
  assert.equal(call.controller.signal.aborted, false, "key b's cancel stopped nothing");
});

test("ids are 128 random bits, never repeated", () => {
  const tasks = new TaskRegistry();
  const ids = new Set<string>();
  for (let i = 0; i < 200; i++) {
    const c = pending();
    ids.add(tasks.adopt("o", 60_000, c.controller, c.run).taskId);
  }
  assert.equal(ids.size, 200);
  for (const id of ids) assert.equal(Buffer.from(id, "base64url").length, 16);
});

test("the end is recorded: a result completes the task, a throw fails it", async () => {
  const tasks = new TaskRegistry();
  const good = pending();
  const bad = pending();
  const g = tasks.adopt("o", 60_000, good.controller, good.run);
  const b = tasks.adopt("o", 60_000, bad.controller, Promise.reject(new Error("boom")));
  good.settle(ok("hi"));
  await tick();
  assert.equal(tasks.get("o", g.taskId)?.status, "completed");
  assert.deepEqual(tasks.get("o", g.taskId)?.end, ok("hi"));
  assert.equal(tasks.get("o", b.taskId)?.status, "failed");
  assert.deepEqual(tasks.get("o", b.taskId)?.end, { error: { code: -32603, message: "boom" } });
});

test("cancel aborts the call at once, and its late result is dropped", async () => {
  const tasks = new TaskRegistry();
  const call = pending();
  const t = tasks.adopt("o", 60_000, call.controller, call.run);
  tasks.cancel("o", t.taskId);
  assert.equal(call.controller.signal.aborted, true);
  assert.equal(tasks.get("o", t.taskId)?.status, "cancelled");
  call.settle(ok("late"));
  await tick();
  assert.equal(tasks.get("o", t.taskId)?.status, "cancelled");
  assert.equal(tasks.get("o", t.taskId)?.end, undefined);
});

test("finished() waits for the end; past its time to live a task is cancelled and gone", async () => {
  let now = 1_000;
  const tasks = new TaskRegistry({ now: () => now });
  const call = pending();
  const t = tasks.adopt("o", 5_000, call.controller, call.run);
  const waited = tasks.finished("o", t.taskId);
  call.settle(ok("done"));
  assert.equal((await waited)?.status, "completed");
  const slow = pending();
  const s = tasks.adopt("o", 5_000, slow.controller, slow.run);
  now += 5_000;
  assert.equal(tasks.get("o", s.taskId), undefined);
  assert.equal(slow.controller.signal.aborted, true, "an expired call does not run on");
  assert.equal(tasks.get("o", t.taskId), undefined);
});

test("finished tasks are kept per owner up to the cap, oldest dropped first; working ones stay", async () => {
  let now = 0;
  const tasks = new TaskRegistry({ maxFinishedPerOwner: 2, now: () => now++ });
  const working = pending();
  const w = tasks.adopt("o", 60_000, working.controller, working.run);
  const ids: string[] = [];
  for (let i = 0; i < 4; i++) {
    const c = pending();
    ids.push(tasks.adopt("o", 60_000, c.controller, c.run).taskId);
    c.settle(ok(String(i)));
    await tick();
  }
  const other = pending();
  const x = tasks.adopt("p", 60_000, other.controller, other.run);
  other.settle(ok("p"));
  await tick();
  assert.deepEqual(
    ids.map((id) => tasks.get("o", id) !== undefined),
    [false, false, true, true],
  );
  assert.equal(tasks.get("o", w.taskId)?.status, "working");
  assert.equal(tasks.get("p", x.taskId)?.status, "completed", "another owner's cap is its own");
});

test("close() cancels every working task", () => {
  const tasks = new TaskRegistry();
  const call = pending();
  const t = tasks.adopt("o", 60_000, call.controller, call.run);
  tasks.close();
  assert.equal(call.controller.signal.aborted, true);
  assert.equal(tasks.get("o", t.taskId)?.status, "cancelled");
});

test("SCRATCHRUN_TASK_AFTER_MS: the table's fallback, 0 or more, or a named error", () => {
  assert.equal(taskAfterMsFromEnv({}), 10_000);
  assert.equal(taskAfterMsFromEnv({ SCRATCHRUN_TASK_AFTER_MS: "0" }), 0);
  for (const bad of ["", "-1", "1.5", "soon"])
    assert.throws(
      () => taskAfterMsFromEnv({ SCRATCHRUN_TASK_AFTER_MS: bad }),
      /SCRATCHRUN_TASK_AFTER_MS must be a whole number/,
    );
});
