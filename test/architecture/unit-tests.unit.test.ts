// `node scripts/run-tests.mjs --unit` runs the files named *.unit.test.ts: pure tests, seconds in
// all, no root, QEMU, image or network. The name is the promise; this holds it by what the files
// import: none reaches a helper that starts a server, a sandbox, Postgres or a cluster.
import assert from "node:assert/strict";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";

const TEST_DIR = join(dirname(fileURLToPath(import.meta.url)), "../../../test");

/** Test-side modules that start real parts (a server, a sandbox, Postgres, a cluster, QEMU). */
const STARTS_REAL_PARTS = [
  "helpers/suite",
  "helpers/mcp-client",
  "helpers/postgres",
  "helpers/leaks",
  "helpers/custom-image",
  "api/harness",
  "cluster/harness",
  "microvm/fixture",
];

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}

/** What of STARTS_REAL_PARTS a test file's source imports, as "folder/name". */
export function realPartsImported(file: string, source: string): string[] {
  const found: string[] = [];
  for (const m of source.matchAll(/from\s+"(\.[^"]+)"/g)) {
    const target = relative(TEST_DIR, join(dirname(file), m[1]!)).replace(/\.js$/, "");
    if (STARTS_REAL_PARTS.includes(target)) found.push(target);
  }
  return found;
}

describe("unit tests are found by their name", () => {
  const unit = files(TEST_DIR).filter((f) => f.endsWith(".unit.test.ts"));

  test("there are unit tests in most folders", () => {
    const folders = new Set(unit.map((f) => relative(TEST_DIR, dirname(f))));
    assert.ok(unit.length >= 20, `${unit.length} unit test files`);
    assert.ok(folders.size >= 10, [...folders].join(", "));
  });

  test("no unit test imports a helper that starts a server, a sandbox, Postgres or a cluster", () => {
    const bad = unit
      .map((f) => [relative(TEST_DIR, f), realPartsImported(f, readFileSync(f, "utf8"))] as const)
      .filter(([, found]) => found.length > 0);
    assert.deepEqual(bad, []);
  });

  test("the check sees such an import", () => {
    const file = join(TEST_DIR, "engine", "x.unit.test.ts");
    assert.deepEqual(
      // (Joined, so that this file's own source does not import it by the check's reading.)
      realPartsImported(
        file,
        ["import { serverForSuite } from ", '"../helpers/suite.js";'].join(""),
      ),
      ["helpers/suite"],
    );
    assert.deepEqual(realPartsImported(file, 'import { PY } from "../helpers/pythons.js";'), []);
  });
});
