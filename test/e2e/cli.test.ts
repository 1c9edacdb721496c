import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { CLI_FLAGS } from "../../src/cli/run.js";
import { execInputShape } from "../../src/schema/exec.js";
import { REPO_ROOT } from "../helpers/mcp-client.js";

const CLI = join(REPO_ROOT, "dist/src/bin/scratchrun.js");
const run = (args: string[], input?: string) =>
  spawnSync(process.execPath, [CLI, "run", "--isolation", "namespace", ...args], {
    encoding: "utf8",
    input,
    env: { ...process.env, SCRATCHRUN_NETWORK: "none" },
  });

describe("scratchrun run (the CLI front end of the same engine)", () => {
  const dir = mkdtempSync(join(tmpdir(), "scratchrun-cli-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  test("every schema field has a flag, but session_id (a session outlives one CLI process) and inputs (a list of overlays)", () => {
    assert.deepEqual(
      Object.keys(CLI_FLAGS).sort(),
      Object.keys(execInputShape)
        .filter((k) => k !== "session_id" && k !== "inputs")
        .sort(),
    );
  });

  test("runs a file, passes stdout/stderr through and exits with the code's exit code", () => {
    const script = join(dir, "s.py");
    writeFileSync(
      script,
      "import sys\nprint('hello')\nprint('oops', file=sys.stderr)\nsys.exit(4)\n",
    );
    const r = run(["--runtime", "python3.11", script]);
    assert.equal(r.stdout, "hello\n");
    assert.equal(r.stderr, "oops\n");
    assert.equal(r.status, 4);
  });

  test("reads code from stdin, takes --env, --file and --return-file, writes files to --out-dir", () => {
    const local = join(dir, "in.txt");
    writeFileSync(local, "from the host\n");
    const out = join(dir, "out");
    const r = run(
      [
        "--runtime",
        "bash",
        "--env",
        "GREETING=hi",
        "--file",
        `data/in.txt=${local}`,
        "--return-file",
        "/tmp/o.txt",
        "--out-dir",
        out,
        "--json",
        "-",
      ],
      'cat data/in.txt > /tmp/o.txt; echo "$GREETING" >> /tmp/o.txt',
    );
    assert.equal(r.status, 0, r.stderr);
    const result = JSON.parse(r.stdout) as { exit_reason: string; files: { status: string }[] };
    assert.equal(result.exit_reason, "ok");
    assert.equal(result.files[0]?.status, "ok");
    assert.equal(readFileSync(join(out, "o.txt"), "utf8"), "from the host\nhi\n");
  });

  test("bad input exits 2 naming the field; a timeout exits 124", () => {
    const bad = run(["--runtime", "bash", "--timeout-ms", "99999", "--code", "true"]);
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /INVALID_INPUT: .*timeout_ms/);
    const slow = run(["--runtime", "bash", "--timeout-ms", "300", "--code", "sleep 5"]);
    assert.equal(slow.status, 124);
    assert.match(slow.stderr, /timeout/);
  });
});
