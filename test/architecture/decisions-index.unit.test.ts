// docs/decisions/README.md is the index a reader starts from: every decision file has its row, and
// every row's link names a file that exists (0015 and 0019 were written without rows and went
// unseen for weeks).
import assert from "node:assert/strict";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const DIR = join(dirname(fileURLToPath(import.meta.url)), "../../../docs/decisions");

test("the decisions index has a row for every decision and links only files that exist", () => {
  const index = readFileSync(join(DIR, "README.md"), "utf8");
  const linked = [...index.matchAll(/\]\(([^)#]+\.md)\)/g)].map((m) => m[1]!);
  const decisions = readdirSync(DIR).filter((f) => /^\d{4}-.+\.md$/.test(f));
  assert.ok(decisions.length >= 20, `decisions found: ${decisions.length}`);
  assert.deepEqual(
    decisions.filter((f) => !linked.includes(f)),
    [],
    "decisions without a row in docs/decisions/README.md",
  );
  assert.deepEqual(
    linked.filter((f) => !existsSync(join(DIR, f))),
    [],
    "rows linking a file that does not exist",
  );
});
