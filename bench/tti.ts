/**
 * Time to interactive, the published sandbox comparison's method (issue 30): a fresh sandbox runs
 * `node -v`, n times in sequence, then n at once; the same for `python3 -c 'print(1)'`. Both
 * backends beside the bare host, raw bubblewrap and sandbox-runtime, in one run, their sequential
 * calls taken in turns so every system sees the same machine.
 *
 * ScratchRun's sequential calls go through the MCP stdio client as every other row of the
 * benchmark does; its burst goes to the REST API of the same server (`bench/server.ts`
 * BENCH_REST=1), where a refusal is an HTTP 429 whose Retry-After the burst counts. The floors and
 * the peers have nothing to refuse with: their burst is n processes started at once.
 */
import type { LatencyResult } from "./measure.js";
import type { BurstResult, TtiResults, TtiRow } from "./results.js";
import { quantile, summarize } from "./stats.js";
import type { McpSystem } from "./systems/scratchrun.js";
import type { BenchSystem } from "./systems/types.js";
import { TTI_COMMANDS, ttiWorkload, type Workload } from "./workloads.js";
import { readFileSync } from "node:fs";

/** CPU time the whole host has spent busy (every core, all but idle and iowait), ms. */
export function hostBusyMs(): number {
  const cpu = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1);
  // user nice system idle iowait irq softirq steal: all but idle and iowait.
  const [user, nice, system, , , irq, softirq, steal] = cpu.map(Number);
  // USER_HZ is 100 on every Linux build the benchmark runs on (sysconf(_SC_CLK_TCK)).
  return (user! + nice! + system! + irq! + softirq! + (steal ?? 0)) * 10;
}

export interface TtiPlan {
  sequentialN: number;
  burstN: number;
}

/** The 95th percentile of a burst's answers, to the ms (none: no field). */
function p95Of(samples: readonly number[]): { p95?: number } {
  if (samples.length === 0) return {};
  return {
    p95: Math.round(
      quantile(
        [...samples].sort((a, b) => a - b),
        0.95,
      ),
    ),
  };
}

/** Longest a burst's call may go unanswered before it counts as lost. */
const LOST_AFTER_MS = 300_000;

/** n calls of a per-call system at once (each a process of its own: none is ever refused). */
export async function processBurst(
  system: BenchSystem,
  w: Workload,
  n: number,
  /** Each call's own workload (a marker of its own), instead of `w` for all. */
  perCall?: () => Workload,
): Promise<BurstResult> {
  const t0 = performance.now();
  const ends: number[] = [];
  let wrong = 0;
  let firstError: string | undefined;
  await Promise.all(
    Array.from({ length: n }, async () => {
      const r = await system.call(perCall ? perCall() : w);
      if (r.ok) ends.push(performance.now() - t0);
      else {
        wrong++;
        firstError ??= r.error;
      }
    }),
  );
  return {
    n,
    via: "process",
    answered: ends.length,
    wrong,
    refused: 0,
    refusedWithRetryAfter: 0,
    otherStatus: {},
    lost: 0,
    wallMs: Math.round(performance.now() - t0),
    latency: summarize(ends),
    refusedLatency: null,
    ...p95Of(ends),
    ...(firstError ? { firstError: firstError.slice(0, 300) } : {}),
  };
}

/** n POST /v1/exec at once to a server's REST API; every call's fate counted. */
export async function restBurst(
  api: { url: string; key: string },
  w: Workload,
  n: number,
  opts: { network?: "none" | "public"; perCall?: () => Workload } = {},
): Promise<BurstResult> {
  const network = opts.network ?? "none";
  const answered: number[] = [];
  const refused: number[] = [];
  const otherStatus: Record<string, number> = {};
  let wrong = 0;
  let lost = 0;
  let withRetryAfter = 0;
  let firstError: string | undefined;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: n }, async () => {
      const call = opts.perCall ? opts.perCall() : w;
      const body = JSON.stringify({ runtime: call.runtime, code: call.code, network });
      let res: Response;
      let text: string;
      try {
        res = await fetch(`${api.url}/v1/exec`, {
          method: "POST",
          headers: { "Content-Type": "application/json", Authorization: `Bearer ${api.key}` },
          body,
          signal: AbortSignal.timeout(LOST_AFTER_MS),
        });
        text = await res.text();
      } catch (e) {
        lost++;
        firstError ??= `no answer: ${e instanceof Error ? e.message : String(e)}`;
        return;
      }
      const at = performance.now() - t0;
      if (res.status === 429) {
        refused.push(at);
        const after = res.headers.get("retry-after");
        if (after !== null && /^\d+$/.test(after)) withRetryAfter++;
        return;
      }
      if (res.status !== 200) {
        otherStatus[res.status] = (otherStatus[res.status] ?? 0) + 1;
        firstError ??= `HTTP ${res.status}: ${text.slice(0, 200)}`;
        return;
      }
      const r = JSON.parse(text) as { stdout?: string; exit_code?: number | null };
      if (r.exit_code === 0 && call.check(r.stdout ?? "", {})) answered.push(at);
      else {
        wrong++;
        firstError ??= `wrong answer: ${text.slice(0, 200)}`;
      }
    }),
  );
  return {
    n,
    via: "rest",
    answered: answered.length,
    wrong,
    refused: refused.length,
    refusedWithRetryAfter: withRetryAfter,
    otherStatus,
    lost,
    wallMs: Math.round(performance.now() - t0),
    latency: summarize(answered),
    refusedLatency: summarize(refused),
    ...p95Of(answered),
    ...(firstError ? { firstError } : {}),
  };
}

/** Sequential calls per system per turn: long enough runs of back-to-back calls for a pool to drain. */
const BLOCK = 20;

/**
 * n back-to-back calls of `w` on each system, in turns of BLOCK calls per system (the order
 * flipping each turn), so a load that comes and goes on a shared host falls on all of them alike;
 * one untimed call per system first. A pooled server waits until its pools are full before each
 * turn, as after a pause in a user's calls.
 */
export async function interleavedSequential(
  systems: readonly BenchSystem[],
  w: Workload,
  n: number,
): Promise<Map<string, LatencyResult & { cpuMsPerCall?: number }>> {
  const acc = new Map(
    systems.map((s) => [
      s.id,
      {
        samples: [] as number[],
        server: [] as number[],
        cpuMs: 0,
        errors: 0,
        firstError: undefined as string | undefined,
      },
    ]),
  );
  for (const s of systems) await s.call(w);
  for (let done = 0, turn = 0; done < n; done += BLOCK, turn++) {
    const order = turn % 2 === 0 ? systems : [...systems].reverse();
    for (const s of order) {
      if ("waitWarm" in s) await (s as McpSystem).waitWarm(300_000);
      const a = acc.get(s.id)!;
      const busy0 = hostBusyMs();
      for (let i = 0; i < Math.min(BLOCK, n - done); i++) {
        const t0 = performance.now();
        const r = await s.call(w);
        const ms = performance.now() - t0;
        if (r.ok) {
          a.samples.push(ms);
          if (r.serverMs !== undefined) a.server.push(r.serverMs);
        } else {
          a.errors++;
          a.firstError ??= r.error;
        }
      }
      a.cpuMs += hostBusyMs() - busy0;
    }
  }
  return new Map(
    [...acc].map(([id, a]) => [
      id,
      {
        cpuMsPerCall: a.samples.length ? Math.round(a.cpuMs / a.samples.length) : undefined,
        samples: a.samples,
        summary: summarize(a.samples),
        server: summarize(a.server),
        errors: a.errors,
        ...(a.firstError ? { firstError: a.firstError } : {}),
      },
    ]),
  );
}

/**
 * The phase: every system started, then per command the sequential calls of all of them
 * interleaved (interleavedSequential), then each system's burst once its pools are full again;
 * every system closed at the end.
 */
export async function benchTti(
  systems: readonly BenchSystem[],
  plan: TtiPlan,
  log: (m: string) => void,
): Promise<TtiResults> {
  const rows: TtiRow[] = [];
  const started: BenchSystem[] = [];
  try {
    for (const system of systems) {
      log(`tti ${system.id}: starting`);
      try {
        await system.start();
        started.push(system);
      } catch (e) {
        const reason = `failed to start here: ${e instanceof Error ? e.message : String(e)}`;
        await system.close().catch(() => {});
        for (const command of TTI_COMMANDS)
          rows.push({ system: system.id, command, unsupported: reason });
      }
    }
    for (const command of TTI_COMMANDS) {
      const w = ttiWorkload(command);
      const live = started.filter((s) => {
        const why = s.unsupported(w);
        if (why) rows.push({ system: s.id, command, unsupported: why });
        return !why;
      });
      const sequential = await interleavedSequential(live, w, plan.sequentialN);
      for (const system of live) {
        const mcp = "rest" in system ? (system as McpSystem) : null;
        await mcp?.waitWarm(300_000);
        const api = mcp?.rest() ?? null;
        const burst = mcp
          ? api
            ? await restBurst(api, w, plan.burstN)
            : null
          : await processBurst(system, w, plan.burstN);
        const seq = sequential.get(system.id)!;
        log(
          `tti ${system.id} ${command}: sequential p50 ${seq.summary?.p50 ?? "-"} p99 ${seq.summary?.p99 ?? "-"} ms (errors ${seq.errors}); burst ${burst ? `${burst.answered} answered, ${burst.refused} refused (${burst.refusedWithRetryAfter} with Retry-After), ${burst.lost} lost, p99 ${burst.latency?.p99 ?? "-"} ms` : "no REST API"}`,
        );
        const { cpuMsPerCall, ...latency } = seq;
        rows.push({
          system: system.id,
          command,
          sequential: latency,
          ...(cpuMsPerCall !== undefined ? { hostCpuMsPerCall: cpuMsPerCall } : {}),
          ...(burst ? { burst } : {}),
        });
      }
    }
  } finally {
    for (const system of started) await system.close();
  }
  // The systems' order, as before: rows grouped by system.
  const order = systems.map((s) => s.id);
  rows.sort((a, b) => order.indexOf(a.system) - order.indexOf(b.system));
  return { sequentialN: plan.sequentialN, burstN: plan.burstN, rows };
}
