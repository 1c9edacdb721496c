import type { GaugeSource, Metrics } from "../http/metrics.js";
import { VERSION } from "../version.js";
import type { McpSessions } from "./mcp-http.js";
import type { ExecService, ServiceEngine } from "./service.js";

export interface HealthSources {
  engine: ServiceEngine;
  /** What serves the calls: its gauges and its readiness (one server's engine, or a replica's). */
  backing: { gauges: GaugeSource[]; readiness(): { status: string } };
  service: ExecService;
  sessions: McpSessions;
  metrics: Metrics;
}

/**
 * What the service says of itself: its backing's gauges and its own (calls in flight, MCP
 * sessions) at /metrics, its readiness at /readyz (draining once it stops), and the console's
 * health page (readiness, the cluster's worker counts, calls in flight, the image's runtimes).
 */
export function serviceHealth({ engine, backing, service, sessions, metrics }: HealthSources) {
  for (const g of backing.gauges) metrics.addGauge(g);
  metrics.addGauge({
    name: "scratchrun_calls_in_flight",
    help: "Calls this server has admitted and not yet answered (what the API's HPA scales on).",
    read: () => [{ labels: {}, value: service.active }],
  });
  metrics.addGauge({
    name: "scratchrun_mcp_sessions",
    help: "Open MCP sessions.",
    read: () => [{ labels: {}, value: sessions.size }],
  });

  const readiness = () => {
    const r = backing.readiness();
    const status = service.isDraining ? "draining" : r.status;
    return { ...r, status, isolation: engine.backend.isolation };
  };
  const health = () => {
    const workers = backing.gauges.find((g) => g.name === "scratchrun_workers");
    return {
      version: VERSION,
      ...readiness(),
      ...(workers
        ? { workers: Object.fromEntries(workers.read().map((w) => [w.labels.state, w.value])) }
        : {}),
      calls_in_flight: service.active,
      ...(engine.options.runtimes ? { runtimes: engine.options.runtimes } : {}),
    };
  };
  return { readiness, health };
}
