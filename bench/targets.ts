import type { BenchResults, LatencyRow } from "./results.js";

export interface TargetCheck {
  target: string;
  measured: string;
  met: boolean | null;
}

export function warmP50(
  r: BenchResults,
  system: string,
  runtime: string,
  workload = "print",
): number | undefined {
  return find(r.latency, system, runtime, workload)?.result?.summary?.p50;
}

export function find(
  rows: readonly LatencyRow[],
  system: string,
  runtime: string,
  workload: string,
): LatencyRow | undefined {
  return rows.find((x) => x.system === system && x.runtime === runtime && x.workload === workload);
}

const LIMITS: [string, number][] = [
  ["bash", 150],
  ["python3.11", 250],
  ["python3.12", 250],
  ["node20", 400],
];

/** The targets for this machine, each with what was measured and whether it is met. */
export function checkTargets(r: BenchResults): TargetCheck[] {
  const out: TargetCheck[] = [];
  const check = (
    target: string,
    value: number | undefined,
    limit: number,
    unit: string,
    le = true,
  ) =>
    out.push({
      target,
      measured: value === undefined ? "not measured" : `${value} ${unit}`,
      met: value === undefined ? null : le ? value <= limit : value >= limit,
    });
  for (const sys of ["namespace", "microvm"])
    for (const [rt, ms] of LIMITS)
      check(`${sys} warm p50 ${rt} print ≤ ${ms} ms`, warmP50(r, sys, rt), ms, "ms");
  // The cold path of a running server: the pool is empty, a clone is restored for the call.
  const cold = r.latency
    .filter((x) => x.system === "microvm-empty" && x.workload === "print")
    .map((x) => x.result?.summary?.p50)
    .filter((x): x is number => x !== undefined);
  check(
    "microvm cold p50 (empty pool) ≤ 2500 ms, worst runtime",
    cold.length ? Math.max(...cold) : undefined,
    2500,
    "ms",
  );
  for (const sys of ["namespace", "microvm"]) {
    const t = r.throughput.find((x) => x.system === sys)?.runs.find((x) => x.concurrency === 2);
    check(`${sys} ≥ 3 calls/s python print at concurrency 2`, t?.callsPerSec, 3, "calls/s", false);
  }
  const ns = warmP50(r, "namespace", "python3.11");
  const bw = warmP50(r, "bwrap", "python3.11");
  const ratio =
    ns !== undefined && bw !== undefined ? Math.round((ns / bw) * 100) / 100 : undefined;
  check("namespace within 1.3× raw bubblewrap (python3.11 print)", ratio, 1.3, "×");
  const idle = r.cost.idleVms;
  if (idle) {
    check(
      `idle warm VMs: ≤ 10% of a core for 8 (measured ${idle.processes}, scaled to 8)`,
      Math.round(idle.cpuPercentEach * 8 * 10) / 10,
      10,
      "% of a core",
    );
    check("idle warm VM host RSS ≤ 150 MB each", idle.rssMbEach, 150, "MB");
  } else out.push({ target: "idle warm VM cost", measured: "not measured", met: null });
  return out;
}
