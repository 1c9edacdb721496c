#!/usr/bin/env node
// Runs the compiled test files with node's own test runner and ends with the ten slowest files and
// their seconds. Files that use the host (cgroups, netns, leak checks) run one at a time; the pure
// ones (*.unit.test.ts: no root, QEMU, image or network) run beside them on the other core, their
// report printed after the host files' so the two never interleave.
// Arguments narrow the set: substrings of file paths. --unit runs only the pure tests
// (*.unit.test.ts).
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { spawn } from "node:child_process";

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
// Test servers share the microVM templates setup keeps (SCRATCHRUN_TEMPLATE_CACHE=on: the key
// names everything a template is made from, so a kept one is what the server would build). The
// tests that measure or count template building make their own: in-process backends without a
// store (test/microvm/), their own directories (test/microvm/template-store.test.ts,
// test/e2e/templates.test.ts); another image's servers keep theirs off (test/e2e/custom-image).
// The reporter you would get without one named, and beside it one that times each file.
const reporter = process.stdout.isTTY ? "spec" : "tap";
const timingDir = mkdtempSync(join(tmpdir(), "sr-test-timing-"));
const timingReporter = join(import.meta.dirname ?? "scripts", "test-timing-reporter.mjs");
const env = {
  ...process.env,
  SCRATCHRUN_TEMPLATE_CACHE: process.env.SCRATCHRUN_TEMPLATE_CACHE ?? "on",
  // A stdio server a test starts runs its own engine, never forwarding to a local service that
  // answers here (setup's unit, or one a killed test left): test/e2e/local-service.test.ts
  // starts its users' servers with an environment of its own.
  SCRATCHRUN_LOCAL: "1",
};

/**
 * One node --test run over `list`, a file at a time; `capture`: its report kept and returned
 * rather than printed as it comes. Resolves with its exit status and the timing file.
 */
function lane(name, list, capture) {
  const timingFile = join(timingDir, `${name}.json`);
  const child = spawn(
    process.execPath,
    [
      "--test",
      "--test-concurrency=1",
      `--test-reporter=${reporter}`,
      "--test-reporter-destination=stdout",
      `--test-reporter=${timingReporter}`,
      `--test-reporter-destination=${timingFile}`,
      ...list,
    ],
    { stdio: ["inherit", capture ? "pipe" : "inherit", capture ? "pipe" : "inherit"], env },
  );
  let report = "";
  if (capture) {
    child.stdout.on("data", (d) => (report += d));
    child.stderr.on("data", (d) => (report += d));
  }
  return new Promise((resolve) => {
    child.on("close", (code, signal) =>
      resolve({ status: code ?? (signal ? 1 : 0), timingFile, report }),
    );
  });
}

const pure = files.filter((f) => f.endsWith(".unit.test.js"));
const host = files.filter((f) => !f.endsWith(".unit.test.js"));
const lanes = [];
if (host.length > 0) lanes.push(lane("host", host, false));
// Alone, the pure files print as they run; beside host files, after them.
if (pure.length > 0) lanes.push(lane("pure", pure, host.length > 0));
const done = await Promise.all(lanes);
const seconds = {};
for (const l of done) {
  if (l.report) process.stdout.write(`\n# the pure tests, run beside the others:\n${l.report}`);
  Object.assign(seconds, readSeconds(l.timingFile));
}
if (Object.keys(seconds).length > 0) {
  printSlowest(seconds);
  // Every file's seconds stay beside the build (dist/test-seconds.json): what a run cost, file by
  // file, for whoever plans which files to speed up or run side by side.
  writeFileSync(join("dist", "test-seconds.json"), JSON.stringify(seconds));
}
rmSync(timingDir, { recursive: true, force: true });
process.exit(done.some((l) => l.status !== 0) ? 1 : 0);

/** A lane's timing reporter's output; empty when the lane ended before it wrote (killed). */
function readSeconds(path) {
  try {
    return JSON.parse(readFileSync(path, "utf8"));
  } catch {
    return {};
  }
}

/** The ten files that took longest, slowest first, with their seconds. */
function printSlowest(seconds) {
  const rows = Object.entries(seconds)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 10);
  const total = Object.values(seconds).reduce((a, b) => a + b, 0);
  const width = Math.max(...rows.map(([, s]) => s.toFixed(1).length));
  console.log(
    `\nslowest test files (of ${Object.keys(seconds).length}, ${Math.round(total)} s in all):`,
  );
  for (const [file, s] of rows)
    console.log(
      `  ${s.toFixed(1).padStart(width)} s  ${relative(join(process.cwd(), "dist"), file)}`,
    );
}
