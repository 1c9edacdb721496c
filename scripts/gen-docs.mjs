// Rewrites the generated blocks of the docs (limits quoted from src/schema/limits.ts, the
// settings table from src/schema/settings/table.ts, the error codes from src/errors.ts, the command
// list from src/cli/commands.ts: src/cli/doc-blocks.ts), and the README's speed
// section and the figures the docs quote from the latest benchmark results file (bench/readme.ts,
// bench/doc-figures.ts).
// Run after changing a limit, a setting, an error code or a command: npm run build && node scripts/gen-docs.mjs
// test/schema/docs.unit.test.ts fails while a doc differs from what this writes.
import { readFileSync, writeFileSync } from "node:fs";
import { renderDocBlocks } from "../dist/src/cli/doc-blocks.js";
import { GENERATED_DOCS } from "../dist/src/schema/doc-files.js";
import { latestResultsFile, renderReadme, SPEED_DOC } from "../dist/bench/readme.js";
import { FIGURE_DOCS, renderFigures } from "../dist/bench/doc-figures.js";

for (const file of GENERATED_DOCS) {
  const url = new URL(`../${file}`, import.meta.url);
  const before = readFileSync(url, "utf8");
  const after = renderDocBlocks(before);
  if (after !== before) {
    writeFileSync(url, after);
    console.log(`${file}: generated blocks rewritten`);
  }
}

const speedDoc = new URL(`../${SPEED_DOC}`, import.meta.url);
const { file, results } = latestResultsFile();
const before = readFileSync(speedDoc, "utf8");
const after = renderReadme(before, results, file);
if (after !== before) {
  writeFileSync(speedDoc, after);
  console.log(`${SPEED_DOC}: speed section rewritten from ${file}`);
}

for (const doc of FIGURE_DOCS) {
  const url = new URL(`../${doc}`, import.meta.url);
  const text = readFileSync(url, "utf8");
  const rendered = renderFigures(text, results, file);
  if (rendered !== text) {
    writeFileSync(url, rendered);
    console.log(`${doc}: benchmark figures rewritten from ${file}`);
  }
}
