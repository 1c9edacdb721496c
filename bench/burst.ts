/**
 * The burst phase (issue 57), on the published sandbox comparison's burst method: n sandboxes
 * asked for at once, each timed from the burst's start to its first command's answer (bash
 * `echo` of a marker of its own, so an answer given to the wrong call counts as wrong), p50, p95
 * and how many came back right; for network "none" and "public" on both backends, raw bubblewrap
 * (every namespace unshared, no network) beside them, in one run.
 *
 * A server's burst goes to its REST API (`bench/server.ts` BENCH_REST=1, the engine admitting
 * BENCH_MAX_CONCURRENT at once and queueing BENCH_MAX_QUEUED, as `serve --max-concurrent
 * --max-queued` does), where a refusal is a 429 whose Retry-After is counted; one untimed call
 * first, then the server's pools are let fill. Servers run one at a time, each alone on the host.
 */
import { randomBytes } from "node:crypto";
import type { BurstResult } from "./results.js";
import type { McpSystem } from "./systems/scratchrun.js";
import type { BenchSystem } from "./systems/types.js";
import { hostBusyMs, processBurst, restBurst } from "./tti.js";
import type { Workload } from "./workloads.js";

export interface BurstPlan {
  /** Sandboxes asked for at once. */
  n: number;
  /** The engine's admission for the servers measured: running at once, and waiting. */
  maxConcurrent: number;
  maxQueued: number;
}

export interface BurstPhaseRow {
  system: string;
  label: string;
  network: "none" | "public";
  burst: BurstResult;
  /** Host CPU time busy during the burst, ms (every core). */
  cpuMs: number;
}

export interface BurstPhaseResults {
  plan: BurstPlan;
  rows: BurstPhaseRow[];
  /** Per backend: public's p50 over none's p50, and the same for the whole burst's wall time. */
  ratios: Record<string, { p50: number | null; wall: number | null }>;
}

/** A server of one backend and network mode, and the mode its calls ask for. */
export interface BurstServer {
  system: McpSystem;
  network: "none" | "public";
}

/** `echo <marker>`: each call's own answer. */
export function markerWorkload(): Workload {
  const marker = `m${randomBytes(6).toString("hex")}`;
  return {
    id: "tti",
    runtime: "bash",
    code: `echo ${marker}`,
    returnFiles: [],
    check: (stdout: string) => stdout.trim() === marker,
  };
}

export async function benchBurst(
  servers: readonly BurstServer[],
  bwrap: BenchSystem,
  plan: BurstPlan,
  log: (m: string) => void,
): Promise<BurstPhaseResults> {
  const rows: BurstPhaseRow[] = [];
  for (const { system, network } of servers) {
    log(`burst ${system.id}: starting`);
    await system.start();
    try {
      await system.waitWarm(300_000);
      const api = system.rest();
      if (!api) throw new Error(`${system.id} gave no REST API`);
      await restBurst(api, markerWorkload(), 1, { network, perCall: markerWorkload });
      await system.waitWarm(300_000);
      // The pools and the ready networks fill after the untimed call: a burst after a pause
      // (BENCH_BURST_PAUSE_MS, default 3 s; ~60 ms a ready network, one at a time).
      const pauseMs = Number(process.env.BENCH_BURST_PAUSE_MS ?? 3_000);
      await new Promise((r) => setTimeout(r, pauseMs));
      const busy0 = hostBusyMs();
      const burst = await restBurst(api, markerWorkload(), plan.n, {
        network,
        perCall: markerWorkload,
      });
      rows.push({
        system: system.id,
        label: system.label,
        network,
        burst,
        cpuMs: Math.round(hostBusyMs() - busy0),
      });
      log(
        `burst ${system.id}: ${burst.answered}/${plan.n} right, p50 ${burst.latency?.p50} ms, wall ${burst.wallMs} ms`,
      );
    } finally {
      await system.close();
    }
  }
  await bwrap.start();
  try {
    const busy0 = hostBusyMs();
    const burst = await processBurst(bwrap, markerWorkload(), plan.n, markerWorkload);
    rows.push({
      system: bwrap.id,
      label: bwrap.label,
      network: "none",
      burst,
      cpuMs: Math.round(hostBusyMs() - busy0),
    });
  } finally {
    await bwrap.close();
  }
  const ratios: BurstPhaseResults["ratios"] = {};
  for (const backend of new Set(servers.map((s) => backendOf(s.system.id)))) {
    const of = (n: "none" | "public") =>
      rows.find((r) => backendOf(r.system) === backend && r.network === n)?.burst;
    const none = of("none");
    const pub = of("public");
    const ratio = (a?: number | null, b?: number | null) =>
      a && b ? Math.round((a / b) * 100) / 100 : null;
    ratios[backend] = {
      p50: ratio(pub?.latency?.p50, none?.latency?.p50),
      wall: ratio(pub?.wallMs, none?.wallMs),
    };
  }
  return { plan, rows, ratios };
}

/** "namespace-public" -> "namespace". */
const backendOf = (id: string): string => id.replace(/-(none|public)$/, "");

/** The phase as a Markdown table, with the ratios the targets are about. */
export function renderBurstMarkdown(r: BurstPhaseResults): string {
  const ms = (v: number | null | undefined) =>
    v === null || v === undefined ? "–" : String(Math.round(v));
  const lines = [
    `| system | network | answered right | wrong | refused (with Retry-After) | lost | p50 ms | p95 ms | wall ms | host CPU ms |`,
    `| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |`,
  ];
  for (const row of r.rows) {
    const b = row.burst;
    lines.push(
      `| ${row.label} | ${row.network} | ${b.answered}/${b.n} | ${b.wrong} | ${b.refused} (${b.refusedWithRetryAfter}) | ${b.lost} | ${ms(b.latency?.p50)} | ${ms(b.p95)} | ${b.wallMs} | ${row.cpuMs} |`,
    );
  }
  lines.push("");
  for (const [backend, x] of Object.entries(r.ratios))
    lines.push(`- ${backend}: public/none p50 ${x.p50 ?? "–"}x, whole burst ${x.wall ?? "–"}x`);
  return lines.join("\n") + "\n";
}
