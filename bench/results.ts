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
  mode: "full" | "quick";
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
