#!/usr/bin/env node
// `npm run bench [-- --quick | --smoke] [--out DIR] [--only id,id] [--with tti,sessions,first-minutes,first-calls,plot] [--tti-n N]
// [--tti-burst N] [--burst-n N] [--burst-systems id,id] [--sessions-mb N] [--tti-systems id,id] [--baseline OTHER/dist/bench/server.js]`:
// measures ScratchRun end to end through the MCP stdio client,
// side by side with the floor and the peers, in one run on one machine.
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { cpus, hostname, loadavg, release, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { findRootfs } from "../src/images/locate.js";
import type { Manifest } from "../src/images/manifest.js";
import { normaliseDistribution } from "../src/images/preimport.js";
import { RUNTIMES, type RuntimeName } from "../src/schema/exec.js";
import { measureLatency, measureThroughput } from "./measure.js";
import { FULL, QUICK, SMOKE, runtimesFor, samplesFor, workloadsFor, type Plan } from "./plan.js";
import { hwmKb, idleCost, treeRssSampler } from "./proc.js";
import { REPO_ROOT } from "./peers.js";
import { renderMarkdown } from "./report-md.js";
import { renderSvg } from "./report-svg.js";
import { benchSessions, SESSIONS_ROWS } from "./sessions.js";
import { benchTti } from "./tti.js";
import { benchBurst, renderBurstMarkdown } from "./burst.js";
import { benchFirstMinutes } from "./first-minutes.js";
import { benchInputs, renderInputsMarkdown, type InputsResults } from "./inputs.js";
import { benchFirstCalls, primeTemplates } from "./first-calls.js";
import { benchPlot } from "./plot-steps.js";
import { summarize } from "./stats.js";
import type { BenchResults, HostInfo, IdleServer } from "./results.js";
import { engineInProcess } from "./systems/engine-inproc.js";
import { hostFloor, rawBwrap } from "./systems/floor.js";
import { pyodide } from "./systems/pyodide.js";
import { srtCli, srtLibrary } from "./systems/sandbox-runtime.js";
import { BENCH_SERVER, mcpSystem, type McpSystem } from "./systems/scratchrun.js";
import type { BenchSystem } from "./systems/types.js";
import { printWorkload, workloadFor, type Workload } from "./workloads.js";
import { benchSecrets } from "./secrets.js";
import { settingsFrom } from "../src/schema/settings/values.js";

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
  return {
    // Every server measured builds its own microVM templates, unless a phase keeps them.
    SCRATCHRUN_TEMPLATE_CACHE: "off",
    ...Object.fromEntries(
      Object.entries(process.env).filter(
        (e): e is [string, string] => e[0].startsWith("SCRATCHRUN_") && e[1] !== undefined,
      ),
    ),
  };
}

function workloadsOf(plan: Plan, system: BenchSystem): Workload[] {
  const out: Workload[] = [];
  for (const rt of runtimesFor(plan, system.id))
    for (const id of workloadsFor(plan, system.id)) {
      const w = workloadFor(id, rt);
      if (w) out.push(w);
    }
  return out;
}

/** Why the image cannot run this workload (a runtime without the packages it needs), or null. */
function missingPackages(manifest: Manifest, w: Workload): string | null {
  const have = new Set(
    Object.keys(manifest.runtimes[w.runtime].packages ?? {}).map(normaliseDistribution),
  );
  const missing = (w.needs ?? []).filter((d) => !have.has(normaliseDistribution(d)));
  if (missing.length === 0) return null;
  return `${w.runtime} in this image has no ${missing.join(", ")} (${manifest.python312PackagesFrom === "none" && w.runtime === "python3.12" ? "no wheelhouse and no PyPI at build time" : "not installed"})`;
}

function namespaceSystem(plan: Plan, idle = false, era: "legacy" | "modern" = "legacy"): McpSystem {
  return mcpSystem({
    id: era === "legacy" ? "namespace" : "namespace-2026",
    label:
      era === "legacy"
        ? "ScratchRun namespace (MCP)"
        : "ScratchRun namespace (MCP 2026-07-28 client, stateless)",
    era,
    script: BENCH_SERVER,
    env: {
      ...scratchrunEnv(),
      SCRATCHRUN_ISOLATION: "namespace",
      SCRATCHRUN_NETWORK: "none",
      ...(idle ? { BENCH_IDLE_MS: String(plan.idleWindowMs) } : {}),
    },
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
  plan: Plan,
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
  const sizes = Object.entries(pool).map(([rt, n]) => `${rt}=${n}`);
  return mcpSystem({
    id,
    label: labels[id],
    script: BENCH_SERVER,
    env: {
      ...scratchrunEnv(),
      SCRATCHRUN_ISOLATION: "microvm",
      SCRATCHRUN_NETWORK: "none",
      SCRATCHRUN_POOL_SIZE: sizes.length ? sizes.join(",") : "0",
      SCRATCHRUN_POOL_MODE: id === "microvm-nopool" ? "boot" : "restore",
      BENCH_TEMPLATES: JSON.stringify(templates),
      // The empty-pool and boot-per-call systems measure print only: no pre-imported templates.
      ...(id === "microvm"
        ? { BENCH_IDLE_MS: String(plan.idleWindowMs) }
        : { SCRATCHRUN_PREIMPORT: "0" }),
    },
    skip: (w) =>
      pooled && (pool[w.runtime] ?? 0) === 0 ? `no pooled VM for ${w.runtime} in this plan` : null,
  });
}

/**
 * The isolation a microVM server said it runs with (its start-up line): the run's header says
 * TCG or KVM from it, not from /dev/kvm, which may exist where no guest can run on it.
 */
function noteIsolation(system: McpSystem, results: BenchResults): void {
  const iso = /isolation (microvm-\w+)/.exec(system.log())?.[1];
  if (iso) results.host.microvmIsolation = iso;
}

/**
 * The time-to-interactive server of a backend: its REST API on too (the burst), one pooled bash
 * sandbox (the product's default size, for the one runtime the phase calls), no pre-imports.
 */
function ttiServer(backend: "namespace" | "microvm", baseline?: string): McpSystem {
  return mcpSystem({
    id: baseline ? `${backend}-baseline` : backend,
    label: baseline ? `ScratchRun ${backend}, baseline build` : `ScratchRun ${backend}`,
    script: baseline ?? BENCH_SERVER,
    env: {
      ...scratchrunEnv(),
      SCRATCHRUN_ISOLATION: backend,
      SCRATCHRUN_NETWORK: "none",
      SCRATCHRUN_POOL_SIZE: "bash=1",
      SCRATCHRUN_PREIMPORT: "0",
      BENCH_REST: "1",
    },
  });
}

/**
 * The burst phase's server of a backend and network mode (issue 57): its REST API on, the
 * engine's admission as the plan says (serve's --max-concurrent, --max-queued), one pooled bash
 * sandbox, no pre-imports, the templates a microVM server built before kept (its start is not
 * what the phase measures).
 */
function burstServer(
  backend: "namespace" | "microvm",
  network: "none" | "public",
  plan: Plan["burst"],
): McpSystem {
  return mcpSystem({
    id: `${backend}-${network}`,
    label: `ScratchRun ${backend}, network ${network}`,
    script: BENCH_SERVER,
    env: {
      ...scratchrunEnv(),
      SCRATCHRUN_TEMPLATE_CACHE: "on",
      SCRATCHRUN_ISOLATION: backend,
      SCRATCHRUN_NETWORK: network,
      SCRATCHRUN_POOL_SIZE: "bash=1",
      SCRATCHRUN_PREIMPORT: "0",
      BENCH_REST: "1",
      BENCH_MAX_CONCURRENT: String(plan.maxConcurrent),
      BENCH_MAX_QUEUED: String(plan.maxQueued),
      // An operator's ready-network depth passed on (decision 0019 measures 24 against 120).
      ...(process.env.SCRATCHRUN_NET_READY
        ? { SCRATCHRUN_NET_READY: process.env.SCRATCHRUN_NET_READY }
        : {}),
    },
  });
}

/**
 * The first-two-minutes server of a backend as a user runs it: the product's default pooling and
 * pre-imports (no SCRATCHRUN_POOL_SIZE), started fresh; another build's with `baseline`.
 */
function firstMinutesServer(backend: "namespace" | "microvm", baseline?: string): McpSystem {
  return mcpSystem({
    id: baseline ? `${backend}-baseline` : backend,
    label: baseline ? `ScratchRun ${backend}, baseline build` : `ScratchRun ${backend}`,
    script: baseline ?? BENCH_SERVER,
    env: { ...scratchrunEnv(), SCRATCHRUN_ISOLATION: backend, SCRATCHRUN_NETWORK: "none" },
  });
}

/**
 * A restarted microVM server: the templates an earlier start built and kept (one untimed start
 * that calls each runtime once and waits for the saves), in a directory of its own.
 */
async function keptMicrovm(
  runtimes: readonly RuntimeName[],
  log: (m: string) => void,
): Promise<{ system: McpSystem; cleanup(): void }> {
  const dir = mkdtempSync(join(tmpdir(), "sr-bench-templates-"));
  const system = mcpSystem({
    id: "microvm-kept",
    label: "ScratchRun microVM, templates kept from an earlier start",
    script: BENCH_SERVER,
    env: {
      ...scratchrunEnv(),
      SCRATCHRUN_ISOLATION: "microvm",
      SCRATCHRUN_NETWORK: "none",
      SCRATCHRUN_TEMPLATE_CACHE: dir,
    },
  });
  const cleanup = () => rmSync(dir, { recursive: true, force: true });
  try {
    await primeTemplates(system, runtimes, dir, log);
  } catch (e) {
    cleanup();
    throw e;
  }
  return { system, cleanup };
}

/** The sessions workload's server: python3.11 pooled (one, pre-imports on), as by default. */
function sessionsServer(backend: "namespace" | "microvm"): McpSystem {
  return mcpSystem({
    id: backend,
    label: `ScratchRun ${backend}`,
    script: BENCH_SERVER,
    env: {
      ...scratchrunEnv(),
      SCRATCHRUN_ISOLATION: backend,
      SCRATCHRUN_NETWORK: "none",
      SCRATCHRUN_POOL_SIZE: "python3.11=1",
    },
  });
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      quick: { type: "boolean", default: false },
      // One call per cell, for the test suite: everything runs, nothing is measured (plan.ts).
      smoke: { type: "boolean", default: false },
      out: { type: "string", default: join(REPO_ROOT, "bench/results") },
      only: { type: "string" },
      with: { type: "string" },
      "tti-n": { type: "string" },
      "tti-burst": { type: "string" },
      // The burst phase's size (issue 57): sandboxes asked for at once.
      "burst-n": { type: "string" },
      // The burst phase's servers to measure (default all four: namespace-none, namespace-public,
      // microvm-none, microvm-public); raw bubblewrap is always beside them.
      "burst-systems": { type: "string" },
      "sessions-mb": { type: "string" },
      // The time-to-interactive systems to measure (default all).
      "tti-systems": { type: "string" },
      // Another build's dist/bench/server.js, measured beside this one in the phases that
      // compare builds (time to interactive, the first two minutes) as `<backend>-baseline`.
      baseline: { type: "string" },
    },
  });
  const base = values.smoke ? SMOKE : values.quick ? QUICK : FULL;
  /** A quick or smoke run: its phases only when named, its files named for its mode. */
  const short = base.mode !== "full";
  const count = (v: string | undefined, name: string, fallback: number) => {
    if (v === undefined) return fallback;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be an integer >= 1`);
    return n;
  };
  const plan: Plan = {
    ...base,
    tti: {
      sequentialN: count(values["tti-n"], "tti-n", base.tti.sequentialN),
      burstN: count(values["tti-burst"], "tti-burst", base.tti.burstN),
    },
    burst: { ...base.burst, n: count(values["burst-n"], "burst-n", base.burst.n) },
    sessions: {
      ...base.sessions,
      rows: values["sessions-mb"]
        ? Math.round((count(values["sessions-mb"], "sessions-mb", 20) * SESSIONS_ROWS) / 20)
        : base.sessions.rows,
    },
  };
  const only = values.only ? new Set(values.only.split(",")) : null;
  const baseline = values.baseline;
  if (baseline !== undefined && !existsSync(baseline))
    throw new Error(`--baseline ${baseline}: no such file (another build's dist/bench/server.js)`);
  const extra = new Set(values.with ? values.with.split(",") : []);
  // The phases (tti, sessions) run in a full run unless --only leaves them out; in a quick or
  // smoke run only when named.
  const phase = (name: string) => (only ? only.has(name) : !short || extra.has(name));
  const started = Date.now();
  const rootfs = findRootfs(settingsFrom(process.env).images);
  if (!rootfs.ok) throw new Error(`runtime image missing: ${rootfs.error}`);
  const work = mkdtempSync(join(tmpdir(), "scratchrun-bench-work-"));
  let inputs: InputsResults | undefined;
  const results: BenchResults = {
    format: 1,
    date: new Date().toISOString(),
    mode: plan.mode,
    args: process.argv.slice(2),
    host: hostInfo(),
    systems: [],
    latency: [],
    cold: [],
    throughput: [],
    cost: { peakTreeRssMb: {}, serverHwmMb: {}, poolKinds: {} },
    notes: [],
    durationSec: 0,
  };
  const systems: BenchSystem[] = [
    hostFloor(rootfs.dir, rootfs.manifest),
    rawBwrap(rootfs.dir, rootfs.manifest, join(work, "bwrap")),
    namespaceSystem(plan, true),
    namespaceSystem(plan, false, "modern"),
    engineInProcess({
      ...scratchrunEnv(),
      SCRATCHRUN_ISOLATION: "namespace",
      SCRATCHRUN_NETWORK: "none",
    }),
    microvmSystem(plan, "microvm", plan.microvmPool),
    microvmSystem(plan, "microvm-empty", {}, runtimesFor(plan, "microvm-empty")),
    microvmSystem(plan, "microvm-nopool", {}),
    srtCli(join(work, "srt-cli")),
    srtLibrary(join(work, "srt-lib")),
    pyodide("node"),
    pyodide("deno"),
  ].filter((s) => !only || only.has(s.id));
  try {
    const inTurn = async (list: BenchSystem[]) => {
      for (const system of list) await benchSystem(system, plan, results, rootfs.manifest);
    };
    if (plan.lanes === 2) {
      const vm = systems.filter((s) => s.id.startsWith("microvm"));
      const lanes = await Promise.allSettled([
        inTurn(vm),
        inTurn(systems.filter((s) => !vm.includes(s))),
      ]);
      for (const lane of lanes) if (lane.status === "rejected") throw lane.reason;
    } else await inTurn(systems);
    if (!only || only.has("namespace")) await benchCold(plan, results);
    if (!only || only.has("idle")) await benchIdleServers(plan, results);
    // A phase that fails is a note in the results, not a lost run.
    const attempt = async (name: string, f: () => Promise<void>) => {
      try {
        await f();
      } catch (e) {
        const why = e instanceof Error ? (e.stack ?? e.message) : String(e);
        log(`${name} failed: ${why}`);
        results.notes.push(`${name} phase failed: ${why.slice(0, 500)}`);
      }
    };
    const ttiOnly = values["tti-systems"] ? new Set(values["tti-systems"].split(",")) : null;
    if (phase("tti"))
      await attempt("tti", async () => {
        const vm = ttiServer("microvm");
        results.tti = await benchTti(
          [
            hostFloor(rootfs.dir, rootfs.manifest),
            rawBwrap(rootfs.dir, rootfs.manifest, join(work, "tti-bwrap")),
            srtLibrary(join(work, "tti-srt-lib")),
            srtCli(join(work, "tti-srt-cli")),
            ttiServer("namespace"),
            ...(baseline ? [ttiServer("namespace", baseline)] : []),
            // The same namespace engine called in this process: the namespace row's difference
            // to it is what the MCP stdio transport and the SDK's client cost a call.
            engineInProcess({
              ...scratchrunEnv(),
              SCRATCHRUN_ISOLATION: "namespace",
              SCRATCHRUN_NETWORK: "none",
              SCRATCHRUN_POOL_SIZE: "bash=1",
              SCRATCHRUN_PREIMPORT: "0",
            }),
            vm,
            ...(baseline ? [ttiServer("microvm", baseline)] : []),
          ].filter((s) => !ttiOnly || ttiOnly.has(s.id)),
          plan.tti,
          log,
        );
        noteIsolation(vm, results);
      });
    if (phase("first-minutes"))
      await attempt("first-minutes", async () => {
        const kept = await keptMicrovm(RUNTIMES, log);
        try {
          results.firstMinutes = await benchFirstMinutes(
            [
              ...(["namespace", "microvm"] as const).flatMap((b) => [
                firstMinutesServer(b),
                ...(baseline ? [firstMinutesServer(b, baseline)] : []),
              ]),
              kept.system,
            ],
            plan.firstMinutes,
            log,
          );
          noteIsolation(kept.system, results);
        } finally {
          kept.cleanup();
        }
      });
    if (phase("first-calls"))
      await attempt("first-calls", async () => {
        const kept = await keptMicrovm(plan.firstCalls.runtimes, log);
        try {
          results.firstCalls = await benchFirstCalls(
            [
              firstMinutesServer("microvm"),
              kept.system,
              ...(baseline ? [firstMinutesServer("microvm", baseline)] : []),
            ],
            plan.firstCalls,
            log,
          );
          noteIsolation(kept.system, results);
        } finally {
          kept.cleanup();
        }
      });
    if (phase("plot"))
      await attempt("plot", async () => {
        results.plot = await benchPlot(
          {
            host: hostFloor(rootfs.dir, rootfs.manifest),
            // The product's python3.12 as a user gets it: pooled, its pre-imports on.
            microvm: mcpSystem({
              id: "microvm",
              label: "ScratchRun microVM",
              script: BENCH_SERVER,
              env: {
                ...scratchrunEnv(),
                SCRATCHRUN_ISOLATION: "microvm",
                SCRATCHRUN_NETWORK: "none",
                SCRATCHRUN_POOL_SIZE: "python3.12=1",
              },
            }),
          },
          plan.plot,
          log,
        );
      });
    if (phase("secrets"))
      await attempt("secrets", async () => {
        results.secrets = await benchSecrets(["namespace", "microvm"], plan.secrets, log);
      });
    // n inputs in one call against n calls in a row, both backends (issue 53).
    if (phase("inputs"))
      await attempt("inputs", async () => {
        inputs = await benchInputs(
          ["namespace", "microvm"],
          { n: 16, rounds: short ? 1 : 3 },
          scratchrunEnv(),
          log,
        );
      });
    if (phase("sessions"))
      await attempt("sessions", async () => {
        results.sessions = await benchSessions(
          (["namespace", "microvm"] as const).map((backend) => ({
            backend,
            system: sessionsServer(backend),
          })),
          plan.sessions,
          log,
        );
      });
    if (phase("burst"))
      await attempt("burst", async () => {
        const burstOnly = values["burst-systems"]
          ? new Set(values["burst-systems"].split(","))
          : null;
        results.burst = await benchBurst(
          (["namespace", "microvm"] as const)
            .flatMap((backend) =>
              (["none", "public"] as const).map((network) => ({
                system: burstServer(backend, network, plan.burst),
                network,
              })),
            )
            .filter((s) => !burstOnly || burstOnly.has(s.system.id)),
          rawBwrap(rootfs.dir, rootfs.manifest, join(work, "burst-bwrap")),
          plan.burst,
          log,
        );
      });
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  results.durationSec = Math.round((Date.now() - started) / 1000);
  if (results.host.loadAvg) results.host.loadAvg.end = loadavg()[0] ?? 0;
  mkdirSync(values.out, { recursive: true });
  if (!short) results.baseline = previousRun(values.out, results.host.hostname);
  const suffix = short ? `-${plan.mode}` : "";
  const day = results.date.slice(0, 10);
  const jsonPath = join(values.out, `${day}-${results.host.hostname}${suffix}.json`);
  writeFileSync(jsonPath, `${JSON.stringify(results, null, 1)}\n`);
  if (inputs) {
    const how = `\`npm run bench\`'s inputs phase, ${results.date}: see bench/README.md.`;
    writeFileSync(join(values.out, `${day}-inputs${suffix}.md`), renderInputsMarkdown(inputs, how));
    writeFileSync(
      join(values.out, `${day}-inputs${suffix}.json`),
      `${JSON.stringify(inputs, null, 1)}\n`,
    );
  }
  const md = renderMarkdown(results);
  writeFileSync(join(values.out, `latest${suffix}.md`), md);
  writeFileSync(join(values.out, `latest${suffix}.svg`), renderSvg(results));
  if (results.burst)
    writeFileSync(join(values.out, `${day}-burst${suffix}.md`), renderBurstMarkdown(results.burst));
  process.stdout.write(`${md}\n${jsonPath}\n`);
}

/**
 * The previous full run on this host in `dir` (newest by its own date), for the "nothing got
 * slower" comparison: its print p50 per system and runtime.
 */
function previousRun(dir: string, host: string): BenchResults["baseline"] {
  let best: BenchResults | null = null;
  let file = "";
  for (const name of readdirSync(dir)) {
    if (!name.endsWith(`-${host}.json`)) continue;
    try {
      const r = JSON.parse(readFileSync(join(dir, name), "utf8")) as BenchResults;
      if (r.mode === "full" && (!best || r.date > best.date)) {
        best = r;
        file = name;
      }
    } catch {
      // not a results file
    }
  }
  if (!best) return undefined;
  const print: Record<string, number> = {};
  for (const row of best.latency)
    if (row.workload === "print" && row.result?.summary)
      print[`${row.system}/${row.runtime}`] = row.result.summary.p50;
  return { file, date: best.date, print };
}

/** Waits until a system's pools are full and settled, if it has any. */
function warmer(system: BenchSystem): ((ms: number) => Promise<boolean>) | null {
  return "waitWarm" in system
    ? (ms) => (system as { waitWarm(ms: number): Promise<boolean> }).waitWarm(ms)
    : null;
}

async function benchSystem(
  system: BenchSystem,
  plan: Plan,
  results: BenchResults,
  manifest: Manifest,
): Promise<void> {
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
    const mcp = "idleCost" in system ? (system as McpSystem) : null;
    const wait = warmer(system);
    if (mcp) noteIsolation(mcp, results);
    if (mcp && (system.id === "microvm" || system.id === "namespace"))
      await measurePool(mcp, plan, t0, results);
    for (const w of workloads) {
      const why = missingPackages(manifest, w) ?? system.unsupported(w);
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
      const before = wait ? async () => void (await wait(120_000)) : undefined;
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

/**
 * Once the system's pool is first full: how long that took (microVM) and what each kind of pooled
 * sandbox costs while it waits (the server measures it, bench/server.ts BENCH_IDLE_MS).
 */
async function measurePool(
  mcp: McpSystem,
  plan: Plan,
  t0: number,
  results: BenchResults,
): Promise<void> {
  const full = await mcp.waitWarm(300_000);
  const seconds = (Date.now() - t0) / 1000;
  if (!full) {
    results.notes.push(
      `${mcp.id} pool did not fill in 300 s (ready: ${JSON.stringify(mcp.poolReady())})`,
    );
    return;
  }
  const kinds = await mcp.idleCost(plan.idleWindowMs + 60_000);
  if (kinds) results.cost.poolKinds[mcp.id] = kinds;
  if (mcp.id !== "microvm") return;
  const vms = Object.values(mcp.poolReady()).reduce((a, rt) => a + (rt?.[1] ?? 0), 0);
  results.cost.poolFill = {
    vms,
    seconds: Math.round(seconds * 10) / 10,
    vmsPerSec: Math.round((vms / seconds) * 100) / 100,
  };
  // Every pooled VM, both flavours together (each kind is in poolKinds).
  const all = Object.values(kinds ?? {});
  const n = all.reduce((a, k) => a + k.sandboxes, 0);
  if (n > 0) {
    const avg = (f: (k: (typeof all)[number]) => number) =>
      Math.round((all.reduce((a, k) => a + f(k) * k.sandboxes, 0) / n) * 10) / 10;
    results.cost.idleVms = {
      processes: n,
      rssMbEach: avg((k) => k.rssMbEach),
      pssMbEach: avg((k) => k.pssMbEach),
      cpuPercentEach: avg((k) => k.cpuPercentEach),
      cpuPercentTotal:
        Math.round(all.reduce((a, k) => a + k.cpuPercentEach * k.sandboxes, 0) * 10) / 10,
    };
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
  const wait = warmer(system);
  for (const c of plan.throughput.concurrency) {
    await wait?.(120_000);
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
      const s = namespaceSystem(plan);
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

/**
 * What a server costs while nobody calls it (issue 24): its whole process tree (server, jails or
 * QEMU processes) once its pools are full and settled, over the idle window; with the default
 * pooling (every runtime 1, python3.13 and node24 kept only once called) and, as the baseline,
 * with every runtime pooled from the start (SCRATCHRUN_POOL_SIZE naming all of them).
 */
async function benchIdleServers(plan: Plan, results: BenchResults): Promise<void> {
  const out: IdleServer[] = [];
  for (const backend of plan.idleServers)
    for (const pooling of ["default", "every runtime"] as const) {
      const system = mcpSystem({
        id: `${backend}-idle`,
        label: `ScratchRun ${backend}, idle (${pooling})`,
        script: BENCH_SERVER,
        env: {
          ...scratchrunEnv(),
          SCRATCHRUN_ISOLATION: backend,
          SCRATCHRUN_NETWORK: "none",
          SCRATCHRUN_POOL_SIZE:
            pooling === "default" ? "1" : RUNTIMES.map((r) => `${r}=1`).join(","),
        },
      });
      const t0 = Date.now();
      log(`idle ${backend} (${pooling}): starting`);
      await system.start();
      try {
        if (!(await system.waitWarm(900_000))) {
          results.notes.push(`idle ${backend} (${pooling}): pools did not fill in 900 s`);
          continue;
        }
        const fillSeconds = Math.round((Date.now() - t0) / 100) / 10;
        const pid = system.rootPids()[0];
        const cost = pid === undefined ? null : await idleCost(pid, () => true, plan.idleWindowMs);
        if (!cost) continue;
        const ready = Object.entries(system.poolReady());
        const row: IdleServer = {
          backend,
          pooling,
          pooledRuntimes: ready.filter(([, rt]) => (rt?.[1] ?? 0) > 0).map(([r]) => r),
          sandboxes: ready.reduce((a, [, rt]) => a + (rt?.[0] ?? 0), 0),
          fillSeconds,
          processes: cost.processes,
          pssMb: Math.round(cost.pssMbEach * cost.processes),
          rssMb: Math.round(cost.rssMbEach * cost.processes),
          cpuPercent: cost.cpuPercentTotal,
        };
        log(`idle ${backend} (${pooling}): ${JSON.stringify(row)}`);
        out.push(row);
      } finally {
        await system.close();
      }
    }
  results.cost.idleServers = out;
}
