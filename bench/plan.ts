import type { RuntimeName } from "../src/schema/exec.js";
import { SESSIONS_ROWS, STEPS, type SessionsPlan } from "./sessions.js";
import type { SecretsPlan } from "./secrets.js";
import type { TtiPlan } from "./tti.js";
import type { BurstPlan } from "./burst.js";
import type { FirstMinutesPlan } from "./first-minutes.js";
import type { FirstCallsPlan } from "./first-calls.js";
import type { PlotPlan } from "./plot-steps.js";
import type { WorkloadId } from "./workloads.js";

/**
 * How much of what to measure: the full run (~15 min on 2 cores), a quick one (a few calls per
 * cell), or the smoke `npm test` runs (one call per cell: every system and phase works, no number
 * means anything).
 */
export interface Plan {
  mode: "full" | "quick" | "smoke";
  /** Timed samples per (system, runtime, workload); a system missing here uses `default`. */
  samples: Record<WorkloadId, { default: number } & Record<string, number>>;
  /** Untimed calls before the timed ones (default 1); 0 where every call is a fresh process. */
  warmup: { default: number } & Record<string, number>;
  /** Runtimes measured per system (default: the product page's four). */
  runtimes: Record<string, readonly RuntimeName[]>;
  /** Workloads measured per system (default: all four where they apply). */
  workloads: Record<string, readonly WorkloadId[]>;
  /** Fresh-server first calls per runtime (the namespace backend's cold start). */
  coldSamples: number;
  throughput: { systems: readonly string[]; concurrency: readonly number[]; durationMs: number };
  /** Warm pool of the pooled microVM system. */
  microvmPool: Partial<Record<RuntimeName, number>>;
  idleWindowMs: number;
  /** Backends whose idle server is measured with the default pooling and with every runtime. */
  idleServers: readonly ("namespace" | "microvm")[];
  /** Time to interactive: calls in sequence and at once per command and system (issue 30). */
  tti: TtiPlan;
  /** n sandboxes at once, network none and public, both backends (issue 57). */
  burst: BurstPlan;
  /** The sessions workload: the CSV's rows and the print(1) calls per side (issue 27). */
  sessions: SessionsPlan;
  /** The first two minutes after a server starts, calls 2 s apart per runtime (issue 30). */
  firstMinutes: FirstMinutesPlan;
  /** A runtime's first calls back to back on a fresh microVM server (issue 30). */
  firstCalls: FirstCallsPlan;
  /** The product page's plot, step by step, microVM beside the host (issue 30: n ≥ 10, 3 s apart). */
  plot: PlotPlan;
  /** Brokered against direct HTTPS requests, per side (issue 28). */
  secrets: SecretsPlan;
  /**
   * Systems measured at once: 1 (one at a time, so no number carries another system's load), or
   * 2 in the smoke, whose numbers mean nothing: the microVM systems in one lane, the others in
   * the second, on a 2-core host's two cores.
   */
  lanes: 1 | 2;
}

const ALL: readonly RuntimeName[] = ["python3.12", "python3.11", "node20", "bash"];
/** The product page's four and the two beside them, where a runtime costs seconds, not minutes. */
const WITH_NEW: readonly RuntimeName[] = [...ALL, "python3.13", "node24"];

export const FULL: Plan = {
  mode: "full",
  lanes: 1,
  samples: {
    print: {
      default: 20,
      "srt-cli": 10,
      "srt-lib": 10,
      "pyodide-node": 5,
      "pyodide-deno": 5,
      microvm: 10,
      "microvm-empty": 7,
      "microvm-nopool": 5,
    },
    realistic: { default: 10, microvm: 5, "microvm-nopool": 2 },
    product: { default: 10, microvm: 5 },
    pandas: { default: 10, microvm: 5 },
  },
  warmup: { default: 1, "pyodide-node": 0, "pyodide-deno": 0, "microvm-nopool": 0 },
  runtimes: { host: WITH_NEW, bwrap: WITH_NEW, namespace: WITH_NEW, engine: WITH_NEW },
  workloads: { "microvm-empty": ["print"], "microvm-nopool": ["print", "realistic"] },
  coldSamples: 5,
  throughput: {
    systems: ["namespace", "microvm", "bwrap", "host"],
    concurrency: [1, 2, 8],
    durationMs: 10_000,
  },
  // Python runtimes with a pre-import pool as many pre-imported clones besides (decision 0011).
  microvmPool: { "python3.11": 2, "python3.12": 1, node20: 1, bash: 2 },
  idleWindowMs: 5_000,
  idleServers: ["namespace", "microvm"],
  tti: { sequentialN: 100, burstN: 100 },
  // The issue's operator probe: serve --max-concurrent 16 --max-queued 200.
  burst: { n: 100, maxConcurrent: 16, maxQueued: 200 },
  sessions: { rows: SESSIONS_ROWS, printN: 20, steps: STEPS.length },
  firstMinutes: { runtimes: ALL, everyMs: 2000, windowMs: 120_000, settledMs: 40_000 },
  firstCalls: { runtimes: ALL, calls: 3, rounds: 3 },
  plot: { n: 10, gapMs: 3000 },
  secrets: { requests: 100 },
};

export const QUICK: Plan = {
  mode: "quick",
  lanes: 1,
  samples: {
    print: {
      default: 3,
      microvm: 2,
      "microvm-empty": 2,
      "microvm-nopool": 2,
      "pyodide-node": 2,
      "pyodide-deno": 2,
    },
    realistic: { default: 3 },
    product: { default: 2 },
    pandas: { default: 2 },
  },
  warmup: { default: 1, "pyodide-node": 0, "pyodide-deno": 0, "microvm-nopool": 0, microvm: 0 },
  runtimes: {
    // The product page's example on its own python3.12 beside python3.11 (issue 24).
    microvm: ["python3.11", "python3.12"],
    "microvm-empty": ["python3.11"],
    "microvm-nopool": ["python3.11"],
    "srt-cli": ["python3.11"],
    "srt-lib": ["python3.11"],
  },
  workloads: {
    microvm: ["print", "product"],
    "microvm-empty": ["print"],
    "microvm-nopool": ["print"],
    "srt-cli": ["print"],
    "srt-lib": ["print"],
    "pyodide-node": ["print"],
    "pyodide-deno": ["print"],
  },
  coldSamples: 2,
  // Concurrency 1: the back-to-back row (bursts), for the namespace and the microVM.
  throughput: { systems: ["namespace", "microvm"], concurrency: [1], durationMs: 4_000 },
  microvmPool: { "python3.11": 1, "python3.12": 1 },
  idleWindowMs: 2_000,
  idleServers: ["namespace"],
  // Quick: the phases run only when named (--with or --only), smaller.
  tti: { sequentialN: 10, burstN: 20 },
  burst: { n: 20, maxConcurrent: 16, maxQueued: 200 },
  sessions: { rows: SESSIONS_ROWS / 10, printN: 5, steps: STEPS.length },
  firstMinutes: { runtimes: ALL, everyMs: 2000, windowMs: 120_000, settledMs: 20_000 },
  firstCalls: { runtimes: ALL, calls: 3, rounds: 2 },
  plot: { n: 10, gapMs: 3000 },
  secrets: { requests: 30 },
};

/**
 * The test suite's run (test/bench/*.test.ts): the quick run's systems, runtimes and workloads,
 * each measured by one call, no warm-up, the timed windows cut to a second.
 */
export const SMOKE: Plan = {
  ...QUICK,
  mode: "smoke",
  lanes: 2,
  samples: {
    print: { default: 1 },
    realistic: { default: 1 },
    product: { default: 1 },
    pandas: { default: 1 },
  },
  warmup: { default: 0 },
  coldSamples: 1,
  throughput: { ...QUICK.throughput, durationMs: 1_000 },
  idleWindowMs: 1_000,
  tti: { sequentialN: 1, burstN: 2 },
  burst: { n: 2, maxConcurrent: 16, maxQueued: 200 },
  sessions: { rows: SESSIONS_ROWS / 20, printN: 1, steps: 1 },
  firstMinutes: { ...QUICK.firstMinutes, windowMs: 10_000, settledMs: 5_000 },
  firstCalls: { ...QUICK.firstCalls, calls: 1, rounds: 1 },
  plot: { n: 1, gapMs: 0 },
  secrets: { requests: 1 },
};

/** Samples of a workload of the latency rows (the phases, tti and sessions, have their own). */
export function samplesFor(plan: Plan, system: string, workload: WorkloadId | "tti"): number {
  if (workload === "tti") return plan.tti.sequentialN;
  const s = plan.samples[workload];
  return s[system] ?? s.default;
}

export const runtimesFor = (plan: Plan, system: string): readonly RuntimeName[] =>
  plan.runtimes[system] ?? ALL;

export const workloadsFor = (plan: Plan, system: string): readonly WorkloadId[] =>
  plan.workloads[system] ?? ["print", "realistic", "product", "pandas"];
