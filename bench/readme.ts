#!/usr/bin/env node
// The speed section (docs/SPEED.md, which the README links), rendered from one results file:
// `node dist/bench/readme.js [results.json]` rewrites it from that file, or from the latest in
// bench/results (what `npm run docs` does). test/bench/readme.unit.test.ts fails while the doc
// differs from the rendering of the latest results file.
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { pathToFileURL } from "node:url";
import { REPO_ROOT } from "./peers.js";
import { glance, runLine } from "./report-md.js";
import { sessionsTable, ttiTable } from "./report-phases.js";
import type { BenchResults } from "./results.js";
import { ratio } from "./stats.js";
import { burst, warmP50 } from "./targets.js";

export const RESULTS_DIR = join(REPO_ROOT, "bench/results");
/** The doc that holds the speed section, from the repository root; its links go up one folder. */
export const SPEED_DOC = "docs/SPEED.md";
const BLOCK = /(<!-- bench:speed -->\n)([\s\S]*?)(\n<!-- \/bench:speed -->)/;

/**
 * The newest benchmark results file in dir, by the run's own date (not the file's mtime, which a
 * checkout resets): a `<date>-<host>[-quick].json` of `npm run bench` (format 1, with latency
 * rows). Other json there (the cluster bench's) is not one.
 */
export function latestResultsFile(dir = RESULTS_DIR): { file: string; results: BenchResults } {
  let best: { file: string; results: BenchResults } | null = null;
  for (const name of readdirSync(dir)) {
    if (!name.endsWith(".json")) continue;
    let r: BenchResults;
    try {
      r = JSON.parse(readFileSync(join(dir, name), "utf8")) as BenchResults;
    } catch {
      continue;
    }
    if (r.format !== 1 || !Array.isArray(r.latency) || typeof r.date !== "string") continue;
    if (!best || r.date > best.results.date) best = { file: join(dir, name), results: r };
  }
  if (!best) throw new Error(`no benchmark results file in ${dir}`);
  return best;
}

const range = (xs: (number | undefined)[]) => {
  const v = xs.filter((x): x is number => x !== undefined).map((x) => x / 1000);
  if (v.length === 0) return null;
  const [lo, hi] = [Math.min(...v).toFixed(2), Math.max(...v).toFixed(2)];
  return lo === hi ? `${lo} s` : `${lo}–${hi} s`;
};

/** The numbers the README's prose quotes, each from this run. */
function sentences(r: BenchResults): string[] {
  const out: string[] = [];
  const ns = warmP50(r, "namespace", "python3.11");
  const q = ratio(ns, warmP50(r, "bwrap", "python3.11"));
  if (q !== null) out.push(`python3.11 \`print\` on the namespace backend: ${q}× raw bubblewrap.`);
  const runtimes = ["python3.12", "python3.11", "node20", "bash"];
  const empty = range(runtimes.map((rt) => warmP50(r, "microvm-empty", rt)));
  if (empty) out.push(`microVM with its pool empty (a clone restored per call): ${empty}.`);
  const cold = range(runtimes.map((rt) => warmP50(r, "microvm-nopool", rt)));
  if (cold)
    out.push(
      `microVM cold boot (what a runtime's first call after start waits for: its template is one, then the call runs in a clone): ${cold}.`,
    );
  const idle = r.cost.idleVms;
  if (idle)
    out.push(
      `Idle pooled VMs: ${idle.cpuPercentEach}% of a core and ${idle.rssMbEach} MB RSS (${idle.pssMbEach} MB PSS) each.`,
    );
  const loop = burst(r, "microvm");
  if (loop)
    out.push(
      `microVM back to back (closed loop, one client): ${loop.callsPerSec} calls/s, ${loop.ratio}× its idle-pool p50.`,
    );
  return out.map((s) => `- ${s}`);
}

/** What the run measured: its mode and arguments, or the sizes of its phases. */
function what(r: BenchResults): string {
  if (r.args) return `\`node dist/bench/run.js ${r.args.join(" ")}\``;
  const parts = [`a ${r.mode} run`];
  if (r.tti)
    parts.push(`time to interactive ${r.tti.sequentialN} in sequence and ${r.tti.burstN} at once`);
  if (r.sessions)
    parts.push(`the sessions workload on a ${(r.sessions.csvBytes / 1e6).toFixed(1)} MB CSV`);
  return parts.join(", ");
}

/** The speed section for one results file (its path as SPEED_DOC links it, from docs/). */
export function renderSpeedBlock(r: BenchResults, file: string): string {
  const link = `bench/results/${basename(file)}`;
  const report = `bench/results/latest${r.mode === "full" ? "" : `-${r.mode}`}.md`;
  const L = [
    `From [${link}](../${link}) (${what(r)}; its report: [${report}](../${report})): ${runLine(r)}`,
    "",
    `Warm latency for \`print(1)\`-sized code, p50 ± half the IQR, ms${r.mode === "quick" ? " (a quick run: 2 or 3 calls per cell, a few runtimes for the microVM and the peers)" : ""}:`,
    "",
    ...glance(r, "print"),
  ];
  const s = sentences(r);
  if (s.length) L.push("", ...s);
  if (r.tti) L.push("", "Time to interactive (the peers' method), ms:", "", ...ttiTable(r));
  if (r.sessions)
    L.push(
      "",
      `Sessions: a ${(r.sessions.csvBytes / 1e6).toFixed(1)} MB CSV, then ${r.sessions.steps} steps each returning a PNG (python3.11):`,
      "",
      ...sessionsTable(r),
    );
  return L.join("\n");
}

/** SPEED_DOC's text with its speed section rendered from r; throws when it has none. */
export function renderReadme(readme: string, r: BenchResults, file: string): string {
  if (!BLOCK.test(readme)) throw new Error(`${SPEED_DOC} has no <!-- bench:speed --> section`);
  return readme.replace(BLOCK, (_all, open: string, _body: string, close: string) => {
    return `${open}${renderSpeedBlock(r, file)}${close}`;
  });
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const arg = process.argv[2];
  const { file, results } = arg
    ? { file: arg, results: JSON.parse(readFileSync(arg, "utf8")) as BenchResults }
    : latestResultsFile();
  const path = join(REPO_ROOT, SPEED_DOC);
  const before = readFileSync(path, "utf8");
  const after = renderReadme(before, results, file);
  if (after !== before) writeFileSync(path, after);
  process.stdout.write(`${SPEED_DOC} speed section from ${basename(file)}\n`);
}
