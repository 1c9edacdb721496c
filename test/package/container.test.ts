import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { REPO_ROOT } from "../helpers/mcp-client.js";

// The service's container recipe, checked for its structure against setup.sh and the README (no
// Containerfile linter is reachable offline). It is not built here: see docs/decisions/0006.
const containerfile = readFileSync(join(REPO_ROOT, "container/Containerfile"), "utf8");
const entrypoint = readFileSync(join(REPO_ROOT, "container/entrypoint.sh"), "utf8");
const setupSh = readFileSync(join(REPO_ROOT, "scripts/setup.sh"), "utf8");
const readme = readFileSync(join(REPO_ROOT, "README.md"), "utf8");

/** Instructions of a Containerfile: continuation lines joined, comments dropped. */
function instructions(text: string): { op: string; args: string }[] {
  return text
    .replace(/\\\n/g, " ")
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("#"))
    .map((l) => {
      const m = /^([A-Z]+)\s+(.*)$/.exec(l);
      assert.ok(m, `not an instruction (upper-case keyword first): ${l}`);
      return { op: m[1]!, args: m[2]! };
    });
}

const steps = instructions(containerfile);
const of = (op: string) => steps.filter((s) => s.op === op).map((s) => s.args);

describe("the container recipe", () => {
  test("every instruction is one podman/docker knows; base images are build arguments", () => {
    const known = new Set(["ARG", "FROM", "RUN", "COPY", "ENV", "VOLUME", "EXPOSE", "ENTRYPOINT"]);
    for (const s of steps) assert.ok(known.has(s.op), s.op);
    const froms = of("FROM");
    assert.deepEqual(froms, ["${PYTHON312_IMAGE} AS python312", "${NODE_IMAGE}"]);
    assert.match(of("ARG").join("\n"), /^NODE_IMAGE=\S*node:20-bookworm/m);
    assert.match(of("ARG").join("\n"), /^PYTHON312_IMAGE=\S*python:3\.12-slim-bookworm/m);
  });

  test("installs every Debian package setup.sh installs, without recommends, lists cleaned", () => {
    const list = /^APT_PACKAGES=\(([^)]*)\)/m.exec(setupSh)?.[1];
    assert.ok(list, "setup.sh's APT_PACKAGES");
    const wanted = list.split(/\s+/).filter(Boolean);
    const apt = of("RUN").find((r) => r.includes("apt-get install"));
    assert.ok(apt);
    const installed = new Set(apt.split(/\s+/));
    assert.deepEqual(
      wanted.filter((p) => !installed.has(p)),
      [],
      "setup in the container must find every package present",
    );
    assert.match(apt, /apt-get update/);
    assert.match(apt, /--no-install-recommends/);
    assert.match(apt, /rm -rf \/var\/lib\/apt\/lists\/\*/);
  });

  test("python3.12 for the image comes from the copied prefix; SQLite must build; setup then serve", () => {
    assert.ok(of("COPY").includes("--from=python312 /usr/local /opt/cpython3.12"));
    assert.ok(of("ENV").includes("SCRATCHRUN_PYTHON312=/opt/cpython3.12"));
    const install = of("RUN").find((r) => r.includes("npm install -g"));
    assert.match(install ?? "", /--allow-scripts=better-sqlite3/);
    assert.match(install ?? "", /new \(require\('better-sqlite3'\)\)\(':memory:'\)/);
    assert.deepEqual(of("ENTRYPOINT"), ['["/usr/local/bin/scratchrun-entrypoint"]']);
    assert.deepEqual(of("VOLUME"), ['["/var/cache/scratchrun", "/var/lib/scratchrun"]']);
    assert.deepEqual(of("EXPOSE"), ["8787"]);
    const lines = entrypoint.split("\n").filter((l) => l.trim() && !l.startsWith("#"));
    assert.deepEqual(lines, [
      "set -eu",
      "scratchrun setup",
      'exec scratchrun serve --host "${SCRATCHRUN_HOST:-0.0.0.0}" --port "${SCRATCHRUN_PORT:-8787}" "$@"',
    ]);
    assert.equal(spawnSync("sh", ["-n", join(REPO_ROOT, "container/entrypoint.sh")]).status, 0);
  });

  test("the README and the recipe document the same run command (privileges, /dev/kvm, volumes)", () => {
    const run = /podman run -d --name scratchrun .*\n.*scratchrun$/m.exec(containerfile)?.[0];
    assert.ok(run, "the Containerfile's header shows the run command");
    for (const flag of ["--privileged", "--device /dev/kvm", "-p 8787:8787"])
      assert.ok(run.includes(flag), flag);
    assert.match(readme, /container\/Containerfile/);
    assert.match(readme, /--privileged --device\s+\/dev\/kvm/);
  });
});
