#!/usr/bin/env node
// The whole runtime matrix: every e2e and security case written for "a Python" on every Python
// runtime, on both backends (CI=true), one run per runtime (SCRATCHRUN_TEST_PYTHON; see
// test/helpers/pythons.ts). `npm test` runs the representative slice: those cases on python3.11,
// plus python3.12's own (the product page's example, its font cache, its pre-imports).
//   node scripts/test-matrix.mjs [python3.12 …]     (default: every Python runtime)
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const { RUNTIMES } = await import(pathToFileURL(join("dist", "src", "runtimes", "names.js")).href);
const pythons = RUNTIMES.filter((r) => r.startsWith("python"));
const asked = process.argv.slice(2);
const bad = asked.filter((a) => !pythons.includes(a));
if (bad.length > 0) {
  console.error(`not a Python runtime: ${bad.join(", ")} (have ${pythons.join(", ")})`);
  process.exit(2);
}
const results = [];
for (const python of asked.length ? asked : pythons) {
  const started = Date.now();
  console.error(`[matrix] e2e and security on ${python}, both backends`);
  const r = spawnSync(process.execPath, ["scripts/run-tests.mjs", "test/e2e/", "test/security/"], {
    stdio: "inherit",
    env: { ...process.env, CI: "true", SCRATCHRUN_TEST_PYTHON: python },
  });
  results.push(
    `${python}: ${r.status === 0 ? "pass" : "FAIL"} (${Math.round((Date.now() - started) / 60000)} min)`,
  );
}
console.error(`[matrix] ${results.join("; ")}`);
process.exit(results.some((r) => r.includes("FAIL")) ? 1 : 0);
