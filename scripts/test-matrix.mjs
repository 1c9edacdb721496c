#!/usr/bin/env node
// The whole runtime matrix: every e2e and security case written for "a Python" on every Python
// runtime, on both backends (CI=true), one run per runtime (SCRATCHRUN_TEST_PYTHON; see
// test/helpers/pythons.ts). `npm test` runs the representative slice: those cases on python3.11,
// plus python3.12's own (the product page's example, its font cache, its pre-imports).
// The era leg runs the same e2e and security suites through a 2026-07-28 client
// (SCRATCHRUN_TEST_ERA; test/helpers/mcp-client.ts), on both backends; `npm test` runs the era
// slice: test/e2e/protocol-eras, test/e2e/tasks and test/conformance, which drive both eras.
//   node scripts/test-matrix.mjs [python3.12 …] [2026-07-28]   (default: every leg)
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const { RUNTIMES } = await import(pathToFileURL(join("dist", "src", "runtimes", "names.js")).href);
const pythons = RUNTIMES.filter((r) => r.startsWith("python"));
const ERA = "2026-07-28";
// Suites the era leg leaves to the 2025 one, each with why.
const NOT_IN_ERA_LEG = {
  "e2e/protocol-eras.test.js": "drives both eras itself (npm test)",
  "e2e/tasks.test.js": "drives both eras' tasks itself (npm test)",
  "e2e/mcp-experience.test.js":
    "turns on Logging (logging/setLevel), the 2025 revision's; a 2026 request asks for output in its _meta (protocol-eras)",
  "security/stream-redaction.test.js":
    "reads output through Logging, the 2025 revision's; 2026's streamed output is redacted in protocol-eras",
};
const asked = process.argv.slice(2);
const bad = asked.filter((a) => !pythons.includes(a) && a !== ERA);
if (bad.length > 0) {
  console.error(`not a Python runtime: ${bad.join(", ")} (have ${pythons.join(", ")})`);
  process.exit(2);
}
const results = [];
const legs = asked.length ? asked : [...pythons, ERA];
for (const python of legs.filter((l) => l !== ERA)) {
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
if (legs.includes(ERA)) {
  const started = Date.now();
  const files = ["e2e", "security"].flatMap((d) =>
    readdirSync(join("dist", "test", d))
      .filter((f) => f.endsWith(".test.js") && !NOT_IN_ERA_LEG[`${d}/${f}`])
      .map((f) => `test/${d}/${f}`),
  );
  for (const [f, why] of Object.entries(NOT_IN_ERA_LEG))
    console.error(`[matrix] ${ERA}: not ${f}: ${why}`);
  console.error(`[matrix] e2e and security through a ${ERA} client, both backends`);
  const r = spawnSync(process.execPath, ["scripts/run-tests.mjs", ...files], {
    stdio: "inherit",
    env: { ...process.env, CI: "true", SCRATCHRUN_TEST_ERA: ERA },
  });
  results.push(
    `${ERA} client: ${r.status === 0 ? "pass" : "FAIL"} (${Math.round((Date.now() - started) / 60000)} min)`,
  );
}
console.error(`[matrix] ${results.join("; ")}`);
process.exit(results.some((r) => r.includes("FAIL")) ? 1 : 0);
