import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { assertNoLeaks, snapshot } from "../helpers/leaks.js";
import { startServer } from "../helpers/mcp-client.js";

/**
 * A microVM server starts building its pool (snapshot templates, then clones) as soon as it
 * starts. Told to stop in the middle of that, it destroys those VMs at once rather than waiting
 * for them: MCP clients give a closing server a few seconds before SIGKILL (the SDK's stdio
 * client: 2 s, then SIGTERM, 2 s, then SIGKILL), and a server killed mid-cleanup leaves a cgroup
 * and a directory behind. A template build takes longer than that under TCG.
 */
describe("microvm server shutdown", () => {
  test("a client closing right after start leaves nothing behind", async () => {
    const base = snapshot();
    const h = await startServer({ SCRATCHRUN_ISOLATION: "microvm" });
    // The pool is filling now; give the first template time to get its VM going.
    await new Promise((r) => setTimeout(r, 1500));
    assert.ok(
      snapshot().cgroups.some((c) => !base.cgroups.includes(c)),
      "no VM was being built when the client closed",
    );
    await h.close();
    await assertNoLeaks(base);
  });
});
