import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { startService, type ServiceHarness } from "../api/harness.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import { startKeyDoor, type KeyDoor } from "../helpers/key-door.js";
import { MCP_BIN, serverParams } from "../helpers/mcp-client.js";
import { startStdioBridge, type StdioBridge } from "../helpers/stdio-bridge.js";
import {
  judge,
  readBaseline,
  REVISIONS,
  runScenarios,
  runSuite,
  type Revision,
  type Scenario,
} from "./suite.js";

/**
 * The official MCP conformance suite, server scenarios, against the service's `/mcp` and the
 * stdio server, at both revisions it covers and for the tasks extension ScratchRun serves
 * (CONF-SUITE in docs/SPECIFICATION.md; the skills extension, which it does not serve, is not run). Every scenario
 * passes but those in test/conformance/baseline.yaml, which need the suite's own fixture tools,
 * resources or prompts; a listed scenario that passes fails the test, so the list stays true.
 *
 * The suite speaks HTTP only. The service is reached through a door that adds an API key (the
 * suite sends none); the stdio server through a bridge that carries JSON-RPC between HTTP and its
 * pipes (test/helpers/stdio-bridge.ts). The scenarios below test HTTP itself and run against the
 * service only. No scenario runs code (they call the suite's fixture tools, which the server
 * refuses by name), so the pools are off.
 */
const HTTP_ONLY: Record<string, string> = {
  "dns-rebinding-protection": "Host and Origin checks of an HTTP server",
  "server-session-lifecycle": "the Mcp-Session-Id lifecycle of Streamable HTTP",
  "server-sse-multiple-streams": "concurrent SSE streams of Streamable HTTP",
  "server-sse-polling": "SSE resumption of Streamable HTTP",
  "http-header-validation": "the Mcp-Method and Mcp-Name headers of Streamable HTTP",
  "http-custom-header-server-validation": "custom headers of Streamable HTTP",
};

/** Checks of the HTTP status or headers the bridge, not the stdio server, answers with. */
const HTTP_STATUS_CHECK = /^sep-2575-http-server-|^tasks-headers-reject-mismatched-method$/;

/** The tasks extension's scenarios (2026-07-28): no revision's suite runs them. */
const TASKS_EXTENSION = [
  "tasks-lifecycle",
  "tasks-capability-negotiation",
  "tasks-wire-fields",
  "tasks-request-state-removal",
  "tasks-mrtr-input",
  "tasks-request-headers",
  "tasks-dispatch-and-envelope",
  "tasks-status-notifications",
  "tasks-required-task-error",
  "tasks-mrtr-composition",
];

const QUIET = { SCRATCHRUN_POOL_SIZE: "0", SCRATCHRUN_PREIMPORT: "0" };

/** The revision's opening scenario, and tools-list: ran (and, being unlisted, passed). */
const CORE: Record<Revision, string[]> = {
  "2025-11-25": ["server-initialize", "ping", "tools-list"],
  "2026-07-28": ["server-stateless", "tools-list"],
};

function assertJudged(
  runs: Map<string, Scenario>,
  leg: "/mcp" | "stdio",
  what: string,
  core: string[],
  skip: Record<string, string> = {},
) {
  for (const name of Object.keys(skip)) runs.delete(name);
  if (leg === "stdio")
    for (const s of runs.values()) {
      s.checks = s.checks.filter((c) => !HTTP_STATUS_CHECK.test(c.id));
      s.failed = s.failed.filter((c) => !HTTP_STATUS_CHECK.test(c.id));
    }
  const problems = judge(runs, readBaseline(leg === "/mcp" ? "mcp" : "stdio"), `${leg} ${what}`);
  assert.deepEqual(problems, [], problems.join("\n"));
  for (const name of core) assert.ok(runs.has(name), `${leg} ${what}: ${name} ran`);
}

describe("MCP conformance suite: the service's /mcp", () => {
  let h: ServiceHarness;
  let door: KeyDoor;
  let base: HostSnapshot;
  before(async () => {
    base = snapshot();
    // The suite runs its scenarios at once, each a client of its own, all under one key.
    h = await startService(
      {},
      { keyLimits: { maxConcurrent: 64, ratePerMinute: 100_000, burst: 100_000 } },
      QUIET,
    );
    door = await startKeyDoor(h.api.url, (await h.keys.create("conformance")).key);
  });
  after(async () => {
    await door?.close();
    await h?.close();
    await assertNoLeaks(base);
  });

  for (const revision of REVISIONS)
    test(`${revision}: every scenario passes but the baseline's`, async () => {
      assertJudged(await runSuite(`${door.url}/mcp`, revision), "/mcp", revision, CORE[revision]);
    });

  test("the tasks extension: every scenario passes but the baseline's", async () => {
    const runs = await runScenarios(`${door.url}/mcp`, TASKS_EXTENSION);
    assertJudged(runs, "/mcp", "tasks", TASKS_EXTENSION);
  });
});

describe("MCP conformance suite: the stdio server (local mode, namespace)", () => {
  let bridge: StdioBridge;
  let base: HostSnapshot;
  before(async () => {
    base = snapshot();
    const params = serverParams({ SCRATCHRUN_ISOLATION: "namespace", ...QUIET });
    bridge = await startStdioBridge(params.command, [MCP_BIN], params.env);
  });
  after(async () => {
    await bridge?.close();
    await assertNoLeaks(base);
  });

  for (const revision of REVISIONS)
    test(`${revision}: every scenario passes but the baseline's and HTTP's own`, async () => {
      const runs = await runSuite(bridge.url, revision);
      assertJudged(runs, "stdio", revision, CORE[revision], HTTP_ONLY);
    });

  test("the tasks extension: every scenario passes but the baseline's", async () => {
    const runs = await runScenarios(bridge.url, TASKS_EXTENSION);
    assertJudged(runs, "stdio", "tasks", TASKS_EXTENSION);
  });
});
