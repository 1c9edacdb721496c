/**
 * Prometheus metrics through prom-client: counters by label set, one latency histogram per
 * runtime, gauges read at scrape time, and the process's own (CPU, memory, heap, event-loop lag,
 * handles) from prom-client's default collectors. Labels never carry keys, key names or anything
 * the caller sent besides the runtime.
 *
 * Each server has a registry of its own (tests and the cluster run several in one process); the
 * process metrics live in one shared registry, collected once per process, and are merged in at
 * scrape time.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";

const BUCKETS_S = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60];

export interface GaugeSource {
  name: string;
  help: string;
  /** The label names every value carries (none by default). */
  labelNames?: readonly string[];
  read(): { labels: Record<string, string>; value: number }[];
}

let processRegistry: Registry | undefined;

/** The process's own metrics, collected from the first server that asks for them on. */
function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry;
}

type Labels<L extends string> = Record<L, string>;

/** A counter whose label names are fixed by its first use's type. */
class LabeledCounter<L extends string> {
  constructor(private readonly counter: Counter<L>) {}
  inc(labels: Labels<L>, by = 1): void {
    this.counter.inc(labels, by);
  }
}

export class Metrics {
  private readonly registry = new Registry();
  readonly calls = new LabeledCounter(
    new Counter({
      name: "scratchrun_calls_total",
      help: "Calls that reached a sandbox, by runtime and exit reason.",
      labelNames: ["runtime", "exit_reason"] as const,
      registers: [this.registry],
    }),
  );
  readonly refused = new LabeledCounter(
    new Counter({
      name: "scratchrun_calls_refused_total",
      help: "Calls refused or failed before a result, by reason (key_concurrency, key_rate, busy, error code).",
      labelNames: ["reason"] as const,
      registers: [this.registry],
    }),
  );
  readonly http = new LabeledCounter(
    new Counter({
      name: "scratchrun_http_requests_total",
      help: "HTTP requests by route and status code.",
      labelNames: ["route", "status"] as const,
      registers: [this.registry],
    }),
  );
  private readonly duration = new Histogram({
    name: "scratchrun_call_duration_seconds",
    help: "Wall-clock time of a call from arrival to result, by runtime.",
    labelNames: ["runtime"] as const,
    buckets: BUCKETS_S,
    registers: [this.registry],
  });
  readonly latency = {
    observe: (labels: { runtime: string }, seconds: number): void =>
      this.duration.observe(labels, seconds),
  };

  addGauge(source: GaugeSource): void {
    new Gauge({
      name: source.name,
      help: source.help,
      labelNames: [...(source.labelNames ?? [])],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const { labels, value } of source.read()) this.set(labels, value);
      },
    });
  }

  /** The exposition text: this server's metrics, then the process's. */
  async render(): Promise<string> {
    return Registry.merge([this.registry, processMetrics()]).metrics();
  }

  readonly contentType = Registry.PROMETHEUS_CONTENT_TYPE;
}
