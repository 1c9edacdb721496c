#!/usr/bin/env node
// Re-renders the markdown table and the SVG chart from a results json:
// `node dist/bench/render.js bench/results/<date>-<host>.json [out dir]`.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { renderMarkdown } from "./report-md.js";
import { renderSvg } from "./report-svg.js";
import type { BenchResults } from "./results.js";

const [file, outDir] = process.argv.slice(2);
if (!file) {
  process.stderr.write("usage: render <results.json> [out dir]\n");
  process.exit(2);
}
const results = JSON.parse(readFileSync(file, "utf8")) as BenchResults;
const out = outDir ?? dirname(file);
const suffix = results.mode === "full" ? "" : `-${results.mode}`;
writeFileSync(join(out, `latest${suffix}.md`), renderMarkdown(results));
writeFileSync(join(out, `latest${suffix}.svg`), renderSvg(results));
