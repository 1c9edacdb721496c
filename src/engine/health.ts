import type { Isolation } from "../backends/types.js";
import type { PoolsReport } from "../backends/pool.js";
import type { GaugeSource } from "../http/metrics.js";
import { RUNTIMES } from "../schema/exec.js";
import type { Engine } from "./engine.js";

/**
 * What a server that runs an engine (one server, `serve`; a worker, `serve --role worker`) says
 * of it at /metrics and /readyz: the same gauges with the same help strings, and the same
 * readiness, whichever role serves them.
 */
export function engineGauges(engine: Engine): GaugeSource[] {
  return [
    {
      name: "scratchrun_sandboxes_active",
      help: "Calls holding a sandbox slot.",
      read: () => [{ labels: {}, value: engine.admission.active }],
    },
    {
      name: "scratchrun_queue_depth",
      help: "Calls waiting for a sandbox slot.",
      read: () => [{ labels: {}, value: engine.admission.queued }],
    },
    {
      name: "scratchrun_pool_ready",
      help: "Warm sandboxes ready per runtime.",
      labelNames: ["runtime"],
      read: () =>
        RUNTIMES.map((r) => ({ labels: { runtime: r }, value: engine.backend.pooled(r).ready })),
    },
  ];
}

export interface EngineReadiness {
  /** "warming": a pool is configured and nothing in it is ready yet (a pool of 0 never warms). */
  status: "ready" | "warming";
  isolation: Isolation;
  pools: PoolsReport;
}

export function engineReadiness(engine: Engine): EngineReadiness {
  const pooled = RUNTIMES.map((r) => engine.backend.pooled(r));
  const warming = pooled.some((p) => p.target > 0) && pooled.every((p) => p.ready === 0);
  return {
    status: warming ? "warming" : "ready",
    isolation: engine.backend.isolation,
    pools: engine.backend.pools(),
  };
}
