#!/usr/bin/env node
// `npm run bench [-- --quick] [--out DIR] [--only id,id]`: measures ScratchRun end to end through
// the MCP stdio client, side by side with the floor and the peers, in one run on one machine.
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, hostname, loadavg, release, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { findRootfs } from "../src/images/locate.js";
import type { RuntimeName } from "../src/schema/exec.js";
import { measureLatency, measureThroughput } from "./measure.js";
import { FULL, QUICK, runtimesFor, samplesFor, workloadsFor, type Plan } from "./plan.js";
import { hwmKb, idleCost, treeRssSampler } from "./proc.js";
import { REPO_ROOT } from "./peers.js";
import { renderMarkdown } from "./report-md.js";
import { renderSvg } from "./report-svg.js";
import { summarize } from "./stats.js";
import type { BenchResults, HostInfo } from "./results.js";
import { engineInProcess } from "./systems/engine-inproc.js";
import { hostFloor, rawBwrap } from "./systems/floor.js";
import { pyodide } from "./systems/pyodide.js";
import { srtCli, srtLibrary } from "./systems/sandbox-runtime.js";
import {
  BENCH_MICROVM_SERVER,
  mcpSystem,
  SHIPPED_SERVER,
  type McpSystem,
} from "./systems/scratchrun.js";
import type { BenchSystem } from "./systems/types.js";
import { printWorkload, realisticWorkload, type Workload } from "./workloads.js";

const log = (m: string) =>
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${m}\n`);

function hostInfo(): HostInfo {
  return {
    hostname: hostname(),
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? "unknown",
    memMb: Math.round(totalmem() / 2 ** 20),
    kernel: release(),
    kvm: existsSync("/dev/kvm"),
    node: process.version,
    loadAvg: { start: loadavg()[0] ?? 0, end: 0 },
  };
}

/** SCRATCHRUN_* settings of this process, passed on to the servers it starts. */
function scratchrunEnv(): Record<string, string> {
  return Object.fromEntries(
    Object.entries(process.env).filter(
      (e): e is [string, string] => e[0].startsWith("SCRATCHRUN_") && e[1] !== undefined,
    ),
  );
}

function workloadsOf(plan: Plan, system: BenchSystem): Workload[] {
  const out: Workload[] = [];
  for (const rt of runtimesFor(plan, system.id))
    for (const id of workloadsFor(plan, system.id)) {
      const w = id === "print" ? printWorkload(rt) : realisticWorkload(rt);
      if (w) out.push(w);
    }
  return out;
}

function namespaceSystem(): McpSystem {
  return mcpSystem({
    id: "namespace",
    label: "ScratchRun namespace (MCP)",
    script: SHIPPED_SERVER,
    env: { ...scratchrunEnv(), SCRATCHRUN_ISOLATION: "namespace", SCRATCHRUN_NETWORK: "none" },
  });
}

/**
 * The microVM server three ways: "microvm", the product with a warm pool; "microvm-empty", the
 * product with an empty pool (templates built, as after a runtime's first call: every call
 * restores a clone for itself, the cold path the targets mean); "microvm-nopool", the naive
 * microVM that cold-boots every call (no snapshot either), as the product's very first call of a
 * runtime does: the baseline both beat.
 */
function microvmSystem(
  id: "microvm" | "microvm-empty" | "microvm-nopool",
  pool: Plan["microvmPool"],
  templates: readonly RuntimeName[] = [],
): McpSystem {
  const pooled = Object.keys(pool).length > 0;
  const labels = {
    microvm: "ScratchRun microVM, warm pool (MCP)",
    "microvm-empty": "ScratchRun microVM, empty pool: a clone restored per call (MCP)",
    "microvm-nopool": "naive microVM, boot per call (MCP)",
  };
  return mcpSystem({
    id,
    label: labels[id],
    script: BENCH_MICROVM_SERVER,
    env: {
      ...scratchrunEnv(),
      BENCH_POOL: JSON.stringify(pool),
      BENCH_POOL_MODE: id === "microvm-nopool" ? "boot" : "restore",
      BENCH_TEMPLATES: JSON.stringify(templates),
    },
    pool,
    skip: (w) =>
      pooled && (pool[w.runtime] ?? 0) === 0 ? `no pooled VM for ${w.runtime} in this plan` : null,
  });
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      quick: { type: "boolean", default: false },
      out: { type: "string", default: join(REPO_ROOT, "bench/results") },
      only: { type: "string" },
    },
  });
  const plan = values.quick ? QUICK : FULL;
  const only = values.only ? new Set(values.only.split(",")) : null;
  const started = Date.now();
  const rootfs = findRootfs();
  if (!rootfs.ok) throw new Error(`runtime image missing: ${rootfs.error}`);
  const work = mkdtempSync(join(tmpdir(), "scratchrun-bench-work-"));
  const results: BenchResults = {
    format: 1,
    date: new Date().toISOString(),
    mode: plan.mode,
    host: hostInfo(),
    systems: [],
    latency: [],
    cold: [],
    throughput: [],
    cost: { peakTreeRssMb: {}, serverHwmMb: {} },
    notes: [],
    durationSec: 0,
  };
  const systems: BenchSystem[] = [
    hostFloor(rootfs.dir, rootfs.manifest),
    rawBwrap(rootfs.dir, rootfs.manifest, join(work, "bwrap")),
    namespaceSystem(),
    engineInProcess({
      ...scratchrunEnv(),
      SCRATCHRUN_ISOLATION: "namespace",
      SCRATCHRUN_NETWORK: "none",
    }),
    microvmSystem("microvm", plan.microvmPool),
    microvmSystem("microvm-empty", {}, runtimesFor(plan, "microvm-empty")),
    microvmSystem("microvm-nopool", {}),
    srtCli(join(work, "srt-cli")),
    srtLibrary(join(work, "srt-lib")),
    pyodide("node"),
    pyodide("deno"),
  ].filter((s) => !only || only.has(s.id));
  try {
    for (const system of systems) await benchSystem(system, plan, results);
    if (!only || only.has("namespace")) await benchCold(plan, results);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  results.durationSec = Math.round((Date.now() - started) / 1000);
  if (results.host.loadAvg) results.host.loadAvg.end = loadavg()[0] ?? 0;
  mkdirSync(values.out, { recursive: true });
  const day = results.date.slice(0, 10);
  const jsonPath = join(
    values.out,
    `${day}-${results.host.hostname}${values.quick ? "-quick" : ""}.json`,
  );
  writeFileSync(jsonPath, `${JSON.stringify(results, null, 1)}\n`);
  const md = renderMarkdown(results);
  writeFileSync(join(values.out, values.quick ? "latest-quick.md" : "latest.md"), md);
  writeFileSync(
    join(values.out, values.quick ? "latest-quick.svg" : "latest.svg"),
    renderSvg(results),
  );
  process.stdout.write(`${md}\n${jsonPath}\n`);
}

async function benchSystem(system: BenchSystem, plan: Plan, results: BenchResults): Promise<void> {
  results.systems.push({ id: system.id, label: system.label, kind: system.kind });
  const workloads = workloadsOf(plan, system);
  const t0 = Date.now();
  log(`${system.id}: starting`);
  try {
    await system.start();
  } catch (e) {
    const reason = `failed to start here: ${e instanceof Error ? e.message : String(e)}`;
    log(`${system.id}: ${reason}`);
    for (const w of workloads)
      results.latency.push({
        system: system.id,
        runtime: w.runtime,
        workload: w.id,
        unsupported: reason,
      });
    return;
  }
  try {
    const mcp = "waitWarm" in system ? (system as McpSystem) : null;
    const pooled = mcp !== null && system.id === "microvm";
    const iso = /isolation (microvm-\w+)/.exec(mcp?.log() ?? "")?.[1];
    if (iso) results.host.microvmIsolation = iso;
    if (pooled && mcp) await measurePool(mcp, plan, t0, results);
    for (const w of workloads) {
      const why = system.unsupported(w);
      if (why) {
        results.latency.push({
          system: system.id,
          runtime: w.runtime,
          workload: w.id,
          unsupported: why,
        });
        continue;
      }
      const n = samplesFor(plan, system.id, w.id);
      const before = pooled && mcp ? async () => void (await mcp.waitWarm(120_000)) : undefined;
      const warmup = plan.warmup[system.id] ?? plan.warmup.default;
      const r = await measureLatency(system, w, n, before ? { before, warmup } : { warmup });
      log(
        `${system.id} ${w.runtime} ${w.id}: p50 ${r.summary?.p50 ?? "-"} ms (n=${r.summary?.n ?? 0}, errors ${r.errors})${r.firstError ? ` ${r.firstError.slice(0, 200)}` : ""}`,
      );
      results.latency.push({ system: system.id, runtime: w.runtime, workload: w.id, result: r });
    }
    if (plan.throughput.systems.includes(system.id)) await benchThroughput(system, plan, results);
    if (mcp && mcp.log().includes("Error"))
      results.notes.push(`${system.id} server stderr: ${mcp.log().slice(0, 500)}`);
  } finally {
    await system.close();
    log(`${system.id}: done in ${Math.round((Date.now() - t0) / 1000)} s`);
  }
}

async function measurePool(
  mcp: McpSystem,
  plan: Plan,
  t0: number,
  results: BenchResults,
): Promise<void> {
  const vms = Object.values(plan.microvmPool).reduce((a, b) => a + (b ?? 0), 0);
  const full = await mcp.waitWarm(300_000);
  const seconds = (Date.now() - t0) / 1000;
  if (!full) {
    results.notes.push(
      `microvm pool did not fill in 300 s (ready: ${JSON.stringify(mcp.poolReady())})`,
    );
    return;
  }
  results.cost.poolFill = {
    vms,
    seconds: Math.round(seconds * 10) / 10,
    vmsPerSec: Math.round((vms / seconds) * 100) / 100,
  };
  const pid = mcp.rootPids()[0];
  if (pid !== undefined) {
    const cost = await idleCost(pid, (c) => c.startsWith("qemu"), plan.idleWindowMs);
    if (cost) results.cost.idleVms = cost;
  }
}

async function benchThroughput(
  system: BenchSystem,
  plan: Plan,
  results: BenchResults,
): Promise<void> {
  const w = printWorkload("python3.11");
  const runs = [];
  const pid = system.rootPids()[0];
  for (const c of plan.throughput.concurrency) {
    if ("waitWarm" in system) await (system as McpSystem).waitWarm(120_000);
    const sampler = pid !== undefined ? treeRssSampler(pid) : null;
    const r = await measureThroughput(system, w, c, plan.throughput.durationMs);
    const peak = sampler?.stop();
    if (peak !== undefined)
      results.cost.peakTreeRssMb[system.id] = Math.max(
        peak,
        results.cost.peakTreeRssMb[system.id] ?? 0,
      );
    log(
      `${system.id} throughput c=${c}: ${r.callsPerSec}/s ok ${r.ok} errors ${r.errors} busy ${r.busy}`,
    );
    runs.push(r);
  }
  if (pid !== undefined) results.cost.serverHwmMb[system.id] = Math.round(hwmKb(pid) / 102.4) / 10;
  results.throughput.push({ system: system.id, runtime: w.runtime, workload: w.id, runs });
}

/** Cold: a fresh namespace server per sample, its first call timed (startup not included). */
async function benchCold(plan: Plan, results: BenchResults): Promise<void> {
  for (const rt of runtimesFor(plan, "namespace")) {
    const w = printWorkload(rt);
    const samples: number[] = [];
    let errors = 0;
    for (let i = 0; i < plan.coldSamples; i++) {
      const s = namespaceSystem();
      try {
        await s.start();
        const r = await measureLatency(s, w, 1, { warmup: 0 });
        samples.push(...r.samples);
        errors += r.errors;
      } catch (e) {
        errors++;
        results.notes.push(
          `cold ${rt}: ${e instanceof Error ? e.message : String(e)}; server said: ${s.log().slice(-300)}`,
        );
      } finally {
        await s.close().catch(() => {});
      }
    }
    results.cold.push({
      system: "namespace",
      runtime: rt,
      result: { samples, summary: summarize(samples), server: null, errors },
    });
  }
}

main().catch((e: unknown) => {
  log(`failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
  process.exit(1);
});
