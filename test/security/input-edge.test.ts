import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import fc from "fast-check";
import type { ExecOutcome } from "../../src/engine/result.js";
import { toAgentRequest } from "../../src/engine/request.js";
import { fitAnswerBudget } from "../../src/mcp/answer-budget.js";
import { normaliseSandboxPath } from "../../src/schema/paths.js";
import { parseExecRequest, protoKeyPaths } from "../../src/schema/validate.js";
import { startService, type ServiceHarness } from "../api/harness.js";
import { TEST_BACKENDS } from "../helpers/backends.js";
import {
  assertNoCallSandbox,
  assertNoLeaks,
  snapshot,
  type HostSnapshot,
} from "../helpers/leaks.js";
import { REPO_ROOT, textOf } from "../helpers/mcp-client.js";
import { serverForSuite } from "../helpers/suite.js";

/**
 * What an object copy can hide, and a file asked for twice (threat model H15, H16; SEC-INPUT-TYPES,
 * SEC-RETURN-DEDUP). JSON.parse keeps an own `__proto__` key as data; every copy after it (the MCP
 * SDK's argument record, zod records, spreads) drops it or makes it a prototype, so it must be
 * refused on the untouched input, on every front end. Names that merely look like Object's own
 * members (`constructor`, `toString`) are ordinary env names and file names and must arrive intact.
 */
const raw = (json: string) => JSON.parse(json) as Record<string, unknown>;
const OK = '"runtime":"bash","code":"echo ran"';

describe("__proto__ and Object-member keys (pure)", () => {
  test("an own __proto__ key is refused at the top level, in env and in files, naming where", () => {
    for (const [json, where] of [
      [`{${OK},"__proto__":{"network":"none"}}`, "request"],
      [`{"__proto__":{},${OK}}`, "request"],
      [`{${OK},"__proto__":null}`, "request"],
      [`{${OK},"env":{"__proto__":"secret-value"}}`, "env"],
      [`{${OK},"files":{"__proto__":"content"}}`, "files"],
    ] as const) {
      assert.deepEqual(protoKeyPaths(raw(json)), [where], json);
      assert.throws(
        () => parseExecRequest(raw(json)),
        new RegExp(`^.*${where}: the key "__proto__" is not allowed`),
        json,
      );
    }
  });

  test("constructor, prototype, toString at the top level are unknown keys like any other", () => {
    for (const key of [
      "constructor",
      "prototype",
      "toString",
      "hasOwnProperty",
      "__defineGetter__",
    ])
      assert.throws(
        () => parseExecRequest(raw(`{${OK},"${key}":{}}`)),
        new RegExp(`Unrecognized key: "${key}"`),
        key,
      );
  });

  test("env and file names that are Object members arrive as given, own and exact", () => {
    const names = ["constructor", "prototype", "toString", "valueOf", "hasOwnProperty"];
    const env = Object.fromEntries(names.map((n, i) => [n, `value-${i}-${n}`]));
    const files = Object.fromEntries([...names, "__defineGetter__"].map((n) => [n, `file ${n}`]));
    const req = parseExecRequest(raw(JSON.stringify({ runtime: "bash", code: "x", env, files })));
    assert.deepEqual(Object.entries(req.env), Object.entries(env));
    assert.deepEqual(
      Object.entries(req.files),
      Object.entries(files).map(([n, content]) => [`/home/user/${n}`, Buffer.from(content)]),
    );
    assert.equal(Object.getPrototypeOf(req.env), Object.prototype);
    const agent = toAgentRequest(req, 1000);
    for (const n of names) assert.equal(agent.env[n], env[n], n);
    for (const n of Object.keys(files))
      assert.ok(
        agent.files.some((f) => f.path === `/home/user/${n}`),
        n,
      );
  });

  test("property: a __proto__ key anywhere the schema has an object is refused, never dropped", () => {
    fc.assert(
      fc.property(
        fc.constantFrom("top", "env", "files"),
        fc.jsonValue(),
        fc.boolean(),
        (where, value, first) => {
          const proto = `"__proto__":${JSON.stringify(value)}`;
          const inner = (o: string) =>
            first ? `{${proto}${o ? `,${o}` : ""}}` : `{${o}${o ? "," : ""}${proto}}`;
          const json =
            where === "top"
              ? inner(OK)
              : `{${OK},"${where}":${inner(where === "env" ? '"A":"b"' : '"a.txt":"b"')}}`;
          assert.throws(() => parseExecRequest(raw(json)), /"__proto__" is not allowed/);
          assert.equal(({} as Record<string, unknown>).network, undefined, "no pollution");
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe("duplicate return_files (pure)", () => {
  test("two spellings of one file become one entry, absolute, in the first spelling's place", () => {
    const req = parseExecRequest({
      runtime: "bash",
      code: "x",
      return_files: ["ok.txt", "/tmp/a", "/home/user/./ok.txt", "/home/user/ok.txt", "/tmp//a"],
    });
    assert.deepEqual(req.return_files, ["/home/user/ok.txt", "/tmp/a"]);
    assert.deepEqual(toAgentRequest(req, 1000).returnFiles, ["/home/user/ok.txt", "/tmp/a"]);
  });

  test("property: unique by normalised path, order of first mention kept, nothing lost", () => {
    const spelling = fc
      .tuple(
        fc.constantFrom("a", "b.txt", "d/c.png"),
        fc.constantFrom("", "./", "/home/user/", "/home/user/./", "/home//user/", "/tmp/"),
      )
      .map(([name, prefix]) => `${prefix}${name}`);
    fc.assert(
      fc.property(fc.array(spelling, { maxLength: 32 }), (paths) => {
        const norm = (p: string) => {
          const r = normaliseSandboxPath(p);
          assert.ok(r.ok, p);
          return r.path;
        };
        const out = parseExecRequest({ runtime: "bash", code: "x", return_files: paths });
        assert.deepEqual(out.return_files, [...new Set(paths.map(norm))]);
      }),
    );
  });

  test("the answer budget names exactly the files it leaves out, even for one path twice", () => {
    const file = (path: string, size: number) => ({
      path,
      mimeType: "application/octet-stream",
      content: Buffer.alloc(size, 1),
    });
    const info = (path: string, size: number) => ({
      path,
      status: "ok" as const,
      size_bytes: size,
      mime_type: "application/octet-stream",
    });
    const o: ExecOutcome = {
      result: {
        stdout: "",
        stderr: "",
        exit_code: 0,
        exit_reason: "ok",
        signal: null,
        duration_ms: 1,
        isolation: "namespace",
        network: "none",
        stdout_truncated: false,
        stderr_truncated: false,
        stdout_omitted_bytes: 0,
        stderr_omitted_bytes: 0,
        files: [info("/home/user/ok.txt", 3), info("/home/user/ok.txt", 3)],
      },
      files: [file("/home/user/ok.txt", 3), file("/home/user/ok.txt", 3)],
      images: [],
    };
    const fitted = fitAnswerBudget(o);
    assert.equal(fitted.result.message, undefined, "nothing was left out, so nothing is said");
    assert.equal(fitted.files.length, 2);
  });
});

const CLI = join(REPO_ROOT, "dist/src/bin/scratchrun.js");

describe("__proto__ on the command line and over REST", () => {
  let h: ServiceHarness;
  let key: string;
  let base: HostSnapshot;
  const dir = mkdtempSync(join(tmpdir(), "sr-proto-"));

  before(async () => {
    base = snapshot();
    h = await startService();
    key = (await h.keys.create("proto")).key;
  });
  after(async () => {
    await h?.close();
    rmSync(dir, { recursive: true, force: true });
    await assertNoLeaks(base);
  });

  test("REST /v1/exec: a top-level or nested __proto__ is 400 naming it, and nothing runs", async () => {
    for (const body of [
      `{${OK},"__proto__":{"network":"none"}}`,
      `{${OK},"env":{"__proto__":"v"}}`,
      `{${OK},"files":{"__proto__":"v"}}`,
    ]) {
      const runs = (await h.runs.all()).length;
      const res = await h.post("/v1/exec", body, key);
      assert.equal(res.status, 400, body);
      const err = (await res.json()) as { error: { code: string; message: string } };
      assert.equal(err.error.code, "INVALID_INPUT");
      assert.match(err.error.message, /the key "__proto__" is not allowed/);
      assert.equal((await h.runs.all()).length, runs, "no run was recorded: nothing started");
    }
  });

  test("scratchrun run: --env and --file named __proto__ exit 2 naming it", () => {
    const local = join(dir, "f.txt");
    writeFileSync(local, "x");
    for (const flag of [
      ["--env", "__proto__=value1"],
      ["--file", `__proto__=${local}`],
    ]) {
      const r = spawnSync(
        process.execPath,
        [
          CLI,
          "run",
          "--isolation",
          "namespace",
          "--runtime",
          "bash",
          "--code",
          "echo ran",
          ...flag,
        ],
        { encoding: "utf8", env: { ...process.env, SCRATCHRUN_NETWORK: "none" } },
      );
      assert.equal(r.status, 2, r.stderr);
      assert.match(r.stderr, /INVALID_INPUT: .*the key "__proto__" is not allowed/);
      assert.doesNotMatch(r.stdout, /ran/);
    }
  });
});

for (const backend of TEST_BACKENDS) {
  describe(`object copies and duplicate return_files over MCP [${backend}]`, () => {
    const h = serverForSuite(backend);

    test("H15: a top-level __proto__ in the arguments is refused before any sandbox starts", async () => {
      for (const args of [
        `{${OK},"__proto__":{"network":"none"}}`,
        `{${OK},"env":{"__proto__":"v"}}`,
      ]) {
        const before = snapshot().cgroups;
        const r = await h.call(raw(args));
        assert.equal(r.isError, true, `the call ran: ${JSON.stringify(r).slice(0, 300)}`);
        assert.match(textOf(r), /^INVALID_INPUT: .*the key "__proto__" is not allowed/);
        await assertNoCallSandbox(before);
      }
    });

    test("env and file names that are Object members reach the code intact", async () => {
      const { s } = await h.exec({
        runtime: "bash",
        code: 'echo "$constructor|$toString|$valueOf"; cat constructor prototype __defineGetter__',
        env: { constructor: "c-value", toString: "t-value", valueOf: "v-value" },
        files: { constructor: "C\n", prototype: "P\n", __defineGetter__: "G\n" },
        redact_env: false,
      });
      assert.equal(s.stdout, "c-value|t-value|v-value\nC\nP\nG\n");
    });

    test("H16: a file named twice in two spellings is read and returned once, with no false note", async () => {
      const { s, result } = await h.exec({
        runtime: "bash",
        code: "true",
        files: { "ok.txt": "hello" },
        return_files: ["ok.txt", "/home/user/./ok.txt", "/home/user/ok.txt"],
      });
      assert.equal(s.message, undefined, `false message: ${s.message}`);
      assert.deepEqual(s.files, [
        { path: "/home/user/ok.txt", status: "ok", size_bytes: 5, mime_type: "text/plain" },
      ]);
      const resources = result.content.filter((b) => b.type === "resource");
      assert.equal(resources.length, 1);
      assert.doesNotMatch(textOf(result), /Left out/);
    });
  });
}
