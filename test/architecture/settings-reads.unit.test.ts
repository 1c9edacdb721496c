// Every SCRATCHRUN_* variable is read through the settings schema (src/schema/settings/):
// setting("SCRATCHRUN_X", env) or settingOn("SCRATCHRUN_X", env), whose names the compiler checks
// against the schema. This walks every file of src/ and names each place that reads one by its
// literal name instead (env.SCRATCHRUN_X, env["SCRATCHRUN_X"], const { SCRATCHRUN_X } = env).
import assert from "node:assert/strict";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "../../..");
/** The settings module: the one place that reads the environment by these names. */
const SETTINGS_DIR = "src/schema/settings/";
const PREFIX = "SCRATCHRUN_";

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return name.endsWith(".ts") ? [relative(ROOT, path).split("\\").join("/")] : [];
  });
}

/**
 * "file:line: NAME" for each literal SCRATCHRUN_ name read off an object: a property access, an
 * element access with a string, a destructured key. The schema's own table (`SETTINGS.X`) is not
 * a read of the environment. Writes in object literals (`{ ...env, SCRATCHRUN_X: flag }`),
 * strings and comments are not reads.
 */
export function literalSettingReads(file: string, text: string): string[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const out: string[] = [];
  const found = (node: ts.Node, name: string) => {
    const { line } = source.getLineAndCharacterOfPosition(node.getStart());
    out.push(`${file}:${line + 1}: ${name}`);
  };
  const isSchema = (e: ts.Expression) => ts.isIdentifier(e) && e.text === "SETTINGS";
  const visit = (node: ts.Node) => {
    if (
      ts.isPropertyAccessExpression(node) &&
      node.name.text.startsWith(PREFIX) &&
      !isSchema(node.expression)
    )
      found(node, node.name.text);
    else if (
      ts.isElementAccessExpression(node) &&
      ts.isStringLiteralLike(node.argumentExpression) &&
      node.argumentExpression.text.startsWith(PREFIX) &&
      !isSchema(node.expression)
    )
      found(node, node.argumentExpression.text);
    else if (ts.isBindingElement(node) && ts.isObjectBindingPattern(node.parent)) {
      const key = node.propertyName ?? node.name;
      if ((ts.isIdentifier(key) || ts.isStringLiteral(key)) && key.text.startsWith(PREFIX))
        found(node, key.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out;
}

describe("SCRATCHRUN_* variables are read through the settings schema", () => {
  const files = sourceFiles(join(ROOT, "src"));

  test("no file of src/ outside src/schema/settings/ reads one by its literal name", () => {
    assert.ok(files.length > 100, `${files.length} files under src/`);
    const reads = files
      .filter((file) => !file.startsWith(SETTINGS_DIR))
      .flatMap((file) => literalSettingReads(file, readFileSync(join(ROOT, file), "utf8")));
    assert.deepEqual(reads, [], 'read these with setting("SCRATCHRUN_…", env) (settings/read.ts)');
  });

  test("the check catches each way of reading one, and nothing else", () => {
    const text = [
      "const a = process.env.SCRATCHRUN_A;",
      "const b = env?.SCRATCHRUN_B ?? '1';",
      'const c = env["SCRATCHRUN_C"];',
      "const { SCRATCHRUN_D } = env;",
      'const { "SCRATCHRUN_E": e } = env;',
      "// env.SCRATCHRUN_COMMENT",
      "const f = { ...env, SCRATCHRUN_WRITE: flag };",
      'const g = "SCRATCHRUN_STRING";',
      'const h = setting("SCRATCHRUN_ACCESSOR", env);',
      "const i = SETTINGS.SCRATCHRUN_SCHEMA.doc;",
      "const [SCRATCHRUN_ARRAY] = list;",
    ].join("\n");
    assert.deepEqual(literalSettingReads("x.ts", text), [
      "x.ts:1: SCRATCHRUN_A",
      "x.ts:2: SCRATCHRUN_B",
      "x.ts:3: SCRATCHRUN_C",
      "x.ts:4: SCRATCHRUN_D",
      "x.ts:5: SCRATCHRUN_E",
    ]);
  });
});
