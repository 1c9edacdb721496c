import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, test } from "node:test";
import { MCP_BIN, REPO_ROOT } from "../helpers/mcp-client.js";

const run = promisify(execFile);
const INSPECTOR = join(REPO_ROOT, "node_modules/.bin/mcp-inspector");

/** Interop with an outside client: the MCP Inspector's CLI mode, as a user would run it. */
describe("MCP Inspector CLI as an outside client", () => {
  const inspect = async (...args: string[]) => {
    const { stdout } = await run(INSPECTOR, ["--cli", process.execPath, MCP_BIN, ...args], {
      env: { ...process.env, SCRATCHRUN_NETWORK: "none", SCRATCHRUN_ISOLATION: "namespace" },
      timeout: 120_000,
    });
    return JSON.parse(stdout) as Record<string, unknown>;
  };

  test("tools/list shows the tools with schemas", async () => {
    const out = (await inspect("--method", "tools/list")) as {
      tools: { name: string; inputSchema: { properties: Record<string, unknown> } }[];
    };
    assert.deepEqual(out.tools.map((t) => t.name).sort(), [
      "scratchrun_exec",
      "scratchrun_runtimes",
      "scratchrun_session_end",
      "scratchrun_session_start",
    ]);
    const exec = out.tools.find((t) => t.name === "scratchrun_exec");
    assert.ok(exec?.inputSchema.properties.runtime);
  });

  test("tools/call runs code and returns structured content", async () => {
    const out = (await inspect(
      "--method",
      "tools/call",
      "--tool-name",
      "scratchrun_exec",
      "--tool-arg",
      "runtime=python3.11",
      "--tool-arg",
      "code=print(6*7)",
    )) as { isError: boolean; structuredContent: { stdout: string; exit_reason: string } };
    assert.equal(out.isError, false);
    assert.equal(out.structuredContent.stdout, "42\n");
    assert.equal(out.structuredContent.exit_reason, "ok");
  });

  test("bad arguments come back as a tool error, not a crash", async () => {
    const out = (await inspect(
      "--method",
      "tools/call",
      "--tool-name",
      "scratchrun_exec",
      "--tool-arg",
      "runtime=cobol",
      "--tool-arg",
      "code=x",
    )) as { isError: boolean; content: { text: string }[] };
    assert.equal(out.isError, true);
    assert.match(out.content[0]?.text ?? "", /INVALID_INPUT: .*runtime/);
  });
});
