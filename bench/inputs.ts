/**
 * One call over many inputs against as many calls (issue 53): on each backend, one stdio server
 * (the benchmark's, default pools, microVM templates kept as after setup) runs the same python3.11
 * code over n inputs, once as one scratchrun_exec call with `inputs` (the inputs at once, as many
 * as the engine runs) and once as n calls one after another, each input's env in its own call.
 * Rounds alternate which goes first; each side starts with the pools full. Reported per side: the
 * wall time of the n inputs (from the first call's send to the last answer) and the host's busy
 * CPU over that time per input (/proc/stat: every process, so the server, the sandboxes and the
 * client; the host's other work counts too, so the run's load average is in the report). Every
 * answer is checked: each input's printed sum must be its own.
 */
import { performance } from "node:perf_hooks";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { summarize, type Summary } from "./stats.js";
import { BENCH_SERVER, mcpSystem, type McpSystem } from "./systems/scratchrun.js";
import { hostBusyMs } from "./tti.js";

/** One backend's two sides: n inputs in one call, and the same n as n calls in a row. */
export interface InputsBackend {
  backend: "namespace" | "microvm";
  /** Inputs the call ran at once (its summary's `concurrency`). */
  concurrency: number;
  /** Wall time of the n inputs (ms), and the host's busy CPU per input (ms), over the rounds. */
  batch: { wallMs: Summary | null; cpuMsPerInput: Summary | null };
  sequential: { wallMs: Summary | null; cpuMsPerInput: Summary | null };
  /** Sequential p50 wall over the call's. */
  speedup: number | null;
  error?: string;
}

export interface InputsResults {
  n: number;
  rounds: number;
  backends: InputsBackend[];
}

export interface InputsPlan {
  /** Inputs per call (and calls per sequential side). */
  n: number;
  /** Rounds of both sides. */
  rounds: number;
}

/** Each input's own work: a sum whose value says which input's env it ran with. */
const CODE = ["import os", 'n = int(os.environ["N"])', "print(sum(i * i for i in range(n)))"].join(
  "\n",
);

const nOf = (i: number) => 20_000 + 1000 * i;
const expected = (i: number) => {
  const n = BigInt(nOf(i));
  return `${((n - 1n) * n * (2n * n - 1n)) / 6n}\n`;
};

type Structured = { stdout?: string; exit_code?: number | null };

function check(r: CallToolResult, i: number, s: Structured | undefined): void {
  if (r.isError || s?.exit_code !== 0 || s.stdout !== expected(i))
    throw new Error(`input ${i}: ${JSON.stringify(r).slice(0, 400)}`);
}

async function side(
  system: McpSystem,
  run: () => Promise<void>,
): Promise<{ wallMs: number; cpuMs: number }> {
  if (!(await system.waitWarm(300_000))) throw new Error("the pools did not fill in 300 s");
  const busy0 = hostBusyMs();
  const t0 = performance.now();
  await run();
  return { wallMs: performance.now() - t0, cpuMs: hostBusyMs() - busy0 };
}

async function oneBackend(
  backend: "namespace" | "microvm",
  plan: InputsPlan,
  env: Record<string, string>,
  log: (line: string) => void,
): Promise<InputsBackend> {
  const system = mcpSystem({
    id: backend,
    label: `ScratchRun ${backend}`,
    script: BENCH_SERVER,
    env: {
      ...env,
      SCRATCHRUN_ISOLATION: backend,
      SCRATCHRUN_NETWORK: "none",
      SCRATCHRUN_LOCAL: "1",
      // Kept templates, as after setup: the phase measures calls, not a template's build.
      SCRATCHRUN_TEMPLATE_CACHE: "on",
    },
  });
  const inputs = Array.from({ length: plan.n }, (_, i) => ({ env: { N: String(nOf(i)) } }));
  const exec = (args: Record<string, unknown>) =>
    system.tool("scratchrun_exec", {
      runtime: "python3.11",
      code: CODE,
      timeout_ms: 30_000,
      ...args,
    });
  const one = async () => {
    const r = await exec({ inputs });
    const s = r.structuredContent as
      { results?: Structured[]; summary?: { concurrency: number } } | undefined;
    inputs.forEach((_, i) => check(r, i, s?.results?.[i]));
    concurrency = s?.summary?.concurrency ?? 0;
  };
  const each = async () => {
    for (const [i, input] of inputs.entries()) {
      const r = await exec({ env: input.env });
      check(r, i, r.structuredContent as Structured | undefined);
    }
  };
  let concurrency = 0;
  const batch: { wallMs: number[]; cpuMs: number[] } = { wallMs: [], cpuMs: [] };
  const sequential: { wallMs: number[]; cpuMs: number[] } = { wallMs: [], cpuMs: [] };
  await system.start();
  try {
    // Untimed: each side once, so neither pays a first import or a template's load.
    await one();
    await each();
    for (let round = 0; round < plan.rounds; round++) {
      const order: ["batch" | "sequential", () => Promise<void>][] = [
        ["batch", one],
        ["sequential", each],
      ];
      if (round % 2 === 1) order.reverse();
      for (const [name, run] of order) {
        const m = await side(system, run);
        const into = name === "batch" ? batch : sequential;
        into.wallMs.push(m.wallMs);
        into.cpuMs.push(m.cpuMs / plan.n);
      }
    }
  } finally {
    await system.close();
  }
  const b = summarize(batch.wallMs);
  const s = summarize(sequential.wallMs);
  const result: InputsBackend = {
    backend,
    concurrency,
    batch: { wallMs: b, cpuMsPerInput: summarize(batch.cpuMs) },
    sequential: { wallMs: s, cpuMsPerInput: summarize(sequential.cpuMs) },
    speedup: b && s ? Math.round((s.p50 / b.p50) * 100) / 100 : null,
  };
  log(
    `inputs ${backend}: ${plan.n} inputs in one call p50 ${Math.round(b?.p50 ?? 0)} ms, as ${plan.n} calls p50 ${Math.round(s?.p50 ?? 0)} ms (${result.speedup}x)`,
  );
  return result;
}

export async function benchInputs(
  backends: readonly ("namespace" | "microvm")[],
  plan: InputsPlan,
  env: Record<string, string>,
  log: (line: string) => void,
): Promise<InputsResults> {
  const results: InputsResults = { n: plan.n, rounds: plan.rounds, backends: [] };
  for (const backend of backends) {
    try {
      results.backends.push(await oneBackend(backend, plan, env, log));
    } catch (e) {
      results.backends.push({
        backend,
        concurrency: 0,
        batch: { wallMs: null, cpuMsPerInput: null },
        sequential: { wallMs: null, cpuMsPerInput: null },
        speedup: null,
        error: String(e).slice(0, 300),
      });
    }
  }
  return results;
}

/** The phase's report (bench/results/issue53/). */
export function renderInputsMarkdown(r: InputsResults, how: string): string {
  const ms = (x: number | undefined) => (x === undefined ? "–" : String(Math.round(x)));
  const lines = [
    `# ${r.n} inputs in one call against ${r.n} calls in a row (issue 53)`,
    ``,
    how,
    ``,
    `| backend | at once | one call: wall p50 (min–max) | ${r.n} calls: wall p50 (min–max) | speed-up | host CPU per input: one call | ${r.n} calls |`,
    `|---|---|---|---|---|---|---|`,
  ];
  for (const b of r.backends) {
    if (b.error) {
      lines.push(`| ${b.backend} | failed: ${b.error.replace(/\|/g, "\\|")} | | | | | |`);
      continue;
    }
    const w = (s: Summary | null) => (s ? `${ms(s.p50)} ms (${ms(s.min)}–${ms(s.max)})` : "–");
    lines.push(
      `| ${b.backend} | ${b.concurrency} | ${w(b.batch.wallMs)} | ${w(b.sequential.wallMs)} | ${b.speedup ?? "–"}× | ${ms(b.batch.cpuMsPerInput?.p50)} ms | ${ms(b.sequential.cpuMsPerInput?.p50)} ms |`,
    );
  }
  lines.push(``);
  return lines.join("\n");
}
