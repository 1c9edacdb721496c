import type { BenchResults, BurstResult, SessionArm } from "./results.js";
import type { Summary } from "./stats.js";
import { sessionsSpeedup } from "./targets.js";

const ms = (s: Summary | null | undefined, q: "p50" | "p99") =>
  s ? String(Math.round(s[q])) : "–";

const LABELS: Record<string, string> = {
  host: "bare host (chroot)",
  bwrap: "raw bubblewrap",
  "srt-lib": "sandbox-runtime library",
  "srt-cli": "sandbox-runtime CLI (srt)",
  namespace: "ScratchRun namespace",
  microvm: "ScratchRun microVM",
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
  return [
    `| system | command | sequential p50 ms | sequential p99 ms | burst of ${t.burstN}: p50 ms | p99 ms | burst's calls |`,
    "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ...t.rows.map((row) => {
      if (row.unsupported)
        return `| ${systemLabel(row.system)} | \`${row.command}\` | n/a | | | | ${row.unsupported} |`;
      const s = row.sequential?.summary;
      const b = row.burst;
      const errs = row.sequential?.errors ? ` ⚠ ${row.sequential.errors} errors` : "";
      return `| ${systemLabel(row.system)} | \`${row.command}\` | ${ms(s, "p50")}${errs} | ${ms(s, "p99")} | ${ms(b?.latency, "p50")} | ${ms(b?.latency, "p99")} | ${b ? fates(b) : "–"} |`;
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
    if (b.unsupported) return `| ${b.backend} | n/a | | | | | | | ${b.unsupported} |`;
    const x = sessionsSpeedup(r, b.backend);
    const cell = b.sessionPrint?.p50;
    const vsNs =
      cell !== undefined && nsFresh !== undefined
        ? `${Math.round((cell / nsFresh) * 100) / 100}×`
        : "–";
    return `| ${b.backend} | ${sec(b.fresh)} | ${b.fresh ? mb(b.fresh.bytesSent) : "–"} | ${sec(b.session)} | ${b.session ? mb(b.session.bytesSent) : "–"} | ${x === undefined ? "–" : `${x}×`} | ${ms(b.freshPrint, "p50")} | ${ms(b.sessionPrint, "p50")} | ${vsNs} |`;
  });
  return [
    `| backend | 11 fresh calls | sent | one session | sent | session faster by | fresh \`print(1)\` p50 ms | session cell p50 ms | cell ÷ namespace fresh |`,
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...rows,
  ];
}

/** The markdown sections of both phases, for the run's report. */
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
        return [
          `- ${b.backend}: fresh ${f.join(", ")}; session: start ${c[0] ?? "–"}, load ${c[1] ?? "–"}, steps ${c.slice(2, -1).join(", ")}, end ${c[c.length - 1] ?? "–"}.`,
        ];
      }),
      "",
    );
  }
  return out;
}
