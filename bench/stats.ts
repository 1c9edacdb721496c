/** Summary of repeated measurements: order statistics, never a single run. */
export interface Summary {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  min: number;
  max: number;
  /** Interquartile range (p75 - p25): the spread shown next to every median. */
  iqr: number;
}

/** Linear-interpolated quantile of sorted values (q in [0, 1]). */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const pos = (sorted.length - 1) * Math.min(1, Math.max(0, q));
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  const a = sorted[lo] ?? Number.NaN;
  const b = sorted[hi] ?? a;
  return a + (b - a) * (pos - lo);
}

export function summarize(samples: readonly number[]): Summary | null {
  const s = samples.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return null;
  const r = (x: number) => Math.round(x * 10) / 10;
  return {
    n: s.length,
    p50: r(quantile(s, 0.5)),
    p90: r(quantile(s, 0.9)),
    p99: r(quantile(s, 0.99)),
    min: r(s[0] ?? Number.NaN),
    max: r(s[s.length - 1] ?? Number.NaN),
    iqr: r(quantile(s, 0.75) - quantile(s, 0.25)),
  };
}

/** a / b rounded to 2 decimals, or null when either side is missing. */
export function ratio(a: number | undefined, b: number | undefined): number | null {
  if (a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || b <= 0)
    return null;
  return Math.round((a / b) * 100) / 100;
}
