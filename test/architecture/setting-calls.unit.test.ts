// Settings are read where a process is composed (src/compose/, src/cli/) and passed down typed
// (issue 54). This walks every file of src/ and counts the calls of setting() / settingOn()
// outside those folders and the settings module itself: there are none, and a new one fails.
import assert from "node:assert/strict";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "../../..");
/** Where reading a setting belongs. */
const READERS = ["src/compose/", "src/cli/", "src/schema/settings/"];

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return name.endsWith(".ts") ? [relative(ROOT, path).split("\\").join("/")] : [];
  });
}

/** How many times `text` calls setting() or settingOn() (by name; comments and strings are not calls). */
export function settingCalls(file: string, text: string): number {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  let n = 0;
  const visit = (node: ts.Node) => {
    if (
      ts.isCallExpression(node) &&
      ts.isIdentifier(node.expression) &&
      (node.expression.text === "setting" || node.expression.text === "settingOn")
    )
      n++;
    ts.forEachChild(node, visit);
  };
  visit(source);
  return n;
}

describe("settings are read where a process is composed, and passed down", () => {
  test("the counter sees calls, not words", () => {
    assert.equal(settingCalls("a.ts", 'const a = setting("SCRATCHRUN_HOME", env);'), 1);
    assert.equal(settingCalls("a.ts", 'settingOn("SCRATCHRUN_PREIMPORT", env) && f()'), 1);
    assert.equal(
      settingCalls("a.ts", '// setting("SCRATCHRUN_HOME", env)\nconst s = "setting(";'),
      0,
    );
    assert.equal(settingCalls("a.ts", "x.setting(1); settings(2);"), 0);
  });

  test("no setting() or settingOn() outside src/compose/ and src/cli/", () => {
    const found: Record<string, number> = {};
    for (const file of sourceFiles(join(ROOT, "src"))) {
      if (READERS.some((dir) => file.startsWith(dir))) continue;
      const n = settingCalls(file, readFileSync(join(ROOT, file), "utf8"));
      if (n > 0) found[file] = n;
    }
    assert.deepEqual(
      found,
      {},
      "a setting read outside src/compose/ and src/cli/: parse it in src/schema/settings/values.ts and pass the value down from where the process is composed",
    );
  });
});
