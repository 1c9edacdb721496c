import type { BurstPhaseResults } from "./burst.js";
import type { PlotResults } from "./plot-steps.js";
import type { FirstMinutesResults } from "./first-minutes.js";
import type { FirstCallsResults } from "./first-calls.js";
import type { LatencyResult, ThroughputResult } from "./measure.js";
import type { IdleCost, PoolKindCost } from "./proc.js";
import type { Summary } from "./stats.js";
import type { SystemKind } from "./systems/types.js";

export interface HostInfo {
  hostname: string;
  cpus: number;
  cpuModel: string;
  memMb: number;
  kernel: string;
  /** /dev/kvm exists (it may still be unusable: see microvmIsolation). */
  kvm: boolean;
  /** What the microVM server reported it runs under (microvm-kvm or microvm-tcg). */
  microvmIsolation?: string;
  node: string;
  /** 1-minute load average when the run started and ended: other work on the host skews numbers. */
  loadAvg?: { start: number; end: number };
}

export interface LatencyRow {
  system: string;
  runtime: string;
  workload: string;
  /** Exact reason when the system cannot run this here. */
  unsupported?: string;
  result?: Omit<LatencyResult, "samples"> & { samples: number[] };
}

export interface BenchResults {
  format: 1;
  date: string;
  mode: "full" | "quick" | "smoke";
  /** The benchmark's command-line arguments (absent in runs before they were kept). */
  args?: string[];
  host: HostInfo;
  systems: { id: string; label: string; kind: SystemKind; notes?: string }[];
  latency: LatencyRow[];
  cold: { system: string; runtime: string; result: LatencyResult }[];
  throughput: { system: string; runtime: string; workload: string; runs: ThroughputResult[] }[];
  cost: {
    /** Every pooled microVM (both flavours) while idle. */
    idleVms?: IdleCost;
    /** Per system, per kind of pooled sandbox (runtime and flavour; network mode for jails). */
    poolKinds: Record<string, Record<string, PoolKindCost>>;
    /**
     * A server left idle once its pools are full (its whole process tree): with the default
     * pooling (python3.13 and node24 once called) and with every runtime pooled from the start.
     */
    idleServers?: IdleServer[];
    /** Initial fill of the pool from empty: VMs that became ready per second. */
    poolFill?: { vms: number; seconds: number; vmsPerSec: number };
    /** Peak RSS of the whole server process tree (server + sandboxes) under load, MB. */
    peakTreeRssMb: Record<string, number>;
    /** VmHWM of the server's own node process, MB. */
    serverHwmMb: Record<string, number>;
  };
  /** Time to interactive, the peers' method (issue 30): absent when the phase did not run. */
  tti?: TtiResults;
  /** The agent-shaped sessions workload (issue 27): absent when the phase did not run. */
  sessions?: SessionsResults;
  /** The first two minutes after start against settled (issue 30): absent when not run. */
  firstMinutes?: FirstMinutesResults;
  /** A runtime's first calls back to back on a fresh server (issue 30): absent when not run. */
  firstCalls?: FirstCallsResults;
  /** The product page's plot step by step on the microVM beside the host (issue 30). */
  plot?: PlotResults;
  /** A brokered HTTPS request against a direct one (issue 28): absent when the phase did not run. */
  secrets?: SecretsResults;
  /** n sandboxes at once, network none and public, both backends (issue 57, bench/burst.ts). */
  burst?: BurstPhaseResults;
  notes: string[];
  durationSec: number;
  /** The previous full run on this host: its print p50s, for "nothing got slower". */
  baseline?: { file: string; date: string; print: Record<string, number> };
}

export interface IdleServer {
  backend: "namespace" | "microvm";
  pooling: "default" | "every runtime";
  /** Runtimes with a pool target above 0, and the pooled sandboxes ready. */
  pooledRuntimes: string[];
  sandboxes: number;
  /** Seconds from start until the pools were full. */
  fillSeconds: number;
  processes: number;
  pssMb: number;
  rssMb: number;
  cpuPercent: number;
}

export const p50 = (s: Summary | null | undefined): number | undefined => s?.p50;

/** A fresh sandbox per call running one shell command: n in sequence, then n at once. */
export interface TtiResults {
  sequentialN: number;
  burstN: number;
  rows: TtiRow[];
}

export interface TtiRow {
  system: string;
  command: string;
  /** Exact reason when the system cannot run this here. */
  unsupported?: string;
  /** Back to back: each call starts when the last returned. */
  sequential?: LatencyResult;
  /**
   * The whole host's CPU time (every core, every process: the system's and the benchmark's own)
   * while this system's sequential calls ran, per call, ms. Divided by the host's cores it is the
   * shortest a back-to-back call could take with that work per call, however it was scheduled.
   */
  hostCpuMsPerCall?: number;
  burst?: BurstResult;
}

/**
 * n calls sent at once. Every call ends one way: answered (and its output right), answered
 * wrong, refused with 429 (with or without Retry-After), another HTTP status, or lost (no answer
 * at all before the client gave up).
 */
export interface BurstResult {
  n: number;
  /** "rest": HTTP to the server's REST API; "process": n processes started at once. */
  via: "rest" | "process";
  answered: number;
  wrong: number;
  refused: number;
  refusedWithRetryAfter: number;
  otherStatus: Record<string, number>;
  lost: number;
  /** From the first call sent to the last answer. */
  wallMs: number;
  /** Answered calls, each from the burst's start to its answer. */
  latency: Summary | null;
  /** Refusals, each from the burst's start to the 429. */
  refusedLatency: Summary | null;
  /** The answered calls' 95th percentile, ms (the burst phase's, issue 57). */
  p95?: number;
  firstError?: string;
}

/** One backend's brokered and direct HTTPS requests, timed in the sandbox (bench/secrets.ts). */
export interface SecretsBackend {
  backend: "namespace" | "microvm";
  direct: Summary | null;
  brokered: Summary | null;
  /** brokered p50 - direct p50, ms. */
  addedP50Ms: number | null;
  /** The whole call, ms. */
  callMs: number;
  error?: string;
}

export interface SecretsResults {
  /** New HTTPS connections per side, alternating, in one call. */
  requests: number;
  backends: SecretsBackend[];
}

/** One arm of the sessions workload: what its calls cost in all. */
export interface SessionArm {
  calls: number;
  totalMs: number;
  /** Bytes of the tools/call arguments sent (JSON), and of the results received. */
  bytesSent: number;
  bytesReceived: number;
  /** Each call's time, in order (the session arm: start, the cells, end). */
  callMs: number[];
  /**
   * Each call's code time as the sandbox measured it (the result's duration_ms; null for a call
   * that runs no code: a session's start and end): what callMs spends past it is the server's,
   * the transfer's and the sandbox's own start.
   */
  codeMs?: (number | null)[];
  errors: number;
  firstError?: string;
}

export interface SessionsBackend {
  backend: "namespace" | "microvm";
  /** 11 fresh calls, each re-sending the data and re-reading it. */
  fresh?: SessionArm;
  /** One session: start, the load, 10 steps, end. */
  session?: SessionArm;
  /** `print(1)` as a fresh call, and as a cell of one session, python3.11. */
  freshPrint?: Summary | null;
  sessionPrint?: Summary | null;
  unsupported?: string;
}

export interface SessionsResults {
  /** The CSV: its size, and the gzip sent in `files` (a call's files are capped below it). */
  csvBytes: number;
  gzipBytes: number;
  rows: number;
  steps: number;
  printN: number;
  backends: SessionsBackend[];
}
