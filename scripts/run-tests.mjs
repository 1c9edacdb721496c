#!/usr/bin/env node
// Runs the compiled test files one file at a time (they share the host: cgroups, netns, leak
// checks), with node's own test runner. Arguments narrow the set: substrings of file paths.
// --unit runs only the pure tests (*.unit.test.ts).
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

const args = process.argv.slice(2);
const unit = args.includes("--unit");
const filters = args.filter((a) => a !== "--unit");
// A test file whose source is gone (renamed or deleted since the last build) is stale output,
// not a test: tsc never deletes what it once wrote.
const compiled = find(join("dist", "test")).filter((f) =>
  existsSync(join("test", f.slice(join("dist", "test").length + 1)).replace(/\.js$/, ".ts")),
);
// Pure tests name themselves *.unit.test.ts: no root, QEMU, image or network, seconds in all.
const files = compiled
  .filter((f) => !unit || f.endsWith(".unit.test.js"))
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)))
  .sort();
if (files.length === 0) {
  console.error("no test files matched");
  process.exit(1);
}
// Each test's server builds its own microVM templates (what it measures and counts), unless a
// test keeps them itself (test/microvm/template-store.test.ts).
const r = spawnSync(process.execPath, ["--test", "--test-concurrency=1", ...files], {
  stdio: "inherit",
  env: {
    ...process.env,
    SCRATCHRUN_TEMPLATE_CACHE: process.env.SCRATCHRUN_TEMPLATE_CACHE ?? "off",
  },
});
process.exit(r.status ?? 1);
