import assert from "node:assert/strict";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, test } from "node:test";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { assertNoLeaks, snapshot } from "../helpers/leaks.js";
import { exitOf, startServer } from "../helpers/mcp-client.js";

const INJECT = join(import.meta.dirname, "../helpers/inject-fault.js");

/**
 * A bug that throws where nothing catches ends the process, as Node's default would, but only
 * after the engine closed: a sandbox's QEMU or jail dies with the server, its cgroup, directory
 * and uid lock would not (the next start's reaper is no excuse for leaving them).
 */
for (const backend of TEST_BACKENDS) {
  describe(`an error nothing caught [${backend}]`, () => {
    test("the server names it on stderr, destroys every sandbox and exits", async () => {
      const base = snapshot();
      const h = await startServer({
        SCRATCHRUN_ISOLATION: backend,
        NODE_OPTIONS: `--import=${pathToFileURL(INJECT).href}`,
      });
      try {
        await h.exec({ runtime: "bash", code: "true" });
        assert.ok(
          snapshot().cgroups.some((c) => !base.cgroups.includes(c)),
          "no sandbox lived when the fault came (nothing to leak, nothing proven)",
        );
        const pid = h.serverPid();
        process.kill(pid, "SIGUSR2");
        await exitOf(pid, 20_000);
        await assertNoLeaks(base);
        assert.match(h.stderr(), /internal error, closing: Error: injected fault/);
      } finally {
        await h.close();
      }
    });
  });
}
