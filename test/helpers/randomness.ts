import assert from "node:assert/strict";
import type { McpHarness } from "./mcp-client.js";

/**
 * Runs `code` `calls` times through the server; every value a call prints (`values(stdout)`,
 * which may assert more about the output) must be new: no two calls share random state.
 */
export async function assertFreshRandomness(
  h: Pick<McpHarness, "exec">,
  runtime: string,
  code: string,
  calls: number,
  values: (stdout: string) => string[] = (stdout) => stdout.trim().split(" "),
): Promise<void> {
  const seen = new Set<string>();
  for (let i = 0; i < calls; i++) {
    const { s } = await h.exec({ runtime, code });
    assert.equal(s.exit_reason, "ok", s.stderr);
    for (const v of values(s.stdout)) {
      assert.ok(!seen.has(v), `value repeated across calls: ${v}`);
      seen.add(v);
    }
  }
}
