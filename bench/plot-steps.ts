/**
 * Where the product page's plot spends its time (issue 30): the page's example verbatim on the
 * microVM (python3.12, its PNG returned inline) beside the bare host, calls `gapMs` apart, and the
 * same statements with timers between them, so each step is measured where it runs: the
 * interpreter and its imports (CPU the process had used when its code began: a pre-imported
 * interpreter did them before the call, in its snapshot template), plotting, savefig; and from
 * outside, the sandbox (clone, agent, collecting the file) and the transfer (MCP, the PNG as
 * base64). The TCG/host ratio of the guest's own steps, times the host's, gives the prediction
 * for a host with KVM (guest code at about native speed).
 */
import { summarize } from "./stats.js";
import type { BenchSystem } from "./systems/types.js";
import { PRODUCT_EXAMPLE, productWorkload, type Workload } from "./workloads.js";
import type { RuntimeName } from "../src/schema/exec.js";

export interface PlotPlan {
  n: number;
  gapMs: number;
}

/** Medians (ms) of one system's calls. */
export interface PlotSteps {
  system: string;
  /** The verbatim example: what the user waits for (client side), and the server's own time. */
  verbatimMs: number | null;
  verbatimServerMs: number | null;
  /** The timed variant, same statements: its total, the server's time and the guest's steps. */
  timedMs: number | null;
  serverMs: number | null;
  /** CPU the interpreter had used when the code began (start-up and imports, wherever done). */
  startupCpuMs: number | null;
  /** Wall from the code's first line to its end: the plot, then savefig (wall and CPU). */
  plotMs: number | null;
  plotCpuMs: number | null;
  savefigMs: number | null;
  savefigCpuMs: number | null;
  /**
   * Server time less the code's own: getting the sandbox, the agent, the file collected (on a
   * floor: the whole process less the code's steps: spawn, interpreter, imports, file read).
   */
  sandboxMs: number | null;
  /** Client time less server time: MCP and the PNG over stdio (null on a floor). */
  transferMs: number | null;
  pngBytes: number | null;
  n: number;
  errors: number;
  firstError?: string;
}

export interface PlotResults {
  runtime: RuntimeName;
  n: number;
  gapMs: number;
  systems: PlotSteps[];
  /** Guest steps TCG ÷ host. */
  tcgOverHost: { plot: number; savefig: number; startupCpu: number | null } | null;
  /**
   * The example's p50 predicted under KVM (ms): `low` with the sandbox's share scaled as guest
   * work, `high` with it kept as measured under TCG (KVM_METHOD).
   */
  kvmPredictionMs: { low: number; high: number } | null;
  /** How the prediction is made, in words (it goes into the report). */
  method: string;
}

const RUNTIME: RuntimeName = "python3.12";

/** The example's statements with timers between them; its imports first, as the page has them. */
export function timedExample(): string {
  const [imp1, imp2, ...rest] = PRODUCT_EXAMPLE.split("\n");
  const save = rest.pop()!;
  return [
    imp1,
    imp2,
    "import time as _t, json as _j, os as _o",
    "_c0, _w0 = _t.process_time(), _t.perf_counter()",
    ...rest,
    "_c1, _w1 = _t.process_time(), _t.perf_counter()",
    save,
    "_c2, _w2 = _t.process_time(), _t.perf_counter()",
    "print(_j.dumps({'startupCpu': _c0 * 1e3, 'plot': (_w1 - _w0) * 1e3, 'plotCpu': (_c1 - _c0) * 1e3, 'savefig': (_w2 - _w1) * 1e3, 'savefigCpu': (_c2 - _c1) * 1e3, 'png': _o.path.getsize('/tmp/plot.png')}))",
  ].join("\n");
}

interface Step {
  startupCpu: number;
  plot: number;
  plotCpu: number;
  savefig: number;
  savefigCpu: number;
  png: number;
}

const med = (xs: number[]) => summarize(xs)?.p50 ?? null;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function stepsOf(system: BenchSystem, plan: PlotPlan): Promise<PlotSteps> {
  const verbatim = productWorkload(RUNTIME)!;
  const seen: Step[] = [];
  const timed: Workload = {
    ...verbatim,
    code: timedExample(),
    check: (stdout, files) => {
      try {
        seen.push(JSON.parse(stdout) as Step);
      } catch {
        return false;
      }
      return (files["/tmp/plot.png"] ?? 0) > 1000;
    },
  };
  const v: number[] = [];
  const vs: number[] = [];
  const t: number[] = [];
  const ts: number[] = [];
  let errors = 0;
  let firstError: string | undefined;
  // One untimed call of each first (a floor's page cache, a server's first clone).
  await system.call(verbatim);
  await system.call(timed);
  seen.length = 0;
  for (let i = 0; i < plan.n; i++)
    for (const [w, into, server] of [
      [verbatim, v, vs],
      [timed, t, ts],
    ] as const) {
      await sleep(plan.gapMs);
      const t0 = performance.now();
      const r = await system.call(w);
      const ms = performance.now() - t0;
      if (!r.ok) {
        errors++;
        firstError ??= r.error;
        continue;
      }
      into.push(ms);
      if (r.serverMs !== undefined) server.push(r.serverMs);
    }
  const pick = (k: keyof Step) => med(seen.map((s) => s[k]));
  const plot = pick("plot");
  const savefig = pick("savefig");
  const serverMs = med(ts);
  const timedMs = med(t);
  const code = plot !== null && savefig !== null ? plot + savefig : null;
  const round = (x: number | null) => (x === null ? null : Math.round(x * 10) / 10);
  return {
    system: system.id,
    verbatimMs: med(v),
    verbatimServerMs: med(vs),
    timedMs,
    serverMs,
    startupCpuMs: round(pick("startupCpu")),
    plotMs: round(plot),
    plotCpuMs: round(pick("plotCpu")),
    savefigMs: round(savefig),
    savefigCpuMs: round(pick("savefigCpu")),
    // A floor has no server: its rest is the process (spawn, interpreter, imports, file read).
    sandboxMs: code === null ? null : round((serverMs ?? timedMs ?? code) - code),
    transferMs: timedMs !== null && serverMs !== null ? round(timedMs - serverMs) : null,
    pngBytes: pick("png"),
    n: t.length,
    errors,
    ...(firstError ? { firstError: firstError.slice(0, 300) } : {}),
  };
}

export const KVM_METHOD =
  "Under KVM the guest's code runs at about the host's speed. Prediction: the code's steps (plot, savefig) measured in the microVM divided by their measured TCG/host ratio, plus the transfer (MCP, base64: host work) as measured, plus the sandbox's share (clone resumed, agent, file read): divided by the same ratio for the low bound (all guest work), kept as measured under TCG for the high bound.";

export async function benchPlot(
  systems: { host: BenchSystem; microvm: BenchSystem },
  plan: PlotPlan,
  log: (m: string) => void,
): Promise<PlotResults> {
  const out: PlotSteps[] = [];
  for (const system of [systems.host, systems.microvm]) {
    log(`plot ${system.id}: starting`);
    await system.start();
    try {
      if ("waitWarm" in system)
        await (system as { waitWarm(ms: number): Promise<boolean> }).waitWarm(600_000);
      const s = await stepsOf(system, plan);
      log(`plot ${system.id}: ${JSON.stringify(s)}`);
      out.push(s);
    } finally {
      await system.close();
    }
  }
  const [h, m] = out as [PlotSteps, PlotSteps];
  const ratio = (a: number | null, b: number | null) =>
    a !== null && b !== null && b > 0 ? Math.round((a / b) * 10) / 10 : null;
  const plot = ratio(m.plotMs, h.plotMs);
  const savefig = ratio(m.savefigMs, h.savefigMs);
  const startupCpu = ratio(m.startupCpuMs, h.startupCpuMs);
  let kvm: PlotResults["kvmPredictionMs"] = null;
  if (plot && savefig && m.plotMs !== null && m.savefigMs !== null) {
    // One TCG/host factor for guest work: the two steps' combined wall.
    const code = m.plotMs + m.savefigMs;
    const factor = code / ((h.plotMs ?? 0) + (h.savefigMs ?? 0));
    const base = code / factor + (m.transferMs ?? 0);
    kvm = {
      low: Math.round(base + (m.sandboxMs ?? 0) / factor),
      high: Math.round(base + (m.sandboxMs ?? 0)),
    };
  }
  return {
    runtime: RUNTIME,
    n: plan.n,
    gapMs: plan.gapMs,
    systems: out,
    tcgOverHost: plot && savefig ? { plot, savefig, startupCpu } : null,
    kvmPredictionMs: kvm,
    method: KVM_METHOD,
  };
}
