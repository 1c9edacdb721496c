import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  CallToolResultSchema,
  LoggingMessageNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import { startServer, textOf, type ExecStructured } from "../helpers/mcp-client.js";
import { serverForSuite } from "../helpers/suite.js";
import { PY } from "../helpers/pythons.js";

/**
 * The backends' servers run side by side: the tests that talk only to their own server run
 * concurrently across backends, one after another within one. Cancellation compares the host
 * with its state before both servers started (assertNoLeaks while serving), so it runs after, one
 * backend at a time, where the other's sandboxes cannot count as its leaks; the host is checked
 * once more after both servers have stopped.
 */
describe("MCP experience on every backend", () => {
  let base: HostSnapshot;
  before(() => {
    base = snapshot();
  });
  const servers = new Map(
    TEST_BACKENDS.map((b) => [b, serverForSuite(b, {}, { sharedBase: () => base })] as const),
  );
  // Both servers start at once; their tests begin once both have.
  before(async () => {
    await Promise.all([...servers.values()].map((s) => s.started()));
  });
  // After the servers' own after hooks (registered above): both have stopped.
  after(async () => {
    await assertNoLeaks(base);
  });

  describe("MCP experience, side by side", { concurrency: true }, () => {
    for (const backend of TEST_BACKENDS) {
      describe(`MCP experience [${backend}]`, { concurrency: false }, () => {
        const h = servers.get(backend)!;

        test("progress: stages and elapsed time, always increasing", async () => {
          const events: { progress: number; message?: string }[] = [];
          const result = await h.client.callTool(
            {
              name: "scratchrun_exec",
              arguments: { runtime: "bash", code: "sleep 2.5; echo done" },
            },
            CallToolResultSchema,
            { onprogress: (p) => events.push({ progress: p.progress, message: p.message }) },
          );
          assert.equal((result.structuredContent as unknown as ExecStructured).stdout, "done\n");
          const messages = events.map((e) => e.message ?? "");
          assert.ok(messages.includes("starting sandbox"), messages.join("|"));
          assert.ok(messages.includes("running"), messages.join("|"));
          assert.ok(
            messages.some((m) => /^running, \d+ s elapsed$/.test(m)),
            messages.join("|"),
          );
          for (let i = 1; i < events.length; i++)
            assert.ok(events[i]!.progress > events[i - 1]!.progress, "progress must increase");
        });

        test("output streams as logging messages once the client asks, with secrets redacted", async () => {
          const lines: { logger?: string; data: unknown }[] = [];
          h.client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
            lines.push({ logger: n.params.logger, data: n.params.data });
          });
          await h.client.setLoggingLevel("info");
          const { s } = await h.exec({
            runtime: "bash",
            code: 'echo "line one"; echo "token=$TOKEN" >&2; printf "partial"',
            env: { TOKEN: "sk-live-0123456789" },
          });
          assert.equal(s.exit_reason, "ok");
          const stdout = lines
            .filter((l) => l.logger === "stdout")
            .map((l) => l.data)
            .join("");
          const stderr = lines
            .filter((l) => l.logger === "stderr")
            .map((l) => l.data)
            .join("");
          assert.equal(stdout, "line one\npartial");
          assert.equal(stderr, "token=[redacted:TOKEN]\n");
          assert.doesNotMatch(JSON.stringify(lines), /sk-live-0123456789/);
          await h.client.setLoggingLevel("warning");
        });

        test("long output keeps head and tail with the omitted byte count", async () => {
          const { s, result } = await h.exec({
            runtime: PY,
            code: "print('START'); print('x' * 100000); print('END')",
            max_output_bytes: 2048,
          });
          assert.equal(s.stdout_truncated, true);
          assert.ok(s.stdout.startsWith("START\n"));
          assert.ok(s.stdout.endsWith("END\n"));
          assert.ok(s.stdout_omitted_bytes > 95000 && s.stdout_omitted_bytes < 100013);
          assert.match(
            s.stdout,
            new RegExp(`\\[\\.\\.\\. ${s.stdout_omitted_bytes} bytes omitted \\.\\.\\.\\]`),
          );
          assert.match(textOf(result), /^--- stdout \(truncated\) [0-9a-f]{12} ---$/m);
        });

        test("env values are redacted in stdout, stderr and returned text files, unless opted out", async () => {
          const code = 'echo "$SECRET"; echo "$SECRET" >&2; echo "k=$SECRET" > /tmp/out.txt';
          const env = { SECRET: "hunter2-very-secret" };
          const on = await h.exec({ runtime: "bash", code, env, return_files: ["/tmp/out.txt"] });
          assert.equal(on.s.stdout, "[redacted:SECRET]\n");
          assert.equal(on.s.stderr, "[redacted:SECRET]\n");
          assert.doesNotMatch(JSON.stringify(on.result), /hunter2-very-secret/);
          const off = await h.exec({
            runtime: "bash",
            code,
            env,
            return_files: ["/tmp/out.txt"],
            redact_env: false,
          });
          assert.equal(off.s.stdout, "hunter2-very-secret\n");
          const file = off.result.content.find((b) => b.type === "resource");
          assert.ok(
            file && "text" in file.resource && file.resource.text === "k=hunter2-very-secret\n",
          );
        });

        test("an image over the inline bound comes back as a resource with a note, never dropped", async () => {
          const { s, result } = await h.exec({
            runtime: PY,
            code: "import os\nopen('/tmp/big.png','wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + os.urandom(3 << 20))",
            return_files: ["/tmp/big.png"],
          });
          assert.equal(s.files[0]?.status, "ok");
          assert.equal(result.content.filter((b) => b.type === "image").length, 0);
          const res = result.content.find((b) => b.type === "resource");
          assert.ok(res && "blob" in res.resource);
          assert.equal(Buffer.from(res.resource.blob, "base64").length, (3 << 20) + 8);
          assert.match(textOf(result), /returned as a resource, not inline/);
        });

        test("scratchrun_runtimes lists exact versions and packages from the image", async () => {
          const result = await h.client.callTool({ name: "scratchrun_runtimes", arguments: {} });
          const text = textOf(result as Parameters<typeof textOf>[0]);
          assert.match(text, /^python3\.12: 3\.12\.\d+/m);
          assert.match(text, /^python3\.11: 3\.11\.\d+; packages: .*numpy \d/m);
          assert.match(text, /^node20: v20\./m);
          // The server's warm pools, as /readyz has them (a real backend's, not a fixture's).
          assert.match(
            text,
            /^warm pools: .*bash\/plain (full|building|empty) \(\d+\/\d+\) since /m,
          );
          const { tools } = await h.client.listTools();
          const exec = tools.find((t) => t.name === "scratchrun_exec");
          assert.equal(exec?.annotations?.openWorldHint, true);
          assert.match(exec?.description ?? "", /scratchrun_runtimes/);
        });
      });
    }
  });

  for (const backend of TEST_BACKENDS) {
    describe(`MCP experience [${backend}], checks against the host`, () => {
      const h = servers.get(backend)!;

      test("cancellation ends the sandbox at once and the server keeps serving", async () => {
        const controller = new AbortController();
        const started = Date.now();
        const call = h.call(
          { runtime: "bash", code: "echo started; sleep 25", timeout_ms: 30000 },
          { signal: controller.signal },
        );
        setTimeout(() => controller.abort(), 700);
        await assert.rejects(call);
        await assertNoLeaks(h.base(), 5000, { whileServing: true });
        assert.ok(Date.now() - started < 20_000, "the sandbox did not run to its timeout");
        const next = await h.exec({ runtime: "bash", code: "echo next" });
        assert.equal(next.s.stdout, "next\n");
      });
    });
  }
});

describe("a dropped connection ends the server's sandboxes", () => {
  test("closing the client mid-call leaves nothing behind", async () => {
    const base = snapshot();
    const h = await startServer({ SCRATCHRUN_ISOLATION: "namespace" });
    const call = h.call({ runtime: "bash", code: "sleep 25", timeout_ms: 30000 }).catch(() => null);
    await new Promise((r) => setTimeout(r, 800));
    await h.close();
    await call;
    await assertNoLeaks(base, 8000);
  });
});
