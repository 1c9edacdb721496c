/**
 * What both HTTP servers (the API's, src/api/server.ts, and a worker's,
 * src/cluster/worker-server.ts) listen with: a route's outcome counted in the metrics (and an
 * unexpected failure logged and answered 500), and a listener with the service's timeouts.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Logger } from "./log.js";
import type { Metrics } from "./metrics.js";
import { sendError } from "./respond.js";

/**
 * A server whose requests `route` answers; route resolves with the label its request is counted
 * under. `onRequest` sees each request first (the API server counts open POSTs with it).
 */
export function routedServer(
  route: (req: IncomingMessage, res: ServerResponse) => Promise<string>,
  metrics: Metrics,
  logger: Logger,
  onRequest?: (req: IncomingMessage, res: ServerResponse) => void,
): Server {
  return createServer((req, res) => {
    onRequest?.(req, res);
    route(req, res).then(
      (label) => metrics.http.inc({ route: label, status: String(res.statusCode) }),
      (e: unknown) => {
        logger.error({ err: e instanceof Error ? e.message : String(e) }, "request failed");
        if (!res.headersSent) sendError(res, 500, "INTERNAL", "Internal error");
        else res.destroy();
      },
    );
  });
}

/**
 * Listens on host:port (port 0: any free one). Calls stream for as long as they run, so there is
 * no request timeout; headers must arrive within 30 s.
 */
export async function listen(
  server: Server,
  host: string,
  port: number,
): Promise<{ port: number; url: string }> {
  server.requestTimeout = 0;
  server.headersTimeout = 30_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
  const bound = (server.address() as AddressInfo).port;
  const hostPart = host.includes(":") ? `[${host}]` : host;
  return { port: bound, url: `http://${hostPart}:${bound}` };
}
