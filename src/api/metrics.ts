/**
 * Prometheus metrics in the text exposition format (0.0.4), hand-written: counters by label set,
 * one latency histogram per runtime, and gauges read at scrape time. Labels never carry keys,
 * key names or anything the caller sent besides the runtime.
 */
const BUCKETS_S = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60];

const escape = (v: string) => v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
const labelText = (labels: Record<string, string>) => {
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${escape(v)}"`);
  return parts.length ? `{${parts.join(",")}}` : "";
};

class Counter {
  private readonly values = new Map<string, number>();
  constructor(
    readonly name: string,
    readonly help: string,
  ) {}
  inc(labels: Record<string, string>, by = 1): void {
    const k = labelText(labels);
    this.values.set(k, (this.values.get(k) ?? 0) + by);
  }
  render(): string[] {
    const out = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`];
    for (const [k, v] of this.values) out.push(`${this.name}${k} ${v}`);
    return out;
  }
}

class Histogram {
  private readonly series = new Map<
    string,
    { labels: Record<string, string>; counts: number[]; sum: number; count: number }
  >();
  constructor(
    readonly name: string,
    readonly help: string,
  ) {}
  observe(labels: Record<string, string>, seconds: number): void {
    const k = labelText(labels);
    let s = this.series.get(k);
    if (!s) {
      s = { labels, counts: BUCKETS_S.map(() => 0), sum: 0, count: 0 };
      this.series.set(k, s);
    }
    BUCKETS_S.forEach((le, i) => {
      if (seconds <= le) s.counts[i]!++;
    });
    s.sum += seconds;
    s.count++;
  }
  render(): string[] {
    const out = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    for (const s of this.series.values()) {
      BUCKETS_S.forEach((le, i) =>
        out.push(`${this.name}_bucket${labelText({ ...s.labels, le: String(le) })} ${s.counts[i]}`),
      );
      out.push(`${this.name}_bucket${labelText({ ...s.labels, le: "+Inf" })} ${s.count}`);
      out.push(`${this.name}_sum${labelText(s.labels)} ${s.sum}`);
      out.push(`${this.name}_count${labelText(s.labels)} ${s.count}`);
    }
    return out;
  }
}

export interface GaugeSource {
  name: string;
  help: string;
  read(): { labels: Record<string, string>; value: number }[];
}

export class Metrics {
  readonly calls = new Counter(
    "scratchrun_calls_total",
    "Calls that reached a sandbox, by runtime and exit reason.",
  );
  readonly refused = new Counter(
    "scratchrun_calls_refused_total",
    "Calls refused or failed before a result, by reason (key_concurrency, key_rate, busy, error code).",
  );
  readonly http = new Counter(
    "scratchrun_http_requests_total",
    "HTTP requests by route and status code.",
  );
  readonly latency = new Histogram(
    "scratchrun_call_duration_seconds",
    "Wall-clock time of a call from arrival to result, by runtime.",
  );
  private readonly gauges: GaugeSource[] = [];

  addGauge(g: GaugeSource): void {
    this.gauges.push(g);
  }

  render(): string {
    const lines = [
      ...this.calls.render(),
      ...this.refused.render(),
      ...this.http.render(),
      ...this.latency.render(),
    ];
    for (const g of this.gauges) {
      lines.push(`# HELP ${g.name} ${g.help}`, `# TYPE ${g.name} gauge`);
      for (const { labels, value } of g.read())
        lines.push(`${g.name}${labelText(labels)} ${value}`);
    }
    return lines.join("\n") + "\n";
  }
}
