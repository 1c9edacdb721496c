// Measured figures quoted inside the docs' prose, each rendered from the latest benchmark results
// file (issue 25: a number in a doc comes from a named run, not typed in). In a doc a figure is
// written `<!-- bench:NAME -->…<!-- /bench:NAME -->` on one line; `node scripts/gen-docs.mjs`
// rewrites what stands between the markers, and test/bench/readme.unit.test.ts fails while a doc
// differs from that rendering.
import { basename } from "node:path";
import type { BenchResults } from "./results.js";

type Figure = (r: BenchResults) => string | null;

const kind = (r: BenchResults, system: string, key: string) => r.cost.poolKinds[system]?.[key];

/** Every figure a doc may quote: its name, and how the results render it (null: not measured). */
export const FIGURES: Record<string, Figure> = {
  /** Which run the figures come from. */
  source: (_r) => null,
  /** One idle pooled microVM clone (every flavour), its memory. */
  "idle-vm": (r) =>
    r.cost.idleVms
      ? `${r.cost.idleVms.rssMbEach} MB RSS / ${r.cost.idleVms.pssMbEach} MB PSS`
      : null,
  /** One idle pooled bash jail (the smallest jail), its RSS. */
  "idle-jail": (r) => {
    const k = kind(r, "namespace", "none/bash/plain");
    return k ? `${k.rssMbEach} MB` : null;
  },
  /** What a pre-imported python3.11 jail's cgroup is charged before the code runs. */
  "preimport-charge": (r) => {
    const k = kind(r, "namespace", "none/python3.11/preimport");
    return k ? `${Math.round(k.chargeMbEach)} MB` : null;
  },
};

const FIGURE = /<!-- bench:([a-z0-9-]+) -->([^\n]*?)<!-- \/bench:\1 -->/g;

/**
 * The doc with every figure rendered from r, read from `file`. Throws on a figure name this file
 * does not know, or one the run did not measure: a doc never keeps a stale number silently.
 */
export function renderFigures(doc: string, r: BenchResults, file: string): string {
  return doc.replace(FIGURE, (_all, name: string) => {
    const figure = FIGURES[name];
    if (!figure)
      throw new Error(`unknown benchmark figure <!-- bench:${name} --> (bench/doc-figures.ts)`);
    const value = name === "source" ? `bench/results/${basename(file)}` : figure(r);
    if (value === null) throw new Error(`${basename(file)} did not measure the figure ${name}`);
    return `<!-- bench:${name} -->${value}<!-- /bench:${name} -->`;
  });
}

/** The docs whose prose quotes figures. */
export const FIGURE_DOCS = ["docs/ARCHITECTURE.md", "docs/DEPLOYMENT.md", "docs/SECURITY.md"];
