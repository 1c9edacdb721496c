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

/** p25, p50 and p75 of samples, to 0.1 ms. */
export type Quartiles = { p25: number; p50: number; p75: number };

/**
 * Two sides (two builds, two images) measured one call at a time, alternating, the order flipping
 * each round so both see the same machine; five calls each first as warm-up, `pauseMs` after each
 * call (the pool refills). Returns each side's quartiles per runtime.
 */
export async function alternate<S extends string, R extends string>(
  sides: readonly [S, S],
  runtimes: readonly R[],
  call: (side: S, runtime: R) => Promise<number>,
  rounds: number,
  pauseMs: number,
): Promise<Record<R, Record<S, Quartiles>>> {
  const [a, b] = sides;
  const q = (v: number[], p: number) =>
    Math.round(
      quantile(
        [...v].sort((x, y) => x - y),
        p,
      ) * 10,
    ) / 10;
  const report = {} as Record<R, Record<S, Quartiles>>;
  for (const runtime of runtimes) {
    for (let i = 0; i < 5; i++) for (const s of sides) await call(s, runtime);
    const samples = { [a]: [], [b]: [] } as unknown as Record<S, number[]>;
    for (let i = 0; i < rounds; i++) {
      for (const s of i % 2 ? [b, a] : [a, b]) {
        samples[s].push(await call(s, runtime));
        await new Promise((r) => setTimeout(r, pauseMs));
      }
    }
    const of = (v: number[]) => ({ p25: q(v, 0.25), p50: q(v, 0.5), p75: q(v, 0.75) });
    report[runtime] = { [a]: of(samples[a]), [b]: of(samples[b]) } as Record<S, Quartiles>;
  }
  return report;
}
