// One word, one meaning (issue 54): ARCHITECTURE's "Words" said "warm" was never used for anything
// but a warm-up, while the code named warm pools, warm sandboxes and warm-also interpreters. An
// identifier in src/ named warm*, *Kind or *mode is now either a word of the glossary (its
// camelCase read as words: warmUp is "warm-up", NetworkMode "network mode"; or a warm name that
// starts with one: warmAlso is a "warm" thing), named in the glossary in backticks, or listed with its meaning in
// test/architecture/words-allowed.txt. Identifiers only: comments and strings are prose.
import assert from "node:assert/strict";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "../../..");
const read = (f: string) => readFileSync(join(ROOT, f), "utf8");

/** Names that say what kind of thing, or which mode, a value is: where a second sense creeps in. */
export const WATCHED = (name: string) =>
  /^#?warm/i.test(name) || /Kind$/.test(name) || /[mM]ode$/.test(name);

function sourceFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(join(ROOT, path)).isDirectory()) return sourceFiles(path);
    return name.endsWith(".ts") ? [path] : [];
  });
}

/** Every watched identifier of the source text, with the files it is in. */
export function watchedIdentifiers(files: readonly string[], text: (f: string) => string) {
  const out = new Map<string, string[]>();
  for (const file of files) {
    const sf = ts.createSourceFile(file, text(file), ts.ScriptTarget.Latest, false);
    const visit = (node: ts.Node) => {
      if ((ts.isIdentifier(node) || ts.isPrivateIdentifier(node)) && WATCHED(node.text)) {
        const where = out.get(node.text) ?? [];
        if (!where.includes(file)) where.push(file);
        out.set(node.text, where);
      }
      ts.forEachChild(node, visit);
    };
    visit(sf);
  }
  return out;
}

/** The glossary: ARCHITECTURE's "Words" table, its bold words (lower case, "-" read as " "). */
export function glossary(architecture: string): { words: string[]; text: string } {
  const text = /## Words\n([\s\S]*?)\n## /.exec(architecture)?.[1] ?? "";
  const rows = text.split("\n").filter((l) => l.startsWith("| **"));
  const words = rows.flatMap((r) =>
    [...r.matchAll(/\*\*([^*]+)\*\*/g)].map((m) => m[1]!.toLowerCase().replaceAll("-", " ")),
  );
  return { words, text: rows.join("\n") };
}

/** An identifier read as words: warmUpClone → "warm up clone", warm_also → "warm also". */
export function asWords(name: string): string {
  return name
    .replace(/^#/, "")
    .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
    .replaceAll("_", " ")
    .toLowerCase();
}

export function uncovered(
  ids: ReadonlyMap<string, readonly string[]>,
  gloss: { words: readonly string[]; text: string },
  allowed: ReadonlySet<string>,
): string[] {
  return [...ids]
    .filter(([name]) => {
      if (allowed.has(name) || gloss.text.includes(`\`${name}\``)) return false;
      // warmAlso is a warm thing; a jail's kind is not a jail, so *Kind and *mode must be words.
      const phrase = asWords(name);
      const prefix = (w: string) => w.startsWith("warm") && phrase.startsWith(`${w} `);
      return !gloss.words.some((w) => phrase === w || prefix(w));
    })
    .map(([name, where]) => `${name} (${where.slice(0, 3).join(", ")})`)
    .sort();
}

function allowList(): Set<string> {
  return new Set(
    read("test/architecture/words-allowed.txt")
      .split("\n")
      .filter((l) => l.trim() && !l.startsWith("#"))
      .map((l) => l.split(/\s+/)[0]!),
  );
}

describe("every warm*, *Kind and *mode name in src/ is a word of the glossary or listed", () => {
  const files = sourceFiles("src").map((f) => relative(ROOT, join(ROOT, f)));
  const gloss = glossary(read("docs/ARCHITECTURE.md"));

  test("none is left undefined", () => {
    const ids = watchedIdentifiers(files, read);
    assert.ok(ids.has("NetworkMode") && ids.has("warmAlso"), "the walk finds identifiers");
    assert.deepEqual(
      uncovered(ids, gloss, allowList()),
      [],
      "define these in docs/ARCHITECTURE.md's Words, or list them in test/architecture/words-allowed.txt",
    );
  });

  test("a new name, or one in a comment or string only, is judged as the rule says", () => {
    const src = [
      "// warmish comments are prose; so is the string below",
      'const s = "VmKind";',
      "type JailKind = 1; let warmAlso = 2; let warmth = 3; let poolMode = 4;",
    ].join("\n");
    const ids = watchedIdentifiers(["x.ts"], () => src);
    assert.deepEqual([...ids.keys()].sort(), ["JailKind", "poolMode", "warmAlso", "warmth"]);
    assert.deepEqual(uncovered(ids, gloss, new Set()), [
      "JailKind (x.ts)",
      "poolMode (x.ts)",
      "warmth (x.ts)",
    ]);
  });
});
