import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  GENERATED_BLOCKS,
  formatBytes,
  generatedBlockNames,
  knownByteSizes,
  renderGeneratedBlocks,
} from "../../src/schema/limits-doc.js";
import { GENERATED_DOCS } from "../../src/schema/doc-files.js";
import { DOC_BLOCKS, renderDocBlocks } from "../../src/cli/doc-blocks.js";
import { ERROR_CODES } from "../../src/errors.js";
import { settingsTable } from "../../src/schema/settings/doc.js";
import { SETTING_NAMES } from "../../src/schema/settings/table.js";
import { LIMITS } from "../../src/schema/limits.js";
import { MAX_AGENT_FRAME, MAX_REQUEST_FRAME } from "../../src/protocol/codec.js";

const REPO = join(import.meta.dirname, "..", "..", "..");
const read = (f: string) => readFileSync(join(REPO, f), "utf8");

/**
 * Sizes the docs quote that are not limits of a call, each with where the number comes from. A
 * size in a doc that is neither a limit nor listed here fails the test: that is how a doc that
 * quotes a limit the code does not have is caught.
 */
const NOT_LIMITS: Record<string, string> = {
  "10 MiB": "the MCP SDK's stdio client's message cap (THREAT-MODEL H3), not ours",
  "160 MiB": "QEMU's own memory on top of the guest's RAM in its jail's cgroup (microvm/jail)",
  "2 MiB": "64 env values of 32 KiB (THREAT-MODEL H9), and the inline image bound",
  "64 KiB":
    "the agent's O/E frame payload (guest/agent-run.c); the egress proxy's read of a ClientHello (MAX_PEEK_BYTES)",
  "16 KiB":
    "the egress proxy's largest HTTP request head (MAX_HEAD_BYTES, src/net/proxy/http-head.ts)",
  "4 KiB": "the part of MAX_AGENT_FRAME above one file's 16 MiB",
  "16 MiB": "the largest file frame the agent may send, MAX_AGENT_FRAME without its header",
};

describe("docs quote the limits the code has (generated from LIMITS)", () => {
  it("every generated block in every doc equals its rendering (run scripts/gen-docs.mjs)", () => {
    for (const file of GENERATED_DOCS) {
      const doc = read(file);
      assert.equal(renderDocBlocks(doc), doc, `${file} is stale: node scripts/gen-docs.mjs`);
    }
  });

  it("every block is in a doc: the tool's parameters and result limits and the commands in the README, the commands and error codes in ARCHITECTURE", () => {
    const inAny = GENERATED_DOCS.flatMap((f) => generatedBlockNames(read(f)));
    for (const name of Object.keys(DOC_BLOCKS)) assert.ok(inAny.includes(name), name);
    const readme = generatedBlockNames(read("README.md"));
    for (const name of ["parameter-table", "result-limits", "commands"])
      assert.ok(readme.includes(name), `README.md: ${name}`);
    const architecture = generatedBlockNames(read("docs/ARCHITECTURE.md"));
    for (const name of ["commands", "error-codes"])
      assert.ok(architecture.includes(name), `docs/ARCHITECTURE.md: ${name}`);
  });

  it("the error codes' table has every code, and no doc names a code the code lacks", () => {
    const table = DOC_BLOCKS["error-codes"]!();
    for (const code of ERROR_CODES) assert.ok(table.includes(`\`${code}\``), code);
    // Codes the HTTP body reader adds beside the engine's, and the table's own name.
    const wire = new Set(["PAYLOAD_TOO_LARGE", "UNSUPPORTED_MEDIA_TYPE", "ERROR_CODE_MEANINGS"]);
    const failure =
      /## Failure model\n([\s\S]*?)(\n## |$)/.exec(read("docs/ARCHITECTURE.md"))?.[1] ?? "";
    const named = [...failure.matchAll(/`([A-Z][A-Z_]{3,})`/g)].map((m) => m[1]!);
    assert.ok(named.length >= ERROR_CODES.length);
    for (const n of named)
      assert.ok((ERROR_CODES as readonly string[]).includes(n) || wire.has(n), n);
  });

  it("the README is the user's guide, at most 300 lines; the rest is in docs/ and linked", () => {
    const readme = read("README.md");
    const lines = readme.split("\n").length - 1;
    assert.ok(lines <= 300, `README.md has ${lines} lines`);
    for (const doc of GENERATED_DOCS.filter((f) => f.startsWith("docs/")))
      assert.ok(readme.includes(`](${doc})`), `README.md links ${doc}`);
  });

  it("the parameter table names every limit the schema enforces", () => {
    const table = GENERATED_BLOCKS["parameter-table"]!();
    for (const v of [
      formatBytes(LIMITS.codeBytes.max),
      formatBytes(LIMITS.files.maxFileBytes),
      formatBytes(LIMITS.files.maxTotalBytes),
      formatBytes(LIMITS.returnFiles.maxFileBytes),
      formatBytes(LIMITS.returnFiles.maxTotalBytes),
      `${LIMITS.timeoutMs.min} – ${LIMITS.timeoutMs.max}`,
      `${LIMITS.memoryMb.min} – ${LIMITS.memoryMb.max}`,
      `${LIMITS.shownOutputBytes.min} – ${LIMITS.shownOutputBytes.max}`,
    ])
      assert.ok(table.includes(v), `table lacks ${v}`);
  });

  it("a doc's MiB/KiB quantity is a limit of the code or a named non-limit", () => {
    const known = knownByteSizes([MAX_REQUEST_FRAME, MAX_AGENT_FRAME - 4096]);
    const stray: string[] = [];
    for (const file of GENERATED_DOCS) {
      const lines = read(file).split("\n");
      lines.forEach((line, i) => {
        for (const m of line.matchAll(/\b(\d+(?:\.\d+)?) ?([KM]iB)\b/g)) {
          const q = `${m[1]} ${m[2]}`;
          if (!known.has(q) && !(q in NOT_LIMITS)) stray.push(`${file}:${i + 1}: ${q}`);
        }
      });
    }
    assert.deepEqual(stray, [], "quantities that match no limit in src/schema/limits.ts");
  });

  it("the check catches a wrong number (the README's old 10 MiB files total)", () => {
    const known = knownByteSizes();
    assert.ok(!known.has("20 MiB") && !known.has("1 GiB"));
    assert.ok(known.has(formatBytes(LIMITS.files.maxTotalBytes)));
    const doc =
      "<!-- generated:parameter-table -->\n| stale |\n<!-- /generated:parameter-table -->";
    assert.notEqual(renderGeneratedBlocks(doc), doc);
    assert.throws(() =>
      renderGeneratedBlocks("<!-- generated:nope -->\nx\n<!-- /generated:nope -->"),
    );
  });

  it("docs/CONFIGURATION.md's settings table is the settings schema's, every variable in it", () => {
    const readme = read("docs/CONFIGURATION.md");
    const block =
      /<!-- generated:settings-table -->\n([\s\S]*?)\n<!-- \/generated:settings-table -->/.exec(
        readme,
      )?.[1] ?? "";
    assert.equal(
      block,
      settingsTable(),
      "docs/CONFIGURATION.md is stale: node scripts/gen-docs.mjs",
    );
    for (const name of SETTING_NAMES) assert.ok(block.includes(`\`${name}\``), name);
    // A row typed by hand, or one the schema no longer has, is caught.
    const edited = readme.replace(
      "| `SCRATCHRUN_POOL_SIZE` | `1` |",
      "| `SCRATCHRUN_POOL_SIZE` | `2` |",
    );
    assert.notEqual(edited, readme);
    assert.notEqual(renderDocBlocks(edited), edited);
  });
});
