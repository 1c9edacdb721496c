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

/** A system's closed-loop concurrency-1 python3.11 print p50 against its idle-pool p50. */
export function burst(
  r: BenchResults,
  system: string,
): { idle: number; loop: number; ratio: number; callsPerSec: number } | undefined {
  const idle = warmP50(r, system, "python3.11");
  const run = r.throughput.find((t) => t.system === system)?.runs.find((x) => x.concurrency === 1);
  const loop = run?.latency?.p50;
  if (idle === undefined || loop === undefined || !run) return undefined;
  return { idle, loop, ratio: Math.round((loop / idle) * 100) / 100, callsPerSec: run.callsPerSec };
}

/** Every namespace and microvm print row against the previous full run: the slowest ratio. */
export function baselineRatios(
  r: BenchResults,
): { row: string; then: number; now: number; ratio: number }[] {
  if (!r.baseline) return [];
  const out = [];
  for (const row of r.latency) {
    if (row.workload !== "print" || !["namespace", "microvm"].includes(row.system)) continue;
    const now = row.result?.summary?.p50;
    const then = r.baseline.print[`${row.system}/${row.runtime}`];
    if (now === undefined || then === undefined) continue;
    out.push({
      row: `${row.system} ${row.runtime}`,
      then,
      now,
      ratio: Math.round((now / then) * 100) / 100,
    });
  }
  return out;
}

function slowerThanBaseline(r: BenchResults): { file: string; row: string; ratio: number } | null {
  const rows = baselineRatios(r);
  if (!r.baseline || rows.length === 0) return null;
  const worst = rows.reduce((a, b) => (b.ratio > a.ratio ? b : a));
  return { file: r.baseline.file, row: worst.row, ratio: worst.ratio };
}

/** The issue's targets for this machine, each with what was measured and whether it is met. */
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
  // The call the product exists for (issue 14): numpy + matplotlib PNG, on python3.11 and on the
  // product page's python3.12 (issue 24), each against the bare host interpreter of its version
  // (the host's python3.11 where the host's 3.12 has no numpy).
  for (const py of ["python3.11", "python3.12"] as const)
    for (const w of ["realistic", "product", "pandas"]) {
      const host = warmP50(r, "host", py, w) ?? warmP50(r, "host", "python3.11", w);
      const ns = warmP50(r, "namespace", py, w);
      const q =
        ns !== undefined && host !== undefined ? Math.round((ns / host) * 100) / 100 : undefined;
      check(`namespace ${py} ${w} ≤ 0.3× the bare host interpreter`, q, 0.3, "×");
      check(`microvm ${py} ${w} ≤ 1500 ms`, warmP50(r, "microvm", py, w), 1500, "ms");
    }
  // Bursts: back-to-back calls (closed loop, concurrency 1) against calls into an idle pool.
  check(
    "microvm closed-loop c=1 python3.11 print p50 ≤ 1.5× its idle-pool p50",
    burst(r, "microvm")?.ratio,
    1.5,
    "×",
  );
  // Nothing got slower: print p50 against the previous full run on this host.
  const worst = slowerThanBaseline(r);
  if (worst)
    check(
      `print p50 of namespace and microvm ≤ 1.1× the previous full run (${worst.file}), worst row`,
      worst.ratio,
      1.1,
      `× (${worst.row})`,
    );
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

const TTI_NODE = "node -v";

/** A time-to-interactive row's sequential p50. */
export function ttiP50(r: BenchResults, system: string, command: string): number | undefined {
  return r.tti?.rows.find((x) => x.system === system && x.command === command)?.sequential?.summary
    ?.p50;
}

/** A backend's sessions arms: fresh total / session total (how many times faster the session is). */
export function sessionsSpeedup(r: BenchResults, backend: string): number | undefined {
  const b = r.sessions?.backends.find((x) => x.backend === backend);
  if (!b?.fresh || !b.session || b.fresh.errors || b.session.errors) return undefined;
  return Math.round((b.fresh.totalMs / b.session.totalMs) * 100) / 100;
}

/**
 * The most a session could gain on this workload: the fresh calls' total over the session's
 * calls' code time alone (the sandbox's own duration_ms), as if a session's start, transfer,
 * resume and collection cost nothing. The code's time is the guest's compute; under TCG it is
 * what bounds the ratio.
 */
export function sessionsBound(r: BenchResults, backend: string): number | undefined {
  const b = r.sessions?.backends.find((x) => x.backend === backend);
  const code = b?.session?.codeMs?.filter((c): c is number => c !== null);
  if (!b?.fresh || !code?.length || b.fresh.errors || b.session?.errors) return undefined;
  const sum = code.reduce((a, c) => a + c, 0);
  return Math.round((b.fresh.totalMs / sum) * 100) / 100;
}

/** Issue 30's time-to-interactive targets and issue 27's sessions targets, where measured. */
export function phaseTargets(r: BenchResults): TargetCheck[] {
  const out: TargetCheck[] = [];
  const add = (target: string, measured: string | undefined, met: boolean | undefined) =>
    out.push({ target, measured: measured ?? "not measured", met: met ?? null });
  if (r.tti) {
    const ns = ttiP50(r, "namespace", TTI_NODE);
    const bw = ttiP50(r, "bwrap", TTI_NODE);
    const q = ns !== undefined && bw !== undefined ? Math.round((ns / bw) * 100) / 100 : undefined;
    const eng = ttiP50(r, "engine", TTI_NODE);
    const engine =
      eng !== undefined && bw !== undefined && ns !== undefined
        ? `; the engine in-process ${eng} ms (${Math.round((eng / bw) * 100) / 100}×), the MCP stdio round trip ${Math.round((ns - eng) * 10) / 10} ms`
        : "";
    add(
      "time to interactive, sequential: namespace `node -v` p50 ≤ 1.3× raw bubblewrap",
      q === undefined ? undefined : `${q}× (${ns} / ${bw} ms)${engine}`,
      q === undefined ? undefined : q <= 1.3,
    );
    const vm = ttiP50(r, "microvm", TTI_NODE);
    const cpu = r.tti.rows.find(
      (x) => x.system === "microvm" && x.command === TTI_NODE,
    )?.hostCpuMsPerCall;
    const bound =
      cpu === undefined
        ? ""
        : `; the host's CPU per call ÷ its ${r.host.cpus} cores: ${Math.round(cpu / r.host.cpus)} ms`;
    add(
      "time to interactive, sequential: microvm `node -v` p50 ≤ 250 ms",
      vm === undefined ? undefined : `${vm} ms${bound}`,
      vm === undefined ? undefined : vm <= 250,
    );
    for (const row of r.tti.rows) {
      const b = row.burst;
      if (!b || b.via !== "rest") continue;
      const others = Object.values(b.otherStatus).reduce((a, n) => a + n, 0);
      add(
        `burst of ${b.n}, ${row.system} \`${row.command}\`: every call answered or refused with 429 + Retry-After, none lost`,
        `${b.answered} answered, ${b.refused} refused (${b.refusedWithRetryAfter} with Retry-After), ${b.wrong} wrong, ${others} other status, ${b.lost} lost`,
        b.lost === 0 && b.wrong === 0 && others === 0 && b.refused === b.refusedWithRetryAfter,
      );
      if (row.system === "namespace")
        add(
          `burst of ${b.n}, namespace \`${row.command}\`: p99 of answered calls ≤ 3 s`,
          b.latency ? `${b.latency.p99} ms` : undefined,
          b.latency ? b.latency.p99 <= 3000 : undefined,
        );
    }
  }
  if (r.sessions) {
    const s = sessionsSpeedup(r, "microvm");
    const bound = sessionsBound(r, "microvm");
    add(
      "sessions workload on the microVM: the session ≥ 5× faster than fresh calls",
      s === undefined
        ? undefined
        : `${s}×${bound === undefined ? "" : ` (at most ${bound}× with a session's own costs at zero)`}`,
      s === undefined ? undefined : s >= 5,
    );
    const nsFresh = r.sessions.backends.find((b) => b.backend === "namespace")?.freshPrint?.p50;
    for (const b of r.sessions.backends) {
      const cell = b.sessionPrint?.p50;
      const q =
        cell !== undefined && nsFresh !== undefined
          ? Math.round((cell / nsFresh) * 100) / 100
          : undefined;
      add(
        `${b.backend} session cell \`print(1)\` p50 ≤ 1.5× the namespace backend's fresh call`,
        q === undefined ? undefined : `${q}× (${cell} / ${nsFresh} ms)`,
        q === undefined ? undefined : q <= 1.5,
      );
    }
  }
  return out;
}
