/**
 * The first two minutes (issue 30): a user starts the server when the MCP client starts, and the
 * first calls come at once, while the pools are still building. The server is started (stdio,
 * the MCP SDK's client, the product's default pooling and pre-imports), each runtime is called
 * every `everyMs` from the moment the client is connected until `windowMs` after the server was
 * spawned; then, once every pool is full, the same calls again for `settledMs`. Per runtime: its
 * first call, the p50 in the window and settled, and their ratio (target ≤ 1.5×).
 */
import { summarize, type Summary } from "./stats.js";
import type { McpSystem } from "./systems/scratchrun.js";
import { printWorkload } from "./workloads.js";
import type { RuntimeName } from "../src/schema/exec.js";

export interface FirstMinutesPlan {
  runtimes: readonly RuntimeName[];
  /** Each runtime called once per this many ms (the calls of one tick spread evenly over it). */
  everyMs: number;
  /** From the server's spawn. */
  windowMs: number;
  /** The settled calls' span, after every pool is full. */
  settledMs: number;
}

export interface FirstMinutesRuntime {
  runtime: RuntimeName;
  /** The runtime's first call after start (ms), and when it was made (ms after spawn). */
  first: { ms: number; atMs: number } | null;
  window: Summary | null;
  settled: Summary | null;
  /** window p50 ÷ settled p50. */
  ratio: number | null;
  errors: number;
  firstError?: string;
}

export interface FirstMinutesServer {
  /** The system's id: backend, or `<backend>-baseline` for another build. */
  system: string;
  /** ms from spawn until the client was connected, and until every pool was first full. */
  connectedMs: number;
  poolsFullMs: number | null;
  runtimes: FirstMinutesRuntime[];
  unsupported?: string;
}

export interface FirstMinutesResults {
  everyMs: number;
  windowMs: number;
  settledMs: number;
  servers: FirstMinutesServer[];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/**
 * Calls every runtime once per `everyMs` (runtime i at offset i·everyMs/n in its tick) from now
 * until `untilMs` (performance.now() time); a call that overruns delays the next, never skips it.
 */
async function callLoop(
  system: McpSystem,
  runtimes: readonly RuntimeName[],
  everyMs: number,
  untilMs: number,
  t0: number,
  onCall: (rt: RuntimeName, ms: number, atMs: number, error?: string) => void,
): Promise<void> {
  const slot = everyMs / runtimes.length;
  const begin = performance.now();
  for (let k = 0; ; k++) {
    const due = begin + k * slot;
    if (due >= untilMs) return;
    await sleep(due - performance.now());
    const rt = runtimes[k % runtimes.length]!;
    const start = performance.now();
    const r = await system.call(printWorkload(rt));
    onCall(rt, performance.now() - start, start - t0, r.ok ? undefined : r.error);
  }
}

export async function firstMinutesOf(
  system: McpSystem,
  plan: FirstMinutesPlan,
  log: (m: string) => void,
): Promise<FirstMinutesServer> {
  const window = new Map<RuntimeName, number[]>(plan.runtimes.map((rt) => [rt, []]));
  const settled = new Map<RuntimeName, number[]>(plan.runtimes.map((rt) => [rt, []]));
  const first = new Map<RuntimeName, { ms: number; atMs: number }>();
  const errors = new Map<RuntimeName, { n: number; first?: string }>();
  const onCall =
    (into: Map<RuntimeName, number[]>) =>
    (rt: RuntimeName, ms: number, atMs: number, error?: string) => {
      if (error) {
        const e = errors.get(rt) ?? { n: 0 };
        errors.set(rt, { n: e.n + 1, first: e.first ?? error.slice(0, 300) });
        return;
      }
      if (!first.has(rt)) first.set(rt, { ms: Math.round(ms * 10) / 10, atMs: Math.round(atMs) });
      into.get(rt)!.push(ms);
    };
  const t0 = performance.now();
  await system.start();
  let poolsFullMs: number | null = null;
  try {
    const connectedMs = Math.round(performance.now() - t0);
    // When every pool first reported full (checked at each call and every 100 ms).
    const poll = setInterval(() => noteFull(), 100);
    const noteFull = () => {
      const pools = Object.values(system.poolReady());
      if (poolsFullMs === null && pools.length > 0 && pools.every((p) => p && p[0] >= p[1]))
        poolsFullMs = Math.round(performance.now() - t0);
    };
    const until = t0 + plan.windowMs;
    try {
      await callLoop(system, plan.runtimes, plan.everyMs, until, t0, (...a) => {
        noteFull();
        onCall(window)(...a);
      });
    } finally {
      clearInterval(poll);
    }
    log(`first-minutes ${system.id}: window done, waiting for full pools`);
    if (!(await system.waitWarm(600_000))) throw new Error("pools did not fill in 600 s");
    poolsFullMs ??= Math.round(performance.now() - t0);
    const s0 = performance.now();
    await callLoop(system, plan.runtimes, plan.everyMs, s0 + plan.settledMs, t0, onCall(settled));
    const runtimes = plan.runtimes.map((rt): FirstMinutesRuntime => {
      const w = summarize(window.get(rt)!);
      const s = summarize(settled.get(rt)!);
      const e = errors.get(rt);
      return {
        runtime: rt,
        first: first.get(rt) ?? null,
        window: w,
        settled: s,
        ratio: w && s && s.p50 > 0 ? Math.round((w.p50 / s.p50) * 100) / 100 : null,
        errors: e?.n ?? 0,
        ...(e?.first ? { firstError: e.first } : {}),
      };
    });
    for (const r of runtimes)
      log(
        `first-minutes ${system.id} ${r.runtime}: first ${r.first?.ms ?? "-"} ms, window p50 ${r.window?.p50 ?? "-"} (n=${r.window?.n ?? 0}), settled p50 ${r.settled?.p50 ?? "-"} (n=${r.settled?.n ?? 0}), ${r.ratio ?? "-"}×, errors ${r.errors}`,
      );
    return { system: system.id, connectedMs, poolsFullMs, runtimes };
  } finally {
    await system.close();
  }
}

/** The phase: each server in turn (a fresh start each), its failure a row of its own. */
export async function benchFirstMinutes(
  systems: readonly McpSystem[],
  plan: FirstMinutesPlan,
  log: (m: string) => void,
): Promise<FirstMinutesResults> {
  const servers: FirstMinutesServer[] = [];
  for (const system of systems) {
    log(`first-minutes ${system.id}: starting`);
    try {
      servers.push(await firstMinutesOf(system, plan, log));
    } catch (e) {
      const why = e instanceof Error ? e.message : String(e);
      log(`first-minutes ${system.id}: failed: ${why}`);
      servers.push({
        system: system.id,
        connectedMs: 0,
        poolsFullMs: null,
        runtimes: [],
        unsupported: `failed: ${why}`,
      });
    }
  }
  return { everyMs: plan.everyMs, windowMs: plan.windowMs, settledMs: plan.settledMs, servers };
}
