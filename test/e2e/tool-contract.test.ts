import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { expectedIsolation, TEST_BACKENDS } from "../helpers/backends.js";
import { assertNoCallSandbox, snapshot } from "../helpers/leaks.js";
import { assertIcon, textOf } from "../helpers/mcp-client.js";
import { serverForSuite } from "../helpers/suite.js";

for (const backend of TEST_BACKENDS) {
  describe(`tool contract over stdio [${backend}]`, () => {
    const h = serverForSuite(backend);

    test("lists scratchrun_exec with input and output schemas derived from one schema", async () => {
      const identity = h.client.getServerVersion();
      assert.deepEqual([identity?.name, identity?.title], ["scratchrun", "ScratchRun"]);
      assertIcon(identity?.icons);
      const { tools } = await h.client.listTools();
      const tool = tools.find((t) => t.name === "scratchrun_exec");
      assert.ok(tool, "scratchrun_exec is listed");
      const props = tool.inputSchema.properties as Record<
        string,
        { maximum?: number; default?: unknown; enum?: string[] }
      >;
      assert.deepEqual(tool.inputSchema.required?.sort(), ["code", "runtime"]);
      assert.deepEqual(props.runtime?.enum, [
        ...["python3.12", "python3.11", "node20", "bash"],
        ...["python3.13", "node24"],
      ]);
      assert.equal(props.timeout_ms?.maximum, 30000);
      assert.equal(props.timeout_ms?.default, 10000);
      assert.equal(props.memory_mb?.maximum, 512);
      assert.equal(props.memory_mb?.default, 256);
      for (const key of ["env", "files", "return_files"])
        assert.ok(props[key], `${key} is in the schema`);
      assert.equal(
        (tool.inputSchema as { additionalProperties?: boolean }).additionalProperties,
        false,
      );
      const out = tool.outputSchema?.properties as Record<string, unknown>;
      for (const key of [
        "stdout",
        "stderr",
        "exit_code",
        "exit_reason",
        "duration_ms",
        "isolation",
        "files",
      ])
        assert.ok(out[key], `outputSchema has ${key}`);
      assert.match(tool.description ?? "", /Nothing persists/);
      // API-ANSWER-CHARS: Claude Code takes an answer this long inline (answer-chars.ts holds it).
      assert.equal(tool._meta?.["anthropic/maxResultSizeChars"], 500_000);
      // VIEW-META: MCP Apps hosts show the result in the view, which may call no tool.
      assert.deepEqual(tool._meta?.ui, {
        resourceUri: "ui://scratchrun/result.html",
        visibility: ["model"],
      });
      const { resources } = await h.client.listResources();
      assert.deepEqual(
        resources.map((r) => [r.uri, r.mimeType]),
        [["ui://scratchrun/result.html", "text/html;profile=mcp-app"]],
      );
    });

    const bad: [string, Record<string, unknown>, RegExp][] = [
      ["unknown key", { runtime: "bash", code: "true", colour: "red" }, /colour/],
      ["missing code", { runtime: "bash" }, /code/],
      ["wrong type", { runtime: "bash", code: 42 }, /code/],
      ["unknown runtime", { runtime: "ruby", code: "1" }, /runtime/],
      [
        "timeout over max",
        { runtime: "bash", code: "true", timeout_ms: 30001 },
        /timeout_ms.*30000/,
      ],
      ["timeout not integer", { runtime: "bash", code: "true", timeout_ms: 1.5 }, /timeout_ms/],
      ["memory over max", { runtime: "bash", code: "true", memory_mb: 513 }, /memory_mb.*512/],
      ["memory under min", { runtime: "bash", code: "true", memory_mb: 1 }, /memory_mb/],
      [
        "dotdot in files",
        { runtime: "bash", code: "true", files: { "../etc/x": "a" } },
        /files.*'\.\.'/,
      ],
      [
        "dotdot in return_files",
        { runtime: "bash", code: "true", return_files: ["/tmp/../etc/passwd"] },
        /return_files.*'\.\.'/,
      ],
      ["NUL in path", { runtime: "bash", code: "true", files: { "a\u0000b": "x" } }, /NUL/],
      [
        "path outside writable area",
        { runtime: "bash", code: "true", files: { "/etc/passwd": "x" } },
        /must lie inside/,
      ],
      [
        "path too long",
        { runtime: "bash", code: "true", files: { ["a".repeat(2000)]: "x" } },
        /longer than 1024/,
      ],
      [
        "too many files",
        {
          runtime: "bash",
          code: "true",
          files: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`f${i}`, ""])),
        },
        /at most 64/,
      ],
      [
        "file too large",
        { runtime: "bash", code: "true", files: { big: "x".repeat(5 * 1024 * 1024 + 1) } },
        /at most 5242880/,
      ],
      [
        "invalid env name",
        { runtime: "bash", code: "true", env: { "1BAD": "x" } },
        /env name "1BAD"/,
      ],
      ["env name with =", { runtime: "bash", code: "true", env: { "A=B": "x" } }, /env name/],
      [
        "too many return files",
        {
          runtime: "bash",
          code: "true",
          return_files: Array.from({ length: 33 }, (_, i) => `/tmp/${i}`),
        },
        /return_files/,
      ],
      ["code too large", { runtime: "bash", code: "#".repeat(1024 * 1024 + 1) }, /code is longer/],
    ];
    for (const [name, args, pattern] of bad) {
      test(`rejects ${name} with a clear isError result before any sandbox starts`, async () => {
        const before = snapshot().cgroups;
        const result = await h.call(args);
        assert.equal(result.isError, true);
        const text = textOf(result);
        assert.match(text, /^INVALID_INPUT: /);
        assert.match(text, pattern);
        assert.equal(result.structuredContent, undefined);
        await assertNoCallSandbox(before);
      });
    }

    test("keeps serving after bad input", async () => {
      const { s } = await h.exec({ runtime: "bash", code: "echo still-here" });
      assert.equal(s.stdout, "still-here\n");
      assert.equal(s.exit_reason, "ok");
      assert.match(s.isolation, expectedIsolation(backend));
    });
  });
}
