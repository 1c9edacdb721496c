/**
 * The agent-shaped sessions workload (issue 27): load a ~20 MB CSV, then 10 analysis steps, each
 * returning a PNG. (a) 11 fresh calls, each re-sending the data and re-reading it; (b) one
 * session: start, one call that sends and reads the data, 10 cells that use what it read, end.
 * Both through the MCP stdio client, on each backend; plus `print(1)` as a fresh call and as a
 * session's cell.
 *
 * A call's files are capped at 5 MiB each (LIMITS.files), so the CSV travels gzip-compressed in
 * `files` (as an agent would have to send it) and pandas reads the .gz directly. A fresh call
 * waits, untimed, for its pool to be full first (its best case); the totals are the sums of the
 * calls' own times.
 */
import { gzipSync } from "node:zlib";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import type { SessionArm, SessionsBackend, SessionsResults } from "./results.js";
import { summarize } from "./stats.js";
import type { McpSystem } from "./systems/scratchrun.js";
import { salesCsv } from "./workloads.js";

export interface SessionsPlan {
  /** Rows of the CSV: 620 000 is ~20 MB. */
  rows: number;
  /** print(1) calls per side. */
  printN: number;
  /** Analysis steps each arm runs (the first of STEPS; all ten but in the smoke). */
  steps: number;
}

/** Rows of the issue's ~20 MB CSV (20.2 MB; 4.7 MiB gzipped). */
export const SESSIONS_ROWS = 620_000;

const RUNTIME = "python3.11";

const LOAD = [
  "import pandas as pd",
  "import matplotlib",
  'matplotlib.use("Agg")',
  "import matplotlib.pyplot as plt",
  'df = pd.read_csv("sales.csv.gz", parse_dates=["date"], dtype={"category": "category", "region": "category"})',
  'df["month"] = df["date"].dt.month',
].join("\n");

/** The ten analysis steps: each draws one figure from `df`, saves it and prints one number. */
export const STEPS: readonly string[] = [
  'ax = df.groupby("category", observed=True)["amount"].sum().sort_values().plot.barh(title="revenue by category")',
  'ax = df.groupby("region", observed=True)["units"].sum().plot.bar(title="units by region")',
  'ax = df.groupby("month")["amount"].sum().plot(marker="o", title="revenue by month")',
  'ax = df["amount"].plot.hist(bins=50, title="order amounts")',
  'ax = df.sample(5000, random_state=1).plot.scatter(x="units", y="amount", s=2, title="units against amount")',
  'ax = df.boxplot(column="amount", by="region")',
  'p = df.pivot_table(index="category", columns="region", values="amount", aggfunc="mean", observed=True)\nfig, ax = plt.subplots()\nax.imshow(p.values)\nax.set_title("mean amount, category by region")',
  'ax = df.groupby("date")["amount"].sum().cumsum().plot(title="cumulative revenue")',
  'ax = df.groupby(["category", "region"], observed=True)["amount"].sum().nlargest(5).plot.bar(title="top 5")',
  'ax = df.groupby("date")["amount"].sum().rolling(7).mean().plot(title="7-day mean revenue")',
].map(
  (draw, i) =>
    `${draw}\nplt.gcf().savefig("step${i + 1}.png", dpi=72)\nplt.close("all")\nprint("step", ${i + 1}, len(df))`,
);

/** The data, as every arm sends it. */
export function sessionsData(rows: number): { csvBytes: number; gzip: Buffer } {
  const csv = salesCsv(rows);
  return { csvBytes: Buffer.byteLength(csv), gzip: gzipSync(csv, { level: 9 }) };
}

interface Outcome {
  ok: boolean;
  ms: number;
  sent: number;
  received: number;
  error?: string;
  structured?: Record<string, unknown>;
}

/** One tools/call, timed, its argument and result bytes counted. */
async function timedTool(
  system: McpSystem,
  name: string,
  args: Record<string, unknown>,
  check: (s: Record<string, unknown>) => string | null,
): Promise<Outcome> {
  const sent = Buffer.byteLength(JSON.stringify(args));
  const t0 = performance.now();
  let r: CallToolResult;
  try {
    r = await system.tool(name, args);
  } catch (e) {
    const ms = performance.now() - t0;
    return { ok: false, ms, sent, received: 0, error: e instanceof Error ? e.message : String(e) };
  }
  const ms = performance.now() - t0;
  const received = Buffer.byteLength(JSON.stringify(r));
  const s = (r.structuredContent ?? {}) as Record<string, unknown>;
  const text = r.content
    .map((b) => (b.type === "text" ? b.text : ""))
    .join("\n")
    .slice(0, 300);
  if (r.isError) return { ok: false, ms, sent, received, error: text };
  const bad = check(s);
  return bad
    ? { ok: false, ms, sent, received, error: `${bad}: ${text}` }
    : { ok: true, ms, sent, received, structured: s };
}

/** The result of an exec is right: exit 0, the line printed, the PNG returned. */
function stepCheck(step: number, rows: number) {
  return (s: Record<string, unknown>): string | null => {
    const stdout = String(s.stdout ?? "");
    const want = step === 0 ? `loaded ${rows}` : `step ${step} ${rows}`;
    if (s.exit_code !== 0 || !stdout.includes(want))
      return `exit ${String(s.exit_code)}, stdout ${JSON.stringify(stdout.slice(0, 100))}, stderr ${JSON.stringify(String(s.stderr ?? "").slice(-300))}`;
    if (step === 0) return null;
    const files = (s.files ?? []) as { path: string; status: string; size_bytes: number }[];
    const png = files.find((f) => f.path.endsWith(`step${step}.png`));
    return png?.status === "ok" && png.size_bytes > 1000
      ? null
      : `no PNG: ${JSON.stringify(files)}`;
  };
}

function arm(outcomes: Outcome[]): SessionArm {
  const firstError = outcomes.find((o) => !o.ok)?.error;
  const r = (x: number) => Math.round(x);
  return {
    calls: outcomes.length,
    totalMs: r(outcomes.reduce((a, o) => a + o.ms, 0)),
    bytesSent: outcomes.reduce((a, o) => a + o.sent, 0),
    bytesReceived: outcomes.reduce((a, o) => a + o.received, 0),
    callMs: outcomes.map((o) => r(o.ms)),
    codeMs: outcomes.map((o) =>
      typeof o.structured?.duration_ms === "number" ? o.structured.duration_ms : null,
    ),
    errors: outcomes.filter((o) => !o.ok).length,
    ...(firstError ? { firstError: firstError.slice(0, 500) } : {}),
  };
}

const execArgs = (code: string, extra: Record<string, unknown> = {}) => ({
  runtime: RUNTIME,
  code,
  network: "none",
  timeout_ms: 30_000,
  ...extra,
});

/** (a) 11 fresh calls: each sends the data, reads it, and (but the first) draws its step. */
async function freshArm(
  system: McpSystem,
  gzip: Buffer,
  rows: number,
  steps: number,
): Promise<SessionArm> {
  const files = { "sales.csv.gz": { base64: gzip.toString("base64") } };
  const out: Outcome[] = [];
  for (let step = 0; step <= steps; step++) {
    await system.waitWarm(300_000);
    const code =
      step === 0 ? `${LOAD}\nprint("loaded", len(df))` : `${LOAD}\n${STEPS[step - 1] ?? ""}`;
    const args = execArgs(code, {
      files,
      ...(step > 0 ? { return_files: [`step${step}.png`] } : {}),
    });
    out.push(await timedTool(system, "scratchrun_exec", args, stepCheck(step, rows)));
    if (!out[out.length - 1]?.ok) break;
  }
  return arm(out);
}

/** (b) One session: start, the load (the only call with the data), 10 cells, end. */
async function sessionArm(
  system: McpSystem,
  gzip: Buffer,
  rows: number,
  steps: number,
): Promise<SessionArm> {
  const out: Outcome[] = [];
  const start = await timedTool(
    system,
    "scratchrun_session_start",
    { runtime: RUNTIME, network: "none" },
    (s) => (typeof s.session_id === "string" ? null : "no session_id"),
  );
  out.push(start);
  const id = start.structured?.session_id;
  if (typeof id !== "string") return arm(out);
  try {
    for (let step = 0; step <= steps; step++) {
      const args = execArgs(
        step === 0 ? `${LOAD}\nprint("loaded", len(df))` : (STEPS[step - 1] ?? ""),
        step === 0
          ? { session_id: id, files: { "sales.csv.gz": { base64: gzip.toString("base64") } } }
          : { session_id: id, return_files: [`step${step}.png`] },
      );
      out.push(await timedTool(system, "scratchrun_exec", args, stepCheck(step, rows)));
      if (!out[out.length - 1]?.ok) break;
    }
  } finally {
    out.push(await timedTool(system, "scratchrun_session_end", { session_id: id }, () => null));
  }
  return arm(out);
}

/** print(1): n fresh calls (each into a full pool), then n cells of one session (untimed start). */
async function printPair(
  system: McpSystem,
  n: number,
): Promise<{ fresh: number[]; cell: number[]; error?: string }> {
  const check = (s: Record<string, unknown>) =>
    String(s.stdout ?? "").trim() === "1" ? null : `stdout ${JSON.stringify(s.stdout)}`;
  const fresh: number[] = [];
  const cell: number[] = [];
  let error: string | undefined;
  for (let i = 0; i <= n; i++) {
    await system.waitWarm(300_000);
    const o = await timedTool(system, "scratchrun_exec", execArgs("print(1)"), check);
    if (!o.ok) error ??= o.error;
    else if (i > 0) fresh.push(o.ms);
  }
  const r = await system.tool("scratchrun_session_start", { runtime: RUNTIME, network: "none" });
  const id = (r.structuredContent as { session_id?: string } | undefined)?.session_id;
  if (!id) return { fresh, cell, error: `session_start: ${JSON.stringify(r.content)}` };
  try {
    // The first cell starts the session's interpreter: untimed, as a fresh call's warm-up is.
    for (let i = 0; i <= n; i++) {
      const o = await timedTool(
        system,
        "scratchrun_exec",
        execArgs("print(1)", { session_id: id }),
        check,
      );
      if (!o.ok) error ??= o.error;
      else if (i > 0) cell.push(o.ms);
    }
  } finally {
    await system.tool("scratchrun_session_end", { session_id: id });
  }
  return { fresh, cell, ...(error ? { error } : {}) };
}

/** The phase on one started server. */
export async function sessionsOfBackend(
  system: McpSystem,
  backend: "namespace" | "microvm",
  plan: SessionsPlan,
  gzip: Buffer,
  log: (m: string) => void,
): Promise<SessionsBackend> {
  const pair = await printPair(system, plan.printN);
  const freshPrint = summarize(pair.fresh);
  const sessionPrint = summarize(pair.cell);
  log(
    `sessions ${backend} print(1): fresh p50 ${freshPrint?.p50 ?? "-"} ms, session cell p50 ${sessionPrint?.p50 ?? "-"} ms${pair.error ? ` (${pair.error.slice(0, 200)})` : ""}`,
  );
  const fresh = await freshArm(system, gzip, plan.rows, plan.steps);
  log(
    `sessions ${backend} fresh: ${fresh.totalMs} ms, ${fresh.bytesSent} bytes sent, errors ${fresh.errors}${fresh.firstError ? ` ${fresh.firstError.slice(0, 200)}` : ""}`,
  );
  const session = await sessionArm(system, gzip, plan.rows, plan.steps);
  log(
    `sessions ${backend} session: ${session.totalMs} ms, ${session.bytesSent} bytes sent, errors ${session.errors}${session.firstError ? ` ${session.firstError.slice(0, 200)}` : ""}`,
  );
  return { backend, fresh, session, freshPrint, sessionPrint };
}

/** The phase: each backend's server started, measured and closed in turn. */
export async function benchSessions(
  systems: readonly { backend: "namespace" | "microvm"; system: McpSystem }[],
  plan: SessionsPlan,
  log: (m: string) => void,
): Promise<SessionsResults> {
  const { csvBytes, gzip } = sessionsData(plan.rows);
  const backends: SessionsBackend[] = [];
  for (const { backend, system } of systems) {
    log(`sessions ${backend}: starting`);
    try {
      await system.start();
    } catch (e) {
      backends.push({
        backend,
        unsupported: `failed to start here: ${e instanceof Error ? e.message : String(e)}`,
      });
      continue;
    }
    try {
      backends.push(await sessionsOfBackend(system, backend, plan, gzip, log));
    } catch (e) {
      const why = `failed: ${e instanceof Error ? e.message : String(e)}; server said: ${system.log().slice(-300)}`;
      log(`sessions ${backend}: ${why}`);
      backends.push({ backend, unsupported: why });
    } finally {
      await system.close();
    }
  }
  return {
    csvBytes,
    gzipBytes: gzip.length,
    rows: plan.rows,
    steps: plan.steps,
    printN: plan.printN,
    backends,
  };
}
