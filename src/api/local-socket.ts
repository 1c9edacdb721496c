/**
 * The local service's second listener (decision 0018): the same service's own rows, the probes
 * and `restRoutes` (REST and /mcp), on a unix socket that root and the group `scratchrun` may
 * open, each request's caller the uid the kernel proves (`peer-auth.ts`: `uid:N`), never a key.
 * No Host/Origin check (no browser opens a unix socket), and no console or OAuth rows: they are a
 * browser's, and their limiters count by network address, which every socket caller would share.
 */
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { routedServer } from "../http/listener.js";
import type { Logger } from "../http/log.js";
import type { Metrics } from "../http/metrics.js";
import { probeRoutes } from "../http/probes.js";
import { router } from "../http/router.js";
import { listenUnix, type UnixSocketSpec } from "../http/unix-listener.js";
import { peerAuth } from "./peer-auth.js";
import { restRoutes, type RestDeps } from "./rest.js";

export interface LocalSocketDeps extends Omit<RestDeps, "authenticate"> {
  socket: UnixSocketSpec;
  metrics: Metrics;
  readiness(): { status: string };
  logger: Logger;
  /** Sees every request first (the shutdown's count of POSTs in flight). */
  onRequest(req: IncomingMessage, res: ServerResponse): void;
}

/** Binds the socket (unix-listener.ts readies its path first) and serves the rows there. */
export async function listenLocalSocket(d: LocalSocketDeps): Promise<Server> {
  const { socket, metrics, readiness, logger, onRequest, ...rest } = d;
  const server = routedServer(
    router([
      ...probeRoutes(metrics, readiness),
      ...restRoutes({ ...rest, authenticate: peerAuth(rest.keys, rest.admissionTouchesKey) })
        .routes,
    ]),
    metrics,
    logger,
    onRequest,
  );
  await listenUnix(server, socket);
  return server;
}
