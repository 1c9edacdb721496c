#!/usr/bin/env node
// `node dist/bench/inputs-run.js [N] [ROUNDS]` (issue 53): the inputs phase of `npm run bench`
// alone, N inputs (default 16) in one call against N calls in a row, ROUNDS rounds (default 3), on
// the namespace backend then the microVM one, into bench/results/issue53/ (JSON and Markdown).
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { benchInputs, renderInputsMarkdown } from "./inputs.js";
import { REPO_ROOT } from "./peers.js";

const n = Number(process.argv[2] ?? 16);
const rounds = Number(process.argv[3] ?? 3);
if (!Number.isInteger(n) || n < 1 || n > 16 || !Number.isInteger(rounds) || rounds < 1)
  throw new Error("usage: inputs-run.js [N 1-16] [ROUNDS ≥ 1]");
const started = new Date();
const load0 = loadavg()[0] ?? 0;
const env = Object.fromEntries(
  Object.entries(process.env).filter(
    (e): e is [string, string] => e[0].startsWith("SCRATCHRUN_") && e[1] !== undefined,
  ),
);
const results = await benchInputs(["namespace", "microvm"], { n, rounds }, env, (line) =>
  process.stderr.write(`${line}\n`),
);
const how = `Run ${started.toISOString()} by \`node dist/bench/inputs-run.js ${n} ${rounds}\` on ${cpus().length} CPUs (load average ${load0.toFixed(2)} at the start, ${(loadavg()[0] ?? 0).toFixed(2)} at the end): python3.11, each input a sum over its own \`N\`, ${rounds} rounds per backend alternating which side goes first, each side starting with the pools full; wall time from the first send to the last answer, host CPU from /proc/stat (every process on the host) over that time divided by ${n}.`;
const md = renderInputsMarkdown(results, how);
const out = join(REPO_ROOT, "bench/results/issue53");
mkdirSync(out, { recursive: true });
const stem = join(out, `${started.toISOString().slice(0, 10)}-inputs`);
writeFileSync(`${stem}.json`, `${JSON.stringify({ started, ...results }, null, 1)}\n`);
writeFileSync(`${stem}.md`, md);
process.stdout.write(`${md}\nwritten: ${stem}.md\n`);
