import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, describe, test } from "node:test";
import { MCP_BIN, textOf } from "../helpers/mcp-client.js";
import { securityServer, SECURITY_BACKENDS, type SecurityServer } from "./harness.js";

const MiB = 1024 * 1024;
const ok = { runtime: "bash", code: "true" };

/**
 * Hostile input at the edge: every field at, past and far past its limit, wrong types, unicode,
 * NUL and `__proto__` keys, raw malformed JSON-RPC, and secrets that must not leak. Ids:
 * SEC-INPUT-*, SEC-SECRETS in docs/THREAT-MODEL.md; API-BADINPUT in docs/SPECIFICATION.md.
 */
for (const backend of SECURITY_BACKENDS) {
  describe(`security: input [${backend}]`, () => {
    let s: SecurityServer;
    before(async () => {
      s = await securityServer(backend, {}, ["bash"]);
    });
    after(async () => s.close());

    test("SEC-INPUT-LIMITS: every numeric field at both ends of its range is accepted", async () => {
      for (const extra of [
        { timeout_ms: 100, memory_mb: 32 },
        { timeout_ms: 30000, memory_mb: 512 },
      ]) {
        const r = await s.run({ runtime: "bash", code: "echo at-limit", ...extra });
        // Under TCG a shell in a fresh VM takes longer than 100 ms to start and print: the call
        // is accepted and runs, and its deadline is what ends it.
        if (r.isolation === "microvm-tcg" && extra.timeout_ms === 100)
          assert.ok(["ok", "timeout"].includes(r.exit_reason), JSON.stringify(r));
        else assert.equal(r.stdout, "at-limit\n", JSON.stringify(extra));
      }
    });

    test("SEC-INPUT-LIMITS: code of exactly 1 MiB, 64 files and a 1024-byte path are accepted", async () => {
      const code = `echo big\n#${"x".repeat(MiB - 10)}`;
      assert.equal(Buffer.byteLength(code), MiB - 10 + 10);
      const big = await s.run({ runtime: "bash", code });
      assert.equal(big.stdout, "big\n");
      const files = Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`f${i}`, `${i}`]));
      const many = await s.run({ runtime: "bash", code: "cat f63; ls | wc -l", files });
      assert.equal(many.stdout, "6364\n");
      // 1024 bytes in components of at most 200 (NAME_MAX is 255).
      const segs = ["/tmp"];
      while (segs.join("/").length + 201 <= 1024) segs.push("d".repeat(200));
      segs.push("f".repeat(1024 - segs.join("/").length - 1));
      const long = segs.join("/");
      assert.equal(Buffer.byteLength(long), 1024);
      const p = await s.run({
        runtime: "bash",
        code: "true",
        files: { [long]: "x" },
        return_files: [long],
      });
      assert.equal(p.files[0]?.status, "ok", JSON.stringify(p));
    });

    // Hole H9, closed: the env total is capped (256 KiB) inside what execve accepts.
    test("SEC-INPUT-LIMITS: env at its total limit reaches the code", async () => {
      const env = Object.fromEntries(
        Array.from({ length: 7 }, (_, i) => [`V${i}`, "v".repeat(32 * 1024)]),
      );
      const r = await s.run({ runtime: "bash", code: "echo ${#V6}", env });
      assert.equal(r.stdout, "32768\n", JSON.stringify(r).slice(0, 400));
    });

    test("SEC-INPUT-LIMITS: an env past its total is refused up front, naming the limit", async () => {
      const env = Object.fromEntries(
        Array.from({ length: 64 }, (_, i) => [`V${i}`, "v".repeat(32 * 1024)]),
      );
      const r = await s.h.call({ runtime: "bash", code: "echo ${#V63}", env });
      assert.equal(r.isError, true);
      assert.match(textOf(r), /env totals \d+ bytes; at most 262144/);
      const next = await s.run({ runtime: "bash", code: "echo next" });
      assert.equal(next.stdout, "next\n");
    });

    const refused: [string, Record<string, unknown>, RegExp][] = [
      ["timeout 1e12", { ...ok, timeout_ms: 1e12 }, /timeout_ms/],
      ["timeout negative", { ...ok, timeout_ms: -1 }, /timeout_ms/],
      ["timeout under min", { ...ok, timeout_ms: 99 }, /timeout_ms/],
      ["timeout 2^53+2", { ...ok, timeout_ms: 2 ** 53 + 2 }, /timeout_ms/],
      ["memory 1e9", { ...ok, memory_mb: 1e9 }, /memory_mb/],
      ["memory just under min", { ...ok, memory_mb: 31 }, /memory_mb/],
      ["code 10 MB", { runtime: "bash", code: "#".repeat(10 * 1000 * 1000) }, /code is longer/],
      [
        "10000 return files",
        { ...ok, return_files: Array.from({ length: 10000 }, (_, i) => `/tmp/${i}`) },
        /return_files/,
      ],
      [
        "5000 files",
        { ...ok, files: Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`f${i}`, ""])) },
        /at most 64/,
      ],
      [
        "65 env entries",
        { ...ok, env: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`E${i}`, ""])) },
        /at most 64/,
      ],
      [
        "env value 32 KiB + 1",
        { ...ok, env: { A: "v".repeat(32 * 1024 + 1) } },
        /env A: value is longer/,
      ],
      ["env name 129 bytes", { ...ok, env: { ["N".repeat(129)]: "" } }, /longer than 128/],
      [
        "path 1025 bytes",
        { ...ok, return_files: [`/tmp/${"p".repeat(1020)}`] },
        /longer than 1024/,
      ],
      ["runtime as number", { runtime: 1, code: "true" }, /runtime/],
      ["code null", { runtime: "bash", code: null }, /code/],
      ["env as array", { ...ok, env: ["A=1"] }, /env/],
      ["env value number", { ...ok, env: { A: 1 } }, /env/],
      ["files value object", { ...ok, files: { a: { b: 1 } } }, /files/],
      ["return_files string", { ...ok, return_files: "/tmp/x" }, /return_files/],
      ["network private", { ...ok, network: "private" }, /network/],
      ["timeout as string", { ...ok, timeout_ms: "1000" }, /timeout_ms/],
      ["memory boolean", { ...ok, memory_mb: true }, /memory_mb/],
      ["unicode env name", { ...ok, env: { ÄBC: "x" } }, /env name/],
      ["NUL in env name", { ...ok, env: { "A\u0000B": "x" } }, /env name/],
      ["NUL in env value", { ...ok, env: { A: "x\u0000y" } }, /NUL/],
      ["C1 control in path", { ...ok, return_files: ["/tmp/a\u009bb"] }, /control character/],
      ["DEL in path", { ...ok, files: { "/tmp/a\u007f": "" } }, /control character/],
      ["lone surrogate in path", { ...ok, return_files: ["/tmp/\ud800x"] }, /surrogate/],
      ["empty path", { ...ok, files: { "": "x" } }, /empty/],
      ["the writable root itself", { ...ok, return_files: ["/tmp"] }, /must lie inside/],
      ["sibling of a root", { ...ok, return_files: ["/home/username/x"] }, /must lie inside/],
      ["same file twice", { ...ok, files: { "/home/user/a": "1", a: "2" } }, /given twice/],
      ["__proto__ in env", { ...ok, env: JSON.parse('{"__proto__":"x"}') as object }, /__proto__/],
      [
        "__proto__ in files",
        { ...ok, files: JSON.parse('{"__proto__":"x"}') as object },
        /__proto__/,
      ],
    ];
    for (const [name, args, pattern] of refused) {
      test(`SEC-INPUT: refuses ${name}, naming the field`, async () => {
        const r = await s.h.call(args);
        assert.equal(
          r.isError,
          true,
          `accepted: ${JSON.stringify(r.structuredContent)?.slice(0, 200)}`,
        );
        assert.match(textOf(r), /^INVALID_INPUT: /);
        assert.match(textOf(r), pattern);
      });
    }

    test("SEC-INPUT-TYPES: unicode paths round-trip; a constructor key is an ordinary name", async () => {
      const path = "/tmp/é-😀-日本.txt";
      const r = await s.run({
        runtime: "bash",
        code: 'cat "/tmp/é-😀-日本.txt"; echo " $constructor"',
        files: { [path]: "ünïcode" },
        env: JSON.parse('{"constructor":"c","toString":"t"}') as Record<string, string>,
        return_files: [path],
      });
      assert.equal(r.stdout, "ünïcode c\n");
      assert.equal(r.files[0]?.path, path);
      assert.equal(r.files[0]?.status, "ok");
    });

    test("SEC-SECRETS: env values are not in the server's logs, error messages or the next call", async () => {
      const secret = `sk-live-${Date.now().toString(36)}-9f3e1c`;
      const bad = await s.h.call({
        ...ok,
        env: { API_KEY: secret, "1BAD": secret, LONG: `${secret}${"z".repeat(40000)}` },
      });
      assert.equal(bad.isError, true);
      assert.doesNotMatch(textOf(bad), new RegExp(secret), "the error names fields, not values");
      const used = await s.run({
        runtime: "bash",
        code: 'test -n "$API_KEY" && exit 3',
        env: { API_KEY: secret },
      });
      assert.equal(used.exit_code, 3, "the secret did reach the code");
      const next = await s.run({
        runtime: "bash",
        code: "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; env",
      });
      assert.doesNotMatch(next.stdout + next.stderr, new RegExp(secret));
      assert.doesNotMatch(s.h.stderr(), new RegExp(secret));
    });

    // Hole H3b, closed: the server reads lines up to 64 MiB, so a 12 MB request gets an answer.
    test("SEC-INPUT-RPC: a 12 MB line is refused and the server keeps serving", async () => {
      const r = await s.h.call({
        runtime: "bash",
        code: "true",
        env: { A: "x" },
        files: { a: "x".repeat(6 * MiB), b: "x".repeat(5 * MiB) },
      });
      assert.equal(r.isError, true);
      const next = await s.run({ runtime: "bash", code: "echo next" });
      assert.equal(next.stdout, "next\n");
    });
  });

  describe(`security: raw JSON-RPC on stdio [${backend}]`, () => {
    test("SEC-INPUT-RPC: garbage lines, wrong shapes and a 9 MB line do not stop the server", async () => {
      const child = spawn(process.execPath, [MCP_BIN], {
        env: {
          PATH: process.env.PATH ?? "/usr/bin:/bin",
          HOME: process.env.HOME ?? "/root",
          SCRATCHRUN_NETWORK: "none",
          SCRATCHRUN_ISOLATION: backend,
          SCRATCHRUN_POOL_SIZE: "bash=1",
          // The kept templates, as the runner's servers share them (scripts/run-tests.mjs).
          SCRATCHRUN_TEMPLATE_CACHE: process.env.SCRATCHRUN_TEMPLATE_CACHE ?? "off",
        },
        stdio: ["pipe", "pipe", "pipe"],
      });
      child.stderr.resume();
      let out = "";
      const answers = new Map<unknown, Record<string, unknown>>();
      child.stdout.on("data", (d: Buffer) => {
        out += d.toString();
        let i;
        while ((i = out.indexOf("\n")) >= 0) {
          const line = out.slice(0, i);
          out = out.slice(i + 1);
          try {
            const msg = JSON.parse(line) as Record<string, unknown>;
            if ("id" in msg) answers.set(msg.id, msg);
          } catch {
            answers.set(`unparsable:${answers.size}`, { line });
          }
        }
      });
      const send = (line: string | Buffer) =>
        child.stdin.write(
          typeof line === "string" ? `${line}\n` : Buffer.concat([line, Buffer.from("\n")]),
        );
      const waitFor = async (id: unknown) => {
        for (let i = 0; i < 600 && !answers.has(id); i++)
          await new Promise((r) => setTimeout(r, 50));
        return answers.get(id);
      };
      try {
        for (const junk of [
          "hello",
          "{",
          "[]",
          "null",
          '{"jsonrpc":"2.0"}',
          '{"jsonrpc":"1.0","id":1,"method":"initialize"}',
          '{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}',
          '{"jsonrpc":"2.0","id":90,"method":"tools/call","params":{"name":"scratchrun_exec","arguments":{"runtime":"bash","code":"echo early"}}}',
          `{"jsonrpc":"2.0","id":91,"method":"x","params":"${"A".repeat(9 * 1000 * 1000)}"}`,
        ])
          send(junk);
        send(Buffer.from([0xff, 0xfe, 0x00, 0x7b, 0x22]));
        send(
          JSON.stringify({
            jsonrpc: "2.0",
            id: 1,
            method: "initialize",
            params: {
              protocolVersion: "2025-06-18",
              capabilities: {},
              clientInfo: { name: "raw", version: "1" },
            },
          }),
        );
        assert.ok(await waitFor(1), "initialize answered after the garbage");
        send('{"jsonrpc":"2.0","method":"notifications/initialized"}');
        send(
          JSON.stringify({
            jsonrpc: "2.0",
            id: 2,
            method: "tools/call",
            params: {
              name: "scratchrun_exec",
              arguments: { runtime: "bash", code: "echo raw-ok" },
            },
          }),
        );
        const answer = await waitFor(2);
        const result = answer?.result as { structuredContent?: { stdout?: string } } | undefined;
        assert.equal(result?.structuredContent?.stdout, "raw-ok\n", JSON.stringify(answer));
        assert.equal(child.exitCode, null, "the server is still running");
      } finally {
        child.kill("SIGTERM");
        await new Promise((r) => child.once("close", r));
      }
    });
  });
}
