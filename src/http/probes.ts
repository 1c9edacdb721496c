import type { Metrics } from "./metrics.js";
import { sendJson } from "./respond.js";
import type { Route } from "./router.js";

/**
 * The rows every server answers without a caller: liveness, readiness (200 when `status` is
 * "ready", else 503, with what `readiness` says) and the metrics' exposition text.
 */
export function probeRoutes(metrics: Metrics, readiness: () => { status: string }): Route[] {
  return [
    { method: "GET", path: "/healthz", handle: ({ res }) => sendJson(res, 200, { status: "ok" }) },
    {
      method: "GET",
      path: "/readyz",
      handle: ({ res }) => {
        const r = readiness();
        sendJson(res, r.status === "ready" ? 200 : 503, r);
      },
    },
    {
      method: "GET",
      path: "/metrics",
      handle: async ({ res }) => {
        const text = await metrics.render();
        res.writeHead(200, { "Content-Type": metrics.contentType });
        res.end(text);
      },
    },
  ];
}
