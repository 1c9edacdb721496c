// PROTOCOL's hand-kept lists pinned to the guest's source (issue 54): the agent's options (its
// command line and the table of them) and the bytes on the seed port. PROTOCOL lacked
// `--warm-also` and its `U` message for a week after the agent took them.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";

const REPO = join(import.meta.dirname, "..", "..", "..");
const read = (f: string) => readFileSync(join(REPO, f), "utf8");

/** The text of PROTOCOL's section `title`, up to the next heading of its level or above. */
function section(doc: string, title: string): string {
  const start = doc.indexOf(`${title}\n`);
  assert.ok(start >= 0, title);
  const level = /^#+/.exec(title)![0];
  const rest = doc.slice(start + title.length);
  const end = rest.search(new RegExp(`\\n#{1,${level.length}} `));
  return end < 0 ? rest : rest.slice(0, end);
}

/** The options guest/agent.c's argument loop takes. */
export function agentOptions(agentC: string): string[] {
  return [...agentC.matchAll(/strcmp\(argv\[i\], "(--[a-z-]+)"\)/g)].map((m) => m[1]!).sort();
}

/** The bytes guest/agent-seed.c writes to or reads from the seed port. */
export function seedPortBytes(seedC: string): string[] {
  const read = [...seedC.matchAll(/type [!=]= '([A-Z])'/g)].map((m) => m[1]!);
  const written = [...seedC.matchAll(/write\(port, "([A-Z])", 1\)/g)].map((m) => m[1]!);
  return [...new Set([...read, ...written])].sort();
}

describe("PROTOCOL's lists are the guest's", () => {
  const protocol = read("docs/PROTOCOL.md");

  test("the agent's options: each in the command line and in the table, none the agent lacks", () => {
    const options = agentOptions(read("guest/agent.c"));
    assert.ok(options.length >= 9 && options.includes("--warm-also"), options.join(" "));
    const text = section(protocol, "## Agent command line");
    const synopsis = /`agent ([^`]*)`/.exec(text)?.[1] ?? "";
    const rows = [...text.matchAll(/^\| `(--[a-z-]+)[^`]*` \|/gm)].map((m) => m[1]!).sort();
    assert.deepEqual(rows, options, "the table's rows");
    const inSynopsis = [...synopsis.matchAll(/\[(--[a-z-]+)/g)].map((m) => m[1]!).sort();
    assert.deepEqual(inSynopsis, options, "the command line");
  });

  test("the seed port's bytes: each a row of the table, with its code", () => {
    const bytes = seedPortBytes(read("guest/agent-seed.c"));
    assert.deepEqual(bytes, ["R", "S", "T", "U", "W"]);
    const text = section(protocol, "### Seed port (microVM only)");
    const rows = [...text.matchAll(/^\| `([A-Z])` \((0x[0-9a-f]{2})\) \|/gm)];
    assert.deepEqual(rows.map((m) => m[1]).sort(), bytes);
    for (const [, letter, hex] of rows) assert.equal(Number(hex), letter!.charCodeAt(0), letter);
  });
});
