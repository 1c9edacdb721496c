#!/usr/bin/env node
// Runs the compiled test files one file at a time (they share the host: cgroups, netns, leak
// checks), with node's own test runner. Arguments narrow the set: substrings of file paths.
// --unit runs only the pure tests: no root, QEMU, image or network needed, seconds in all.
import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { spawnSync } from "node:child_process";

function find(dir) {
  let out = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out = out.concat(find(p));
    else if (name.endsWith(".test.js")) out.push(p);
  }
  return out;
}

/**
 * Pure tests: schema, renderers, result ranking, admission, answer budget, codec, parsers, the
 * layers of src/.
 */
const UNIT = [
  "api/pure",
  "api/wire",
  "architecture/layers",
  "architecture/settings-reads",
  "engine/admission",
  "engine/request",
  "engine/result",
  "engine/shape-output",
  "images/config",
  "images/python-lock",
  "images/recipe",
  "jail/cgroup-plan",
  "jail/seccomp-program",
  "mcp/answer-budget",
  "microvm/cpio",
  "microvm/lz4",
  "net/addresses",
  "net/allowlist",
  "net/proxy-parsers",
  "protocol/codec",
  "protocol/guest-header",
  "schema/docs",
  "schema/file-content",
  "schema/policy",
  "schema/runtime-table",
  "schema/settings",
  "security/properties",
].map((name) => join("dist", "test", `${name}.test.js`));

const args = process.argv.slice(2);
const missing = UNIT.filter((f) => !existsSync(f));
if (args.includes("--unit") && missing.length > 0) {
  console.error(`unit test files missing (renamed? build first): ${missing.join(", ")}`);
  process.exit(1);
}
const unit = args.includes("--unit");
const filters = args.filter((a) => a !== "--unit");
const files = (unit ? UNIT : find("dist/test"))
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)))
  .sort();
if (files.length === 0) {
  console.error("no test files matched");
  process.exit(1);
}
const r = spawnSync(process.execPath, ["--test", "--test-concurrency=1", ...files], {
  stdio: "inherit",
});
process.exit(r.status ?? 1);
