import type { SqlDriver } from "./sql.js";

/**
 * What a set of keys used over a period, from the run records alone (the console's usage page):
 * per key and in total, the calls received, their compute and how many ran at once at most, and
 * the calls refused by the engine by reason (a run with an `error_code`).
 *
 * Compute is a run's own `duration_ms` (its sandbox's time for that call) and that times its
 * `memory_mb`: sandbox-seconds and GB-seconds (1 GB = 1024 MB). A session's idle time between its
 * calls is in neither. Concurrency counts runs between their start and their end (one still
 * running ends now); two runs that only touch (one ends as the other starts) never overlap.
 */
export interface UsagePeriod {
  keyIds: readonly string[];
  /** ms since the epoch; runs received in [since, until). */
  since: number;
  until: number;
  /** What an unfinished run's end is taken to be (ms). */
  now: number;
}

export interface UsageFigures {
  calls: number;
  sandbox_seconds: number;
  gb_seconds: number;
  peak_concurrency: number;
  /** error_code → how many. */
  refusals: Record<string, number>;
}

export interface UsageReport {
  per_key: (UsageFigures & { key_id: string })[];
  total: UsageFigures;
}

const none = (): UsageFigures => ({
  calls: 0,
  sandbox_seconds: 0,
  gb_seconds: 0,
  peak_concurrency: 0,
  refusals: {},
});

/** Three decimals: a figure a person reads, the same on both stores. */
const round3 = (n: number) => Math.round(n * 1000) / 1000;

/**
 * The peak of runs at once: each run is a +1 at its start and a -1 at its end, summed in time
 * order (an end before a start at the same instant); the running sum's maximum, per key or over
 * all of them.
 */
function peakSql(where: string, perKey: boolean): string {
  const events = (t: string, d: number) =>
    `SELECT key_id, ${t} AS t, ${d} AS d FROM runs WHERE ${where} AND started_at IS NOT NULL`;
  const over = perKey ? "PARTITION BY key_id ORDER BY t, d" : "ORDER BY t, d";
  return `SELECT ${perKey ? "key_id, " : ""}MAX(n) AS peak FROM (
      SELECT key_id, SUM(d) OVER (${over} ROWS UNBOUNDED PRECEDING) AS n FROM (
        ${events("started_at", 1)} UNION ALL ${events("COALESCE(finished_at, ?)", -1)}
      ) e
    ) c${perKey ? " GROUP BY key_id" : ""}`;
}

export async function usageReport(sql: SqlDriver, p: UsagePeriod): Promise<UsageReport> {
  if (p.keyIds.length === 0) return { per_key: [], total: none() };
  const where = `key_id IN (${p.keyIds.map(() => "?").join(", ")}) AND received_at >= ? AND received_at < ?`;
  const w = [...p.keyIds, p.since, p.until];
  const [sums, refused, peaks, peak] = await Promise.all([
    sql.all<Record<string, unknown>>(
      `SELECT key_id, COUNT(*) AS calls, COALESCE(SUM(duration_ms), 0) AS ms,
              COALESCE(SUM(CAST(duration_ms AS BIGINT) * memory_mb), 0) AS mb_ms
         FROM runs WHERE ${where} GROUP BY key_id`,
      w,
    ),
    sql.all<Record<string, unknown>>(
      `SELECT key_id, error_code, COUNT(*) AS n FROM runs
         WHERE ${where} AND error_code IS NOT NULL GROUP BY key_id, error_code`,
      w,
    ),
    sql.all<Record<string, unknown>>(peakSql(where, true), [...w, p.now, ...w]),
    sql.get<Record<string, unknown>>(peakSql(where, false), [...w, p.now, ...w]),
  ]);
  const byKey = new Map<string, UsageFigures & { key_id: string }>();
  const of = (id: unknown) => {
    const key = String(id);
    let f = byKey.get(key);
    if (!f) byKey.set(key, (f = { key_id: key, ...none() }));
    return f;
  };
  const total = none();
  for (const r of sums) {
    const f = of(r.key_id);
    f.calls = Number(r.calls);
    f.sandbox_seconds = round3(Number(r.ms) / 1000);
    f.gb_seconds = round3(Number(r.mb_ms) / 1024 / 1000);
    total.calls += f.calls;
    total.sandbox_seconds += Number(r.ms);
    total.gb_seconds += Number(r.mb_ms);
  }
  total.sandbox_seconds = round3(total.sandbox_seconds / 1000);
  total.gb_seconds = round3(total.gb_seconds / 1024 / 1000);
  for (const r of refused) {
    const code = String(r.error_code);
    of(r.key_id).refusals[code] = Number(r.n);
    total.refusals[code] = (total.refusals[code] ?? 0) + Number(r.n);
  }
  for (const r of peaks) of(r.key_id).peak_concurrency = Number(r.peak ?? 0);
  total.peak_concurrency = Number(peak?.peak ?? 0);
  return {
    per_key: [...byKey.values()].sort((a, b) => a.key_id.localeCompare(b.key_id)),
    total,
  };
}
