import { summarize, type Summary } from "./stats.js";
import type { BenchSystem } from "./systems/types.js";
import type { Workload } from "./workloads.js";

export interface LatencyResult {
  samples: number[];
  summary: Summary | null;
  /** The server's own duration_ms, when the system reports it (the rest is MCP + client). */
  server: Summary | null;
  errors: number;
  firstError?: string;
}

/**
 * n sequential timed calls (after `warmup` untimed ones). `before` runs untimed ahead of each
 * call: the pooled microVM uses it to wait until its pool is full again, so every sample is warm.
 */
export async function measureLatency(
  system: BenchSystem,
  workload: Workload,
  n: number,
  options: { warmup?: number; before?: () => Promise<void> } = {},
): Promise<LatencyResult> {
  const samples: number[] = [];
  const server: number[] = [];
  let errors = 0;
  let firstError: string | undefined;
  for (let i = 0; i < (options.warmup ?? 1); i++) {
    await options.before?.();
    await system.call(workload);
  }
  for (let i = 0; i < n; i++) {
    await options.before?.();
    const t0 = performance.now();
    const r = await system.call(workload);
    const ms = performance.now() - t0;
    if (r.ok) {
      samples.push(ms);
      if (r.serverMs !== undefined) server.push(r.serverMs);
    } else {
      errors++;
      firstError ??= r.error;
    }
  }
  return {
    samples,
    summary: summarize(samples),
    server: summarize(server),
    errors,
    ...(firstError ? { firstError } : {}),
  };
}

export interface ThroughputResult {
  concurrency: number;
  durationMs: number;
  ok: number;
  errors: number;
  busy: number;
  callsPerSec: number;
  latency: Summary | null;
  firstError?: string;
}

/** `concurrency` callers in a closed loop for durationMs; calls started in time all finish. */
export async function measureThroughput(
  system: BenchSystem,
  workload: Workload,
  concurrency: number,
  durationMs: number,
): Promise<ThroughputResult> {
  const lat: number[] = [];
  let errors = 0;
  let busy = 0;
  let firstError: string | undefined;
  const t0 = performance.now();
  const end = t0 + durationMs;
  const worker = async () => {
    while (performance.now() < end) {
      const s = performance.now();
      const r = await system.call(workload);
      if (r.ok) lat.push(performance.now() - s);
      else if (r.busy) busy++;
      else {
        errors++;
        firstError ??= r.error;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const elapsed = performance.now() - t0;
  return {
    concurrency,
    durationMs: Math.round(elapsed),
    ok: lat.length,
    errors,
    busy,
    callsPerSec: Math.round((lat.length / (elapsed / 1000)) * 100) / 100,
    latency: summarize(lat),
    ...(firstError ? { firstError } : {}),
  };
}
