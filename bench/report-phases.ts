import type { BenchResults, BurstResult, SessionArm } from "./results.js";
import type { PlotSteps } from "./plot-steps.js";
import type { Summary } from "./stats.js";
import { sessionsBound, sessionsSpeedup } from "./targets.js";

const ms = (s: Summary | null | undefined, q: "p50" | "p99") =>
  s ? String(Math.round(s[q])) : "–";

const LABELS: Record<string, string> = {
  host: "bare host (chroot)",
  bwrap: "raw bubblewrap",
  "srt-lib": "sandbox-runtime library",
  "srt-cli": "sandbox-runtime CLI (srt)",
  namespace: "ScratchRun namespace",
  engine: "ScratchRun namespace engine, in-process (no MCP)",
  microvm: "ScratchRun microVM",
  "namespace-baseline": "ScratchRun namespace, baseline build",
  "microvm-baseline": "ScratchRun microVM, baseline build",
  "microvm-kept": "ScratchRun microVM, templates kept from an earlier start",
};
export const systemLabel = (id: string) => LABELS[id] ?? id;

function fates(b: BurstResult): string {
  const others = Object.entries(b.otherStatus).map(([s, n]) => `${n}× HTTP ${s}`);
  return [
    `${b.answered} answered`,
    ...(b.refused ? [`${b.refused} × 429 (${b.refusedWithRetryAfter} with Retry-After)`] : []),
    ...(b.wrong ? [`${b.wrong} wrong`] : []),
    ...others,
    `${b.lost} lost`,
  ].join(", ");
}

/** The time-to-interactive table: one row per system and command. */
export function ttiTable(r: BenchResults): string[] {
  const t = r.tti;
  if (!t) return [];
  const cores = r.host.cpus;
  // Runs before the host's CPU was measured per call have no such column.
  const withCpu = t.rows.some((row) => row.hostCpuMsPerCall !== undefined);
  const cpuHead = withCpu ? ` host CPU per sequential call, ms (÷ ${cores} cores) |` : "";
  return [
    `| system | command | sequential p50 ms | sequential p99 ms |${cpuHead} burst of ${t.burstN}: p50 ms | p99 ms | burst's calls |`,
    `| --- | --- | ---: | ---: |${withCpu ? " ---: |" : ""} ---: | ---: | --- |`,
    ...t.rows.map((row) => {
      if (row.unsupported)
        return `| ${systemLabel(row.system)} | \`${row.command}\` | n/a | |${withCpu ? " |" : ""} | | ${row.unsupported} |`;
      const s = row.sequential?.summary;
      const b = row.burst;
      const errs = row.sequential?.errors ? ` ⚠ ${row.sequential.errors} errors` : "";
      const cpu =
        row.hostCpuMsPerCall === undefined
          ? "–"
          : `${row.hostCpuMsPerCall} (${Math.round(row.hostCpuMsPerCall / cores)})`;
      return `| ${systemLabel(row.system)} | \`${row.command}\` | ${ms(s, "p50")}${errs} | ${ms(s, "p99")} |${withCpu ? ` ${cpu} |` : ""} ${ms(b?.latency, "p50")} | ${ms(b?.latency, "p99")} | ${b ? fates(b) : "–"} |`;
    }),
  ];
}

const mb = (bytes: number) => `${(bytes / 1e6).toFixed(1)} MB`;
const sec = (a: SessionArm | undefined) =>
  a ? `${(a.totalMs / 1000).toFixed(1)} s${a.errors ? ` ⚠ ${a.errors} errors` : ""}` : "–";

/** The sessions workload: both arms per backend, and print(1) as a fresh call and as a cell. */
export function sessionsTable(r: BenchResults): string[] {
  const s = r.sessions;
  if (!s) return [];
  const nsFresh = s.backends.find((b) => b.backend === "namespace")?.freshPrint?.p50;
  const rows = s.backends.map((b) => {
    if (b.unsupported) return `| ${b.backend} | n/a | | | | | | | | ${b.unsupported} |`;
    const x = sessionsSpeedup(r, b.backend);
    const cell = b.sessionPrint?.p50;
    const vsNs =
      cell !== undefined && nsFresh !== undefined
        ? `${Math.round((cell / nsFresh) * 100) / 100}×`
        : "–";
    const bound = sessionsBound(r, b.backend);
    return `| ${b.backend} | ${sec(b.fresh)} | ${b.fresh ? mb(b.fresh.bytesSent) : "–"} | ${sec(b.session)} | ${b.session ? mb(b.session.bytesSent) : "–"} | ${x === undefined ? "–" : `${x}×`} | ${bound === undefined ? "–" : `${bound}×`} | ${ms(b.freshPrint, "p50")} | ${ms(b.sessionPrint, "p50")} | ${vsNs} |`;
  });
  return [
    `| backend | ${s.steps + 1} fresh calls | sent | one session | sent | session faster by | at most (its code's time alone) | fresh \`print(1)\` p50 ms | session cell p50 ms | cell ÷ namespace fresh |`,
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...rows,
  ];
}

/** The first two minutes after start: per server and runtime, its first call and p50s. */
export function firstMinutesTable(r: BenchResults): string[] {
  const f = r.firstMinutes;
  if (!f) return [];
  return [
    "| server | pools full after | runtime | first call ms | first 2 min p50 ms (n) | settled p50 ms (n) | ratio |",
    "| --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ...f.servers.flatMap((s) => {
      if (s.unsupported) return [`| ${systemLabel(s.system)} | | | n/a | | | ${s.unsupported} |`];
      const full = s.poolsFullMs === null ? "–" : `${(s.poolsFullMs / 1000).toFixed(1)} s`;
      return s.runtimes.map((rt) => {
        const errs = rt.errors ? ` ⚠ ${rt.errors} errors` : "";
        return `| ${systemLabel(s.system)} | ${full} | ${rt.runtime} | ${rt.first ? Math.round(rt.first.ms) : "–"} | ${ms(rt.window, "p50")} (${rt.window?.n ?? 0})${errs} | ${ms(rt.settled, "p50")} (${rt.settled?.n ?? 0}) | ${rt.ratio === null ? "–" : `${rt.ratio}×`} |`;
      });
    }),
  ];
}

/** A runtime's first calls back to back: per system, each call's p50 and the calls together. */
export function firstCallsTable(r: BenchResults): string[] {
  const f = r.firstCalls;
  if (!f) return [];
  const calls = Array.from({ length: f.plan.calls }, (_, i) => i);
  return [
    `| server | ${calls.map((i) => `call ${i + 1} p50 ms (n)`).join(" | ")} | all ${f.plan.calls} p50 ms |`,
    `| --- | ${calls.map(() => "---:").join(" | ")} | ---: |`,
    ...f.systems.map((s) => {
      if (s.unsupported)
        return `| ${systemLabel(s.system)} | ${calls.map(() => "").join(" | ")} | ${s.unsupported} |`;
      const errs = s.errors ? ` ⚠ ${s.errors} errors` : "";
      return `| ${systemLabel(s.system)} | ${s.byCall.map((c) => `${ms(c, "p50")} (${c?.n ?? 0})`).join(" | ")} | ${ms(s.together, "p50")}${errs} |`;
    }),
  ];
}

const n1 = (x: number | null | undefined) =>
  x === null || x === undefined ? "–" : String(Math.round(x));

/** The product page's plot, step by step: the host and the microVM, and their ratio. */
export function plotTable(r: BenchResults): string[] {
  const p = r.plot;
  if (!p) return [];
  const [h, m] = [
    p.systems.find((s) => s.system === "host"),
    p.systems.find((s) => s.system !== "host"),
  ];
  const row = (name: string, f: (s: PlotSteps) => number | null) => {
    const a = h ? f(h) : null;
    const b = m ? f(m) : null;
    const q = a && b ? `${Math.round((b / a) * 10) / 10}×` : "–";
    return `| ${name} | ${n1(a)} | ${n1(b)} | ${q} |`;
  };
  return [
    "| step (p50 ms) | bare host | microVM (TCG) | ratio |",
    "| --- | ---: | ---: | ---: |",
    row("the example verbatim, as the client waits", (s) => s.verbatimMs),
    row(
      "interpreter start-up and imports: CPU (pre-imported: before the call)",
      (s) => s.startupCpuMs,
    ),
    row("plotting (linspace, plot): wall", (s) => s.plotMs),
    row("plotting: CPU", (s) => s.plotCpuMs),
    row("savefig (PNG render and write): wall", (s) => s.savefigMs),
    row("savefig: CPU", (s) => s.savefigCpuMs),
    row(
      "sandbox (clone resumed, agent, file read) / host: process, interpreter, imports",
      (s) => s.sandboxMs,
    ),
    row("transfer (MCP, PNG as base64)", (s) => s.transferMs),
    row("timed variant, as the client waits", (s) => s.timedMs),
    row("PNG bytes", (s) => s.pngBytes),
  ];
}

/** The markdown sections of the phases, for the run's report. */
export function phaseSections(r: BenchResults): string[] {
  const out: string[] = [];
  if (r.tti)
    out.push(
      "## Time to interactive (the peers' method): a fresh sandbox runs one command",
      "",
      `${r.tti.sequentialN} calls in sequence (each starts when the last returns), then ${r.tti.burstN} at once. ScratchRun's sequential calls go through the MCP stdio client (a bash call whose code is the command), its burst through the same server's REST API (one pooled bash sandbox, the engine's default admission: 4 running, 64 queued; the key's quota set never to refuse). The host, bubblewrap and sandbox-runtime start a process per call and refuse nothing. A burst's latency is from the burst's start to each answer.`,
      "",
      ...ttiTable(r),
      "",
    );
  if (r.firstMinutes) {
    const f = r.firstMinutes;
    out.push(
      "## The first two minutes after start (issue 30)",
      "",
      `Each server started fresh (stdio, the MCP SDK's client, the product's default pooling and pre-imports); each runtime's \`print(1)\` called once every ${f.everyMs / 1000} s (the runtimes' calls spread over that) from the client's connection until ${f.windowMs / 1000} s after the server was spawned, then, once every pool was full, for ${f.settledMs / 1000} s more ("settled"). Ratio: the first two minutes' p50 ÷ the settled p50 (target ≤ 1.5×).`,
      "",
      ...firstMinutesTable(r),
      "",
    );
  }
  if (r.firstCalls) {
    const f = r.firstCalls;
    out.push(
      "## A runtime's first calls, back to back (issue 30)",
      "",
      `Each server started fresh ${f.plan.rounds} times (the product's default pooling and pre-imports); in each, every runtime (${f.plan.runtimes.join(", ")}) got ${f.plan.calls} \`print(1)\` calls in a row, each made when the last answered. p50 per call over the runtimes and rounds.`,
      "",
      ...firstCallsTable(r),
      "",
    );
  }
  if (r.plot) {
    const p = r.plot;
    const k = p.kvmPredictionMs;
    out.push(
      "## The product page's plot, step by step (issue 30)",
      "",
      `The page's example verbatim (${p.runtime}, numpy and matplotlib, the PNG returned inline) and the same statements with timers between them, ${p.n} calls each, ${p.gapMs / 1000} s apart, on the bare host and on the microVM (its ${p.runtime} pooled, pre-imports on).`,
      "",
      ...plotTable(r),
      "",
      k
        ? `Predicted under KVM: ${k.low}–${k.high} ms p50. ${p.method}`
        : "No KVM prediction (a step was not measured).",
      "",
    );
  }
  if (r.secrets) {
    const s = r.secrets;
    out.push(
      "## Brokered secrets: an HTTPS request through the broker against a direct one",
      "",
      `One python3.11 call per backend (bench/secrets.ts), ${s.requests} new HTTPS connections with one GET each per side, alternating, timed inside the sandbox, to the same test server: direct to an allowlisted name the proxy splices end to end, brokered to the name the secret is bound to (TLS terminated with the call's CA, the placeholder replaced, sent on over the proxy's kept-alive upstream connection).`,
      "",
      "| backend | direct p50 (ms) | brokered p50 (ms) | added p50 (ms) | ratio | note |",
      "|---|---|---|---|---|---|",
      ...s.backends.map((b) => {
        const x = b.direct && b.brokered ? (b.brokered.p50 / b.direct.p50).toFixed(2) : "–";
        return `| ${b.backend} | ${b.direct?.p50 ?? "–"} | ${b.brokered?.p50 ?? "–"} | ${b.addedP50Ms ?? "–"} | ${x} | ${b.error ?? ""} |`;
      }),
      "",
    );
  }
  if (r.sessions) {
    const s = r.sessions;
    out.push(
      "## Sessions: an agent's analysis, fresh calls against one session",
      "",
      `A ${mb(s.csvBytes)} CSV (${s.rows} rows, generated deterministically; sent as a ${(s.gzipBytes / 2 ** 20).toFixed(1)} MiB gzip, since a call's files are capped at 5 MiB each), read by pandas (python3.11), then ${s.steps} analysis steps each returning a PNG. Fresh: ${s.steps + 1} calls, each sending and reading the data (each into a full pool). Session: start, one call sending and reading the data, ${s.steps} cells, end. Times are the sums of the calls' own times; "sent" is the JSON of the tool arguments. \`print(1)\`: ${s.printN} fresh calls and ${s.printN} cells of one session.`,
      "",
      ...sessionsTable(r),
      "",
      "Each call's time (ms):",
      "",
      ...s.backends.flatMap((b) => {
        const c = b.session?.callMs ?? [];
        const f = b.fresh?.callMs ?? [];
        if (!c.length && !f.length) return [];
        // The code's own time in the sandbox, where the run recorded it.
        const code = (a: (number | null)[] | undefined) =>
          a?.length ? ` (code ${a.map((v) => v ?? "–").join(", ")})` : "";
        return [
          `- ${b.backend}: fresh ${f.join(", ")}${code(b.fresh?.codeMs)}; session: start ${c[0] ?? "–"}, load ${c[1] ?? "–"}, steps ${c.slice(2, -1).join(", ")}, end ${c[c.length - 1] ?? "–"}${code(b.session?.codeMs?.slice(1, -1))}.`,
        ];
      }),
      "",
    );
  }
  return out;
}
