import { ratio, type Summary } from "./stats.js";
import type { BenchResults, LatencyRow } from "./results.js";
import { phaseSections } from "./report-phases.js";
import { baselineRatios, burst, checkTargets, find, phaseTargets, warmP50 } from "./targets.js";
import { RUNTIMES } from "../src/runtimes/names.js";
import { FULL, QUICK, SMOKE } from "./plan.js";

/** Seconds of the idle window of a run's mode (plan.ts). */
const idleSeconds = (r: BenchResults) =>
  ({ full: FULL, quick: QUICK, smoke: SMOKE })[r.mode].idleWindowMs / 1000;

const fmt = (s: Summary | null | undefined) =>
  s
    ? `${Math.round(s.p50)} (${Math.round(s.p90)} / ${Math.round(s.p99)}, IQR ${Math.round(s.iqr)}, n=${s.n})`
    : "–";
const x = (v: number | null) => (v === null ? "–" : `${v}×`);

function cell(row: LatencyRow | undefined): string {
  if (!row) return "";
  if (row.unsupported) return "n/a";
  const s = row.result?.summary;
  if (!s) return `failed (${row.result?.errors ?? 0} errors)`;
  return `${Math.round(s.p50)} ±${Math.round(s.iqr / 2)}`;
}

/** One workload's p50 per system (rows) and runtime (columns: those the run measured). */
export function glance(r: BenchResults, workload: string): string[] {
  const rows = r.systems.map((s) => ({
    label: s.label,
    cells: RUNTIMES.map((rt) => cell(find(r.latency, s.id, rt, workload))),
  }));
  const cols = RUNTIMES.map((_, i) => i).filter((i) =>
    rows.some((row) => row.cells[i] !== "" && row.cells[i] !== "n/a"),
  );
  const lines = [
    `| system | ${cols.map((i) => RUNTIMES[i]).join(" | ")} |`,
    `| --- | ${cols.map(() => "---:").join(" | ")} |`,
  ];
  for (const row of rows) {
    const cells = cols.map((i) => row.cells[i] ?? "");
    if (cells.every((c) => c === "" || c === "n/a")) continue;
    lines.push(`| ${row.label} | ${cells.join(" | ")} |`);
  }
  return lines;
}

function detail(r: BenchResults): string[] {
  const lines = [
    "| system | runtime | workload | p50 (p90 / p99, IQR, n) ms | × floor | × namespace | × microVM | code duration_ms p50 |",
    "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
  ];
  for (const row of r.latency) {
    if (row.unsupported || !row.result) continue;
    const p = row.result.summary?.p50;
    lines.push(
      `| ${row.system} | ${row.runtime} | ${row.workload} | ${fmt(row.result.summary)}${row.result.errors ? ` ⚠ ${row.result.errors} errors` : ""} | ${x(ratio(p, warmP50(r, "host", row.runtime, row.workload)))} | ${x(ratio(p, warmP50(r, "namespace", row.runtime, row.workload)))} | ${x(ratio(p, warmP50(r, "microvm", row.runtime, row.workload)))} | ${row.result.server ? Math.round(row.result.server.p50) : "–"} |`,
    );
  }
  return lines;
}

/** Where a call's time goes: interpreter start, namespaces, jail + agent + engine, MCP. */
function profile(r: BenchResults): string[] {
  const out: string[] = [];
  const d = (a: number | undefined, b: number | undefined) =>
    a === undefined || b === undefined ? "–" : String(Math.round(a - b));
  for (const rt of RUNTIMES) {
    const floor = warmP50(r, "host", rt);
    const bw = warmP50(r, "bwrap", rt);
    const eng = warmP50(r, "engine", rt);
    const total = warmP50(r, "namespace", rt);
    const code = find(r.latency, "namespace", rt, "print")?.result?.server?.p50;
    if (total === undefined) continue;
    out.push(
      `| namespace | ${rt} | ${floor === undefined ? "–" : Math.round(floor)} | ${d(bw, floor)} | ${d(eng, bw)} | ${d(total, eng)} | ${Math.round(total)} | ${code ?? "–"} |`,
    );
  }
  for (const sys of ["microvm", "microvm-empty", "microvm-nopool"])
    for (const rt of RUNTIMES) {
      const row = find(r.latency, sys, rt, "print")?.result;
      const total = row?.summary?.p50;
      if (total === undefined) continue;
      out.push(
        `| ${sys} | ${rt} | ${d(warmP50(r, "host", rt), 0)} | – | – | – | ${Math.round(total)} | ${row?.server?.p50 ?? "–"} |`,
      );
    }
  if (out.length === 0) return [];
  return [
    "| system | runtime | interpreter start (floor) | + namespaces (bwrap − floor) | + jail, agent, engine (in-process engine − bwrap) | + MCP stdio + SDK client (MCP − engine) | total p50 | code's own duration_ms |",
    "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...out,
  ];
}

/** When, where and under what the run was made: the line every report of it starts with. */
export function runLine(r: BenchResults): string {
  const h = r.host;
  const tcg = h.microvmIsolation ? h.microvmIsolation === "microvm-tcg" : !h.kvm;
  const accel = tcg
    ? "TCG (no usable KVM: code inside the VM runs 10–20× slower than on the host)"
    : `KVM (${h.microvmIsolation ?? "/dev/kvm present"})`;
  return `${r.date.slice(0, 16).replace("T", " ")} UTC on \`${h.hostname}\`: ${h.cpus} × ${h.cpuModel}, ${Math.round(h.memMb / 1024)} GiB, Linux ${h.kernel}, Node ${h.node}, microVM accel ${accel}. Run took ${r.durationSec} s${h.loadAvg ? `; 1-min load average ${h.loadAvg.start.toFixed(1)} at start, ${h.loadAvg.end.toFixed(1)} at end (anything above ${h.cpus} means other work shared the CPUs)` : ""}.`;
}

export function renderMarkdown(r: BenchResults): string {
  const L: string[] = [
    `# ScratchRun benchmark (${r.mode})`,
    "",
    runLine(r),
    "",
    "Every ScratchRun number is end to end through the MCP SDK's stdio client; every row is many runs (median ± half the IQR, ms). Peers run the same code in the same run.",
    "",
    "## Warm latency, `print(1)`-sized code, p50 ± IQR/2 (ms)",
    "",
    ...glance(r, "print"),
    "",
    "## Realistic calls (python3.11: numpy + matplotlib PNG returned; node20: JSON file returned)",
    "",
    ...glance(r, "realistic"),
    "",
    "## The product page's example, verbatim (`import matplotlib.pyplot as plt`, `import numpy as np`, `plt.plot(x, np.sin(x))`, `plt.savefig('/tmp/plot.png')`, the PNG returned)",
    "",
    ...glance(r, "product"),
    "",
    "## pandas: a 1 MB CSV sent in `files`, read, grouped, a bar chart PNG returned",
    "",
    ...glance(r, "pandas"),
    "",
    "## Back-to-back calls: closed loop at concurrency 1, python3.11 `print(1)`",
    "",
    "Calls with no think time (each starts when the last returns), against calls into a full, idle pool.",
    "",
    "| system | idle-pool p50 ms | closed-loop p50 ms | ratio | calls/s |",
    "| --- | ---: | ---: | ---: | ---: |",
    ...["namespace", "microvm"].flatMap((sys) => {
      const b = burst(r, sys);
      return b
        ? [
            `| ${sys} | ${Math.round(b.idle)} | ${Math.round(b.loop)} | ${b.ratio}× | ${b.callsPerSec} |`,
          ]
        : [];
    }),
    "",
    ...phaseSections(r),
    "## Targets",
    "",
    "| target | measured | met |",
    "| --- | --- | :-: |",
    ...[...checkTargets(r), ...phaseTargets(r)].map(
      (t) => `| ${t.target} | ${t.measured} | ${t.met === null ? "–" : t.met ? "yes" : "**no**"} |`,
    ),
    "",
    "## Where the time goes (p50, ms)",
    "",
    ...profile(r),
    "",
    "## Cold start",
    "",
    "| system | runtime | first call p50 (p90 / p99, IQR, n) ms |",
    "| --- | --- | --- |",
    ...r.cold.map(
      (c) => `| ${c.system} (fresh server, first call) | ${c.runtime} | ${fmt(c.result.summary)} |`,
    ),
    ...r.latency
      .filter((row) => row.system === "microvm-empty" && row.workload === "print" && row.result)
      .map(
        (row) =>
          `| microVM, empty pool (a clone restored for the call; template built) | ${row.runtime} | ${fmt(row.result?.summary)} |`,
      ),
    ...r.latency
      .filter((row) => row.system === "microvm-nopool" && row.workload === "print" && row.result)
      .map(
        (row) =>
          `| microVM, no template (cold boot: a runtime's first call after start; naive boot per call) | ${row.runtime} | ${fmt(row.result?.summary)} |`,
      ),
    "",
    "## Throughput, python3.11 `print(1)`, closed loop",
    "",
    "| system | concurrency | calls/s | ok | errors | 429 (BUSY) | latency p50 (p90 / p99) ms |",
    "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ...r.throughput.flatMap((t) =>
      t.runs.map(
        (run) =>
          `| ${t.system} | ${run.concurrency} | ${run.callsPerSec} | ${run.ok} | ${run.errors} | ${run.busy} | ${fmt(run.latency)} |`,
      ),
    ),
    "",
    "## Cost",
    "",
    ...(r.cost.idleVms
      ? [
          `- Idle warm VMs (${r.cost.idleVms.processes} QEMU processes): ${r.cost.idleVms.rssMbEach} MB RSS each, ${r.cost.idleVms.pssMbEach} MB PSS each, ${r.cost.idleVms.cpuPercentEach}% of a core each (${r.cost.idleVms.cpuPercentTotal}% total).`,
        ]
      : ["- Idle warm VMs: not measured."]),
    ...Object.entries(r.cost.poolKinds).flatMap(([sys, kinds]) => [
      "",
      `Idle pooled sandboxes of \`${sys}\`, per kind (runtime/flavour; jails: network mode first), over ${idleSeconds(r)} s:`,
      "",
      "| kind | ready | RSS MB each | PSS MB each | cgroup charge MB each | CPU % of a core each |",
      "| --- | ---: | ---: | ---: | ---: | ---: |",
      ...Object.entries(kinds).map(
        ([k, c]) =>
          `| ${k} | ${c.sandboxes} | ${c.rssMbEach} | ${c.pssMbEach} | ${c.chargeMbEach} | ${c.cpuPercentEach} |`,
      ),
      "",
    ]),
    ...(r.cost.idleServers?.length
      ? [
          "",
          `An idle server once its pools are full (its whole process tree over ${idleSeconds(r)} s): the default pooling keeps python3.13 and node24 only once called; the baseline pools every runtime from the start.`,
          "",
          "| backend | pooling | runtimes pooled | sandboxes ready | pools full after s | processes | PSS MB | RSS MB | CPU % of a core |",
          "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
          ...r.cost.idleServers.map(
            (s) =>
              `| ${s.backend} | ${s.pooling} | ${s.pooledRuntimes.join(", ")} | ${s.sandboxes} | ${s.fillSeconds} | ${s.processes} | ${s.pssMb} | ${s.rssMb} | ${s.cpuPercent} |`,
          ),
          "",
        ]
      : []),
    ...(r.cost.poolFill
      ? [
          `- Pool fill from empty: ${r.cost.poolFill.vms} VMs in ${r.cost.poolFill.seconds} s = ${r.cost.poolFill.vmsPerSec} VMs ready per second.`,
        ]
      : []),
    ...Object.entries(r.cost.peakTreeRssMb).map(
      ([s, mb]) =>
        `- Peak RSS of the ${s} server tree under load: ${mb} MB (server node process VmHWM ${r.cost.serverHwmMb[s] ?? "–"} MB).`,
    ),
    "",
    ...(r.baseline
      ? [
          `## print(1) against the previous full run (${r.baseline.file}, ${r.baseline.date.slice(0, 16).replace("T", " ")} UTC)`,
          "",
          "| system runtime | then p50 ms | now p50 ms | ratio |",
          "| --- | ---: | ---: | ---: |",
          ...baselineRatios(r).map(
            (b) => `| ${b.row} | ${Math.round(b.then)} | ${Math.round(b.now)} | ${b.ratio}× |`,
          ),
          "",
        ]
      : []),
    "## Every measurement, with ratios to the floor and to ScratchRun",
    "",
    ...detail(r),
    "",
    "## Not measurable here",
    "",
    ...[
      ...new Set(
        r.latency
          .filter((row) => row.unsupported)
          .map((row) => `- ${row.system} ${row.runtime} ${row.workload}: ${row.unsupported}`),
      ),
    ],
    ...(r.notes.length ? ["", "## Notes", "", ...r.notes.map((n) => `- ${n}`)] : []),
    "",
  ];
  return L.join("\n");
}
