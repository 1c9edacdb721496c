import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import { serverParams, startServer, type McpHarness } from "../helpers/mcp-client.js";
import { WireClient, type WireError } from "../helpers/wire-2026.js";

/**
 * Long calls as MCP tasks, over stdio, in both eras (MCP-TASKS in docs/SPECIFICATION.md): a
 * 2026-07-28 client that declares the tasks extension gets a task handle for a call still running
 * after SCRATCHRUN_TASK_AFTER_MS, and polls it past its own request timeout; a 2025-11-25 client
 * (the v1 SDK's task client) asks for a task with `params.task`. A client that asks for neither
 * keeps the blocking call. Here the server turns calls into tasks after 1 s and the 2026 client
 * gives up on any answer after 3 s: the same shape as a real client's 60 s, made short.
 */
const TASK_AFTER_MS = 1000;
const CLIENT_TIMEOUT_MS = 3000;

type Structured = { exit_code: number; stdout: string; exit_reason: string };
const structured = (r: Record<string, unknown>) => r.structuredContent as Structured;

async function rejectsWith(p: Promise<unknown>, code: number, message?: RegExp) {
  await assert.rejects(p, (e: WireError) => {
    assert.equal(e.code, code, e.message);
    if (message) assert.match(e.message, message);
    return true;
  });
}

for (const backend of TEST_BACKENDS) {
  describe(`MCP tasks over stdio [${backend}]`, () => {
    let wire: WireClient;
    let legacy: McpHarness;
    let base: HostSnapshot;
    const env = { SCRATCHRUN_ISOLATION: backend, SCRATCHRUN_TASK_AFTER_MS: String(TASK_AFTER_MS) };
    before(async () => {
      base = snapshot();
      wire = await WireClient.connect(new StdioClientTransport(serverParams(env)));
      legacy = await startServer(env);
    });
    after(async () => {
      await wire?.close();
      await legacy?.close();
      await assertNoLeaks(base);
    });

    test("2026: a call that outlives the client's timeout comes back as a task, then its result", async () => {
      const started = Date.now();
      const handle = await wire.exec(
        { runtime: "bash", code: "sleep 4; echo finished", timeout_ms: 30_000 },
        { timeoutMs: CLIENT_TIMEOUT_MS },
      );
      assert.equal(handle.resultType, "task", JSON.stringify(handle));
      assert.equal(handle.status, "working");
      assert.match(String(handle.taskId), /^[A-Za-z0-9_-]{22}$/, "128 random bits");
      assert.equal(typeof handle.pollIntervalMs, "number");
      assert.equal(handle.ttlMs, 30_000 + 10 * 60_000, "the call's deadline plus ten minutes");
      const done = await wire.untilFinished(String(handle.taskId));
      assert.ok(Date.now() - started > CLIENT_TIMEOUT_MS, "the call outlived the client's timeout");
      assert.equal(done.status, "completed", JSON.stringify(done));
      assert.equal(done.resultType, "complete");
      const result = done.result as Record<string, unknown>;
      assert.equal(structured(result).exit_code, 0);
      assert.equal(structured(result).stdout, "finished\n");
      await assertNoLeaks(base, 5000, { whileServing: true });
    });

    test("2026: a short call from a declaring client is answered as usual", async () => {
      const r = await wire.exec({ runtime: "bash", code: "echo quick" });
      assert.equal(r.resultType, "complete");
      assert.equal(structured(r).stdout, "quick\n");
    });

    test("2026: without the extension the call blocks, and tasks/* ask for it (-32021)", async () => {
      const r = await wire.exec(
        { runtime: "bash", code: "sleep 2; echo blocked" },
        { tasks: false },
      );
      assert.equal(r.resultType, "complete");
      assert.equal(structured(r).stdout, "blocked\n");
      const handle = await wire.exec({ runtime: "bash", code: "sleep 25", timeout_ms: 30_000 });
      const taskId = String(handle.taskId);
      for (const method of ["tasks/get", "tasks/cancel", "tasks/update"])
        await rejectsWith(
          wire.request(method, { taskId, inputResponses: {} }, { tasks: false }),
          -32021,
        );
      // Still working (none of the above touched it), then ended by a client that declares the
      // extension rather than waited for.
      assert.equal((await wire.request("tasks/get", { taskId })).status, "working");
      await wire.request("tasks/cancel", { taskId });
    });

    test("2026: tasks/cancel ends the sandbox at once; the task reads cancelled", async () => {
      const handle = await wire.exec({
        runtime: "bash",
        code: "echo started; sleep 25",
        timeout_ms: 30_000,
      });
      assert.equal(handle.resultType, "task");
      const taskId = String(handle.taskId);
      const ack = await wire.request("tasks/cancel", { taskId });
      assert.deepEqual(
        Object.keys(ack).sort(),
        ["_meta", "resultType"],
        "an empty acknowledgement",
      );
      assert.equal(ack.resultType, "complete");
      const task = await wire.request("tasks/get", { taskId });
      assert.equal(task.status, "cancelled");
      assert.equal(task.result, undefined, "a cancelled task carries no result");
      await assertNoLeaks(base, 5000, { whileServing: true });
    });

    test("2026: unknown task ids and bad params are -32602; bad input is still refused before any sandbox", async () => {
      await rejectsWith(
        wire.request("tasks/get", { taskId: "AAAAAAAAAAAAAAAAAAAAAA" }),
        -32602,
        /not found/,
      );
      await rejectsWith(wire.request("tasks/cancel", { taskId: "nope" }), -32602, /not found/);
      await rejectsWith(wire.request("tasks/get", {}), -32602);
      const r = await wire.exec({ runtime: "cobol", code: "x" });
      assert.equal(r.resultType, "complete", "bad input never becomes a task");
      assert.equal(r.isError, true);
    });

    test("2025: the tool offers tasks; a task-augmented call runs as a task the v1 client follows", async () => {
      const { tools } = await legacy.client.listTools();
      assert.deepEqual(tools[0]!.execution, { taskSupport: "optional" });
      const seen: string[] = [];
      let taskId = "";
      let result: Record<string, unknown> | undefined;
      for await (const m of legacy.client.experimental.tasks.callToolStream(
        { name: "scratchrun_exec", arguments: { runtime: "bash", code: "sleep 2; echo legacy" } },
        undefined,
        { task: { ttl: 60_000 } },
      )) {
        seen.push(m.type);
        if (m.type === "taskCreated") taskId = m.task.taskId;
        if (m.type === "result") result = m.result as Record<string, unknown>;
        if (m.type === "error")
          throw new Error(`task stream: ${String(m.error)}`, { cause: m.error });
      }
      assert.equal(seen[0], "taskCreated", seen.join(","));
      assert.ok(result, seen.join(","));
      assert.equal(structured(result).stdout, "legacy\n");
      const task = await legacy.client.experimental.tasks.getTask(taskId);
      assert.equal(task.status, "completed");
      const { tasks } = await legacy.client.experimental.tasks.listTasks();
      assert.ok(
        tasks.some((t) => t.taskId === taskId),
        "tasks/list has it",
      );
    });

    test("2025: tasks/cancel stops a working task and answers it cancelled", async () => {
      const stream = legacy.client.experimental.tasks.callToolStream(
        {
          name: "scratchrun_exec",
          arguments: { runtime: "bash", code: "sleep 25", timeout_ms: 30_000 },
        },
        undefined,
        { task: { ttl: 60_000 } },
      );
      const first = await stream.next();
      assert.equal(first.value?.type, "taskCreated", JSON.stringify(first.value));
      const { taskId } = (first.value as { task: { taskId: string } }).task;
      const cancelled = await legacy.client.experimental.tasks.cancelTask(taskId);
      assert.equal(cancelled.status, "cancelled");
      await stream.return(undefined);
      await assertNoLeaks(base, 5000, { whileServing: true });
      await assert.rejects(
        legacy.client.experimental.tasks.cancelTask(taskId),
        /already cancelled/,
      );
    });
  });
}
