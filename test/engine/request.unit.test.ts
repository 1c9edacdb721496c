import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { toAgentRequest } from "../../src/engine/request.js";
import { BASE_ENV, DISPLAY_PYTHONPATH } from "../../src/runtimes/spec.js";
import { RUNTIMES, type ExecInput, type ExecRequest } from "../../src/schema/exec.js";
import { CODE_DIR, LIMITS, WORKDIR } from "../../src/schema/limits.js";
import { parseExecRequest } from "../../src/schema/validate.js";

const parse = (input: ExecInput) => parseExecRequest(input);
const text = (b: Uint8Array) => Buffer.from(b).toString("utf8");

describe("toAgentRequest: a validated call becomes the agent's request", () => {
  it("the code is a read-only file in the code directory, run by the runtime's interpreter", () => {
    for (const runtime of RUNTIMES) {
      const r = toAgentRequest(parse({ runtime, code: "x" }), 1000);
      const code = r.files[0]!;
      assert.ok(code.path.startsWith(`${CODE_DIR}/main.`), code.path);
      assert.equal(code.mode, 0o444);
      assert.equal(text(code.content), "x");
      assert.equal(r.argv.at(-1), code.path, "the code file is the interpreter's last argument");
      assert.ok(r.argv.length >= 2);
      assert.equal(r.cwd, WORKDIR);
    }
  });

  it("the caller's env lies over the base env and nothing else reaches the code", () => {
    const r = toAgentRequest(
      parse({ runtime: "bash", code: ":", env: { HOME: "/elsewhere", TOKEN: "t0ken" } }),
      null,
    );
    assert.deepEqual(r.env, { ...BASE_ENV, HOME: "/elsewhere", TOKEN: "t0ken" });
    assert.equal(r.uid, null);
    assert.equal(r.gid, null);
  });

  it("every Python finds the display modules: matplotlib's backend is ScratchRun's; a caller's PYTHONPATH keeps them after its own", () => {
    const base = toAgentRequest(parse({ runtime: "python3.11", code: "pass" }), 1000).env;
    assert.equal(base.MPLBACKEND, "module://scratchrun_mpl");
    assert.equal(base.PYTHONPATH, DISPLAY_PYTHONPATH);
    const env = (e: Record<string, string>) =>
      toAgentRequest(parse({ runtime: "python3.11", code: "pass", env: e }), 1000).env;
    assert.equal(
      env({ PYTHONPATH: "/home/user/lib" }).PYTHONPATH,
      `/home/user/lib:${DISPLAY_PYTHONPATH}`,
    );
    assert.equal(env({ PYTHONPATH: "" }).PYTHONPATH, DISPLAY_PYTHONPATH);
    assert.equal(env({ PYTHONPATH: DISPLAY_PYTHONPATH }).PYTHONPATH, DISPLAY_PYTHONPATH);
    assert.equal(env({ MPLBACKEND: "svg" }).MPLBACKEND, "svg", "the caller's backend wins");
  });

  it("paths become absolute and normalised; limits come from LIMITS and the call", () => {
    const r = toAgentRequest(
      parse({
        runtime: "python3.11",
        code: "pass",
        files: { "data/in.csv": "a,b", "/tmp/./x.txt": "x" },
        return_files: ["out.png", "/tmp/y"],
        timeout_ms: 1234,
      }),
      1000,
    );
    assert.deepEqual(
      r.files.slice(1).map((f) => [f.path, f.mode, text(f.content)]),
      [
        [`${WORKDIR}/data/in.csv`, 0o644, "a,b"],
        ["/tmp/x.txt", 0o644, "x"],
      ],
    );
    assert.deepEqual(r.returnFiles, [`${WORKDIR}/out.png`, "/tmp/y"]);
    assert.equal(r.timeoutMs, 1234);
    assert.equal(r.maxStdoutBytes, LIMITS.outputBytes.default);
    assert.equal(r.maxFileBytes, LIMITS.returnFiles.maxFileBytes);
    assert.equal(r.maxTotalFileBytes, LIMITS.returnFiles.maxTotalBytes);
    assert.equal(r.uid, 1000);
    assert.equal(r.gid, 1000);
  });

  it("seed files go in after the code and before the caller's, and a caller's file wins", () => {
    const seed = [
      { path: "/home/user/.cache/seed", mode: 0o644, content: Buffer.from("seed") },
      { path: "/home/user/mine", mode: 0o644, content: Buffer.from("seed-version") },
    ];
    const r = toAgentRequest(
      parse({ runtime: "python3.11", code: "pass", files: { mine: "caller-version" } }),
      1000,
      seed,
    );
    assert.deepEqual(
      r.files.map((f) => [f.path, text(f.content)]),
      [
        [`${CODE_DIR}/main.py`, "pass"],
        ["/home/user/.cache/seed", "seed"],
        ["/home/user/mine", "caller-version"],
      ],
    );
  });

  it("a path that skipped validation cannot reach the engine: only the schema makes a SandboxPath", () => {
    const req = parse({ runtime: "bash", code: ":", files: { "a/./b.txt": "x" } });
    // The build fails (an unused @ts-expect-error) if a raw string ever types as a SandboxPath.
    // @ts-expect-error a path the schema did not make
    const files: ExecRequest["files"] = { "../etc/passwd": Buffer.from("x") };
    // @ts-expect-error a path the schema did not make
    const returned: ExecRequest["return_files"] = ["/etc/shadow"];
    assert.equal(Object.keys(files).length + returned.length, 2);
    assert.deepEqual(Object.keys(req.files), ["/home/user/a/b.txt"]);
    assert.equal(toAgentRequest(req, 1000).files.at(-1)?.path, "/home/user/a/b.txt");
  });
});
