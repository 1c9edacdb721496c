#!/usr/bin/env node
// `npm run bench:cluster [-- --quick] [--out DIR]`: ScratchRun as a cluster on this one machine
// (namespace backend): the multi-node harness of test/cluster (workers in network namespaces of
// their own, two API replicas, a front door, Postgres). Measures throughput and p50 through the
// front door with 1, 2 and 3 workers (scaling as a ratio to 1), and the dispatch overhead of a
// call: through the front door and straight to an API replica, against calling a worker directly,
// interleaved in one run. Node's fetch keeps connections alive, as real clients and the
// replicas' own dispatch do.
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Cluster, API_ADDRESS, CLI } from "../test/cluster/harness.js";
import { descendants } from "../test/helpers/procs.js";
import { quantile, summarize, type Summary } from "./stats.js";
import { REPO_ROOT } from "./peers.js";

const log = (m: string) =>
  process.stderr.write(`[bench:cluster ${new Date().toISOString().slice(11, 19)}] ${m}\n`);

const { values } = parseArgs({
  options: {
    quick: { type: "boolean" },
    out: { type: "string" },
    // Only the dispatch overhead phase (no results file is written), e.g. with a profile:
    "overhead-only": { type: "boolean" },
    // Each API replica writes a V8 CPU profile into this directory when it exits.
    "cpu-prof": { type: "string" },
    // Replicas reach Postgres through the test harness's TCP proxy (in this process), as the
    // failover test needs, instead of directly.
    "db-proxy": { type: "boolean" },
    rounds: { type: "string" },
    // A/B: the second replica runs another build (DIR/dist/src/bin/scratchrun.js), called
    // directly as a fourth path of every round; with --overhead-only.
    ab: { type: "string" },
  },
});
const QUICK = values.quick ?? false;
const OVERHEAD_ONLY = values["overhead-only"] ?? false;
const OUT = values.out ?? join(REPO_ROOT, "bench", "results");
const WINDOW_MS = QUICK ? 3000 : 15_000;
const OVERHEAD_ROUNDS = Number(values.rounds ?? (QUICK ? 30 : 600));

const WORKLOADS = {
  echo: { runtime: "bash", code: "echo hi" },
  sleep200: { runtime: "bash", code: "sleep 0.2; echo hi" },
} as const;

async function post(url: string, body: unknown, auth: string): Promise<number> {
  const res = await fetch(url, {
    method: "POST",
    headers: { Authorization: `Bearer ${auth}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status !== 200 && process.env.BENCH_DEBUG) log(text.slice(0, 200));
  return res.status;
}

interface LoadResult {
  workers: number;
  workload: string;
  concurrency: number;
  callsPerS: number;
  ok: number;
  refused: number;
  latency: Summary | null;
}

/** Closed loop: `concurrency` clients calling back to back for WINDOW_MS. */
async function load(
  c: Cluster,
  workers: number,
  workload: keyof typeof WORKLOADS,
): Promise<LoadResult> {
  const concurrency = 4 * workers;
  const url = `${c.url}/v1/exec`;
  const lat: number[] = [];
  let ok = 0;
  let refused = 0;
  const end = Date.now() + WINDOW_MS;
  const t0 = Date.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (Date.now() < end) {
        const s = performance.now();
        const status = await post(url, WORKLOADS[workload], c.key);
        if (status === 200) {
          ok++;
          lat.push(performance.now() - s);
        } else {
          refused++;
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    }),
  );
  const seconds = (Date.now() - t0) / 1000;
  return {
    workers,
    workload,
    concurrency,
    callsPerS: Math.round((ok / seconds) * 10) / 10,
    ok,
    refused,
    latency: summarize(lat),
  };
}

/** CPU seconds (user + system) each process has used so far. */
function cpuByPid(pids: number[]): Map<number, number> {
  const out = new Map<number, number>();
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      out.set(pid, (Number(f[11]) + Number(f[12])) / 100); // USER_HZ
    } catch {
      // gone
    }
  }
  return out;
}

/** CPU used since `before` by the processes alive now (new ones from zero; gone ones lost). */
function cpuSince(before: Map<number, number>, now: Map<number, number>): number {
  let s = 0;
  for (const [pid, t] of now) s += t - (before.get(pid) ?? 0);
  return s;
}

/** The postmaster and its children (backends serving the replicas). */
/**
 * The API side (replicas, Postgres, this process and its front door) on the last CPU, the workers
 * and their sandboxes on the others, as in a cluster where API replicas and workers run on
 * different nodes. New processes inherit their parent's CPUs.
 */
/** A process and every process below it (Postgres: the postmaster and its backends). */
const tree = (pid: number) => [pid, ...descendants(pid)];

function pinSides(c: Cluster): void {
  const last = cpus().length - 1;
  const set = (cpuList: string, pids: number[]) => {
    for (const pid of pids)
      spawnSync("taskset", ["-a", "-p", "-c", cpuList, String(pid)], { stdio: "ignore" });
  };
  set(String(last), [
    process.pid,
    ...c.replicas.flatMap((r) => tree(r.proc!.child.pid!)),
    ...tree(c.pgServer.pid),
  ]);
  set(
    `0-${Math.max(0, last - 1)}`,
    c.workers.flatMap((w) => tree(w.proc!.child.pid!)),
  );
  log(`pinned: API side on CPU ${last}, workers on 0-${Math.max(0, last - 1)}`);
}

/** The median of `d` with a distribution-free 95% interval (order statistics, binomial ranks). */
export function medianWithInterval(d: readonly number[]): { p50: number; lo: number; hi: number } {
  const s = [...d].sort((a, b) => a - b);
  const n = s.length;
  const half = 1.96 * Math.sqrt(n) * 0.5;
  const r = (x: number | undefined) => Math.round((x ?? Number.NaN) * 100) / 100;
  return {
    p50: r(quantile(s, 0.5)),
    lo: r(s[Math.max(0, Math.floor(n / 2 - half))]),
    hi: r(s[Math.min(n - 1, Math.ceil(n / 2 + half))]),
  };
}

/**
 * Sequential calls in rounds: each round calls every path once, in an order rotated from
 * round to round, so drift and position hit each path alike. The overhead is the median of the
 * per-round differences (API path − worker directly): a busy moment inflates both calls of a
 * round, not one path's median.
 */
async function overhead(c: Cluster, pinned: boolean) {
  const worker = c.workers[0]!;
  const replica = c.replicas[0]!;
  c.publishWorkers([worker]);
  await c.waitWorkersUp(1);
  const paths = {
    direct: async () =>
      post(
        `http://${worker.addr}/v1/worker/exec`,
        { run_id: "bench", replica_id: "bench", request: { ...WORKLOADS.echo } },
        c.token,
      ),
    replica: () => post(`http://${API_ADDRESS}:${replica.port}/v1/exec`, WORKLOADS.echo, c.key),
    front: () => post(`${c.url}/v1/exec`, WORKLOADS.echo, c.key),
    ...(values.ab
      ? {
          other: () =>
            post(`http://${API_ADDRESS}:${c.replicas[1]!.port}/v1/exec`, WORKLOADS.echo, c.key),
        }
      : {}),
  };
  // A worker fresh from its start is still filling its pools (pre-imported Python jails take
  // seconds of CPU each): measure once they are full, not against that.
  const warm = async () => {
    const res = await fetch(`http://${worker.addr}/v1/worker/status`, {
      headers: { Authorization: `Bearer ${c.token}` },
    });
    const s = (await res.json()) as { warm: Record<string, { ready: number; target: number }> };
    return Object.values(s.warm).every((w) => w.ready >= w.target);
  };
  for (const end = Date.now() + 120_000; !(await warm()) && Date.now() < end;)
    await new Promise((r) => setTimeout(r, 500));
  type Path = "direct" | "replica" | "front" | "other";
  const names = Object.keys(paths) as Path[];
  const samples: Record<Path, number[]> = { direct: [], replica: [], front: [], other: [] };
  const diffs = { replica: [] as number[], front: [] as number[], other: [] as number[] };
  for (const p of Object.values(paths)) for (let i = 0; i < 20; i++) await p(); // warm up
  if (pinned) pinSides(c);
  // CPU the replicas and Postgres spend on the calls that go through them (all but direct), which
  // a busy host does not inflate the way it inflates wall-clock differences.
  const replicaPids = c.replicas.map((r) => r.proc!.child.pid!);
  const cpu0 = { replicas: cpuByPid(replicaPids), pg: cpuByPid(tree(c.pgServer.pid)) };
  const load = { start: loadavg()[0]!, end: 0 };
  let failed = 0;
  for (let i = 0; i < OVERHEAD_ROUNDS; i++) {
    const round: Partial<Record<Path, number>> = {};
    for (let j = 0; j < names.length; j++) {
      const name = names[(i + j) % names.length]!;
      const s = performance.now();
      const status = await (paths as Record<Path, () => Promise<number>>)[name]();
      if (status === 200) round[name] = performance.now() - s;
      else {
        failed++;
        log(`${name}: HTTP ${status}`);
      }
    }
    for (const name of names) if (round[name] !== undefined) samples[name].push(round[name]);
    if (round.direct === undefined) continue;
    if (round.replica !== undefined) diffs.replica.push(round.replica - round.direct);
    if (round.front !== undefined) diffs.front.push(round.front - round.direct);
    if (round.other !== undefined) diffs.other.push(round.other - round.direct);
  }
  load.end = loadavg()[0]!;
  const apiCalls = samples.replica.length + samples.front.length + samples.other.length;
  const cpuPerCallMs = {
    replicas: Math.round((cpuSince(cpu0.replicas, cpuByPid(replicaPids)) / apiCalls) * 10000) / 10,
    postgres:
      Math.round((cpuSince(cpu0.pg, cpuByPid(tree(c.pgServer.pid))) / apiCalls) * 10000) / 10,
  };
  const summary = Object.fromEntries(
    Object.entries(samples).map(([k, v]) => [k, summarize(v)]),
  ) as Record<Path, Summary | null>;
  const p50 = (k: Path) => summary[k]?.p50 ?? Number.NaN;
  return {
    rounds: OVERHEAD_ROUNDS,
    pinned,
    failed,
    load,
    summary,
    /** Median of the paired per-round differences, with its 95% interval. */
    dispatch: medianWithInterval(diffs.replica),
    frontDoor: medianWithInterval(diffs.front),
    other: diffs.other.length ? medianWithInterval(diffs.other) : null,
    /** The old measure, kept for comparison: difference of the two paths' medians. */
    dispatchMedianDiffMs: Math.round((p50("replica") - p50("direct")) * 10) / 10,
    frontDoorMedianDiffMs: Math.round((p50("front") - p50("direct")) * 10) / 10,
    cpuPerCallMs,
  };
}

async function main() {
  const startedAt = new Date();
  const load1 = loadavg()[0]!;
  log("starting 3 workers, 2 API replicas, Postgres");
  const c = await Cluster.start({
    workers: 3,
    replicas: 2,
    worker: { maxConcurrent: 2, maxQueued: 2, poolSize: 2 },
    databaseDirect: !values["db-proxy"],
    ...(values.ab
      ? { replicaClis: ["", join(values.ab, "dist/src/bin/scratchrun.js")].map((x) => x || CLI) }
      : {}),
    ...(values["cpu-prof"]
      ? { replicaNodeArgs: ["--cpu-prof", `--cpu-prof-dir=${values["cpu-prof"]}`] }
      : {}),
  });
  const results: LoadResult[] = [];
  let over: Awaited<ReturnType<typeof overhead>>;
  let pinned: Awaited<ReturnType<typeof overhead>>;
  const say = (o: typeof over) =>
    log(
      `p50 direct ${o.summary.direct?.p50} ms, replica ${o.summary.replica?.p50} ms, front door ${o.summary.front?.p50} ms; paired overhead ${o.dispatch.p50} ms [${o.dispatch.lo}, ${o.dispatch.hi}], front door ${o.frontDoor.p50} ms; CPU/call replicas ${o.cpuPerCallMs.replicas} ms, Postgres ${o.cpuPerCallMs.postgres} ms${o.other ? `; the other build's replica: ${o.other.p50} ms [${o.other.lo}, ${o.other.hi}]` : ""}`,
    );
  try {
    for (const n of OVERHEAD_ONLY ? [] : [1, 2, 3]) {
      c.publishWorkers(c.workers.slice(0, n));
      await c.waitWorkersUp(n);
      for (const w of Object.keys(WORKLOADS) as (keyof typeof WORKLOADS)[]) {
        const r = await load(c, n, w);
        log(
          `${n} worker(s) ${w}: ${r.callsPerS} calls/s, p50 ${r.latency?.p50} ms, ${r.refused} refused`,
        );
        results.push(r);
      }
    }
    log("dispatch overhead, every process on every CPU");
    over = await overhead(c, false);
    say(over);
    log("dispatch overhead, the API side and the workers on separate CPUs");
    pinned = await overhead(c, true);
    say(pinned);
  } finally {
    await c.close();
  }
  if (OVERHEAD_ONLY) return;
  const base = (w: string) => results.find((r) => r.workers === 1 && r.workload === w)!.callsPerS;
  const rows = results.map(
    (r) =>
      `| ${r.workload} | ${r.workers} | ${r.concurrency} | ${r.callsPerS} | ${(r.callsPerS / base(r.workload)).toFixed(2)}× | ${r.latency?.p50} ±${((r.latency?.iqr ?? 0) / 2).toFixed(1)} | ${r.refused} |`,
  );
  const md = `# Cluster benchmark (\`npm run bench:cluster${QUICK ? " -- --quick" : ""}\`)

${startedAt.toISOString().slice(0, 16).replace("T", " ")} UTC, ${cpus().length} × ${cpus()[0]?.model ?? "?"}, Node ${process.version}; 1-min load ${load1.toFixed(1)} at start, ${loadavg()[0]!.toFixed(1)} at end.
Namespace backend; every worker (2 slots, 2 queue places, a pool of 2 jails) in its own network
namespace behind a veth link; 2 API replicas with Postgres (${values["db-proxy"] ? "through the harness's TCP proxy in the benchmark's own process (`--db-proxy`)" : "reached directly, as a Service forwards in the kernel; `--db-proxy` puts the failover test's TCP proxy between them"}); calls through a TCP front door. All of
it shares this machine's ${cpus().length} cores, so more workers add slots, not CPUs.

## Throughput through the front door (closed loop, ${WINDOW_MS / 1000} s per row, 4 clients per worker)

| workload | workers | clients | calls/s | vs 1 worker | p50 ±½IQR ms | refused (429) |
| --- | ---: | ---: | ---: | ---: | ---: | ---: |
${rows.join("\n")}

\`echo\` is bash \`echo hi\` (CPU-bound on this host: the jail, the agent and three node processes
per call); \`sleep200\` is \`sleep 0.2; echo hi\` (bound by slots: what a cluster adds).

## Dispatch overhead (sequential, ${over.rounds} rounds per configuration; bash \`echo hi\`)

Each round calls the three paths once, one after another, in an order rotated from round to
round. Two configurations, one after the other: every process free to run on every CPU (the
API side competes with the worker's sandboxes, as it would if both ran on one node), then the API
side (replicas, Postgres, this benchmark and its front door) pinned to one CPU and the workers
with their sandboxes to the other, as in a cluster where they run on different nodes.

| configuration | path | p50 ms | ±½IQR | p90 ms |
| --- | --- | ---: | ---: | ---: |
${[over, pinned]
  .flatMap((x) => {
    const o = x.summary;
    const where = x.pinned ? "separate CPUs" : "shared CPUs";
    const row = (name: string, v: Summary | null) =>
      `| ${where} | ${name} | ${v?.p50} | ${((v?.iqr ?? 0) / 2).toFixed(1)} | ${v?.p90} |`;
    return [
      row("worker directly (`POST /v1/worker/exec`)", o.direct),
      row("API replica (key, quota, records in Postgres, dispatch)", o.replica),
      row("front door → API replica", o.front),
    ];
  })
  .join("\n")}

Dispatch overhead per call, the median of the per-round differences (API replica − worker
directly), with its 95% interval (target ≤ 3 ms p50):

| configuration | API replica | front door | difference of medians | CPU per call: replicas, Postgres | failed calls | 1-min load |
| --- | ---: | ---: | ---: | ---: | ---: | ---: |
${[over, pinned]
  .map(
    (x) =>
      `| ${x.pinned ? "separate CPUs" : "shared CPUs"} | **${x.dispatch.p50} ms** [${x.dispatch.lo}, ${x.dispatch.hi}] | ${x.frontDoor.p50} ms [${x.frontDoor.lo}, ${x.frontDoor.hi}] | ${x.dispatchMedianDiffMs} ms | ${x.cpuPerCallMs.replicas} ms, ${x.cpuPerCallMs.postgres} ms | ${x.failed} | ${x.load.start.toFixed(1)} → ${x.load.end.toFixed(1)} |`,
  )
  .join("\n")}

CPU per call is from /proc over the ${over.rounds * 2} calls of each configuration that went through a
replica, including the replicas' status polls meanwhile.
`;
  mkdirSync(OUT, { recursive: true });
  const name = QUICK ? "cluster-quick" : "cluster-latest";
  writeFileSync(join(OUT, `${name}.md`), md);
  writeFileSync(
    join(OUT, `${name}.json`),
    JSON.stringify(
      { startedAt, quick: QUICK, results, overhead: over, overheadPinned: pinned },
      null,
      2,
    ) + "\n",
  );
  process.stdout.write(md);
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    process.stderr.write(`${e instanceof Error ? e.stack : String(e)}\n`);
    process.exit(1);
  },
);
