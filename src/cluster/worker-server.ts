import { randomBytes } from "node:crypto";
import { parseBearer } from "../http/auth.js";
import { readJsonBody } from "../http/body.js";
import { listen, routedServer } from "../http/listener.js";
import { closeSignal, refuse, sendError, sendJson } from "../http/respond.js";
import type { Logger } from "../http/log.js";
import { Metrics } from "../http/metrics.js";
import { probeRoutes } from "../http/probes.js";
import { router, type Exchange, type Handler, type Route } from "../http/router.js";
import type { SandboxTracker } from "../store/sandbox-tracker.js";
import { outcomeToWire } from "../api/wire.js";
import type { Engine } from "../engine/engine.js";
import { engineGauges, engineReadiness } from "../engine/health.js";
import { isScratchRunError } from "../errors.js";
import { RUNTIMES } from "../schema/exec.js";
import { parseExecRequest } from "../schema/validate.js";
import { VERSION } from "../version.js";
import { WorkerSessions } from "./worker-sessions.js";
import {
  tokenMatches,
  WORKER_PATHS,
  workerExecBodySchema,
  type WorkerEvent,
  type WorkerStatus,
} from "./protocol.js";

export interface WorkerServerOptions {
  engine: Engine;
  /** The secret API replicas present. */
  token: string;
  logger: Logger;
  host: string;
  port: number;
  tracker?: SandboxTracker;
  bodyCapBytes?: number;
}

export interface WorkerServer {
  readonly url: string;
  readonly port: number;
  readonly workerId: string;
  /** Calls accepted and not yet answered. */
  readonly active: number;
  /** The latest deadline (ms since the epoch) of a call in flight, 0 when none. */
  latestDeadline(): number;
  /** Refuses new calls (status and /readyz say draining) and resolves when none is in flight. */
  drain(): Promise<void>;
  /** Closes the listener and every connection (after drain() for a graceful stop). */
  close(): Promise<void>;
}

/**
 * `scratchrun serve --role worker`: the engine behind an internal endpoint that only API replicas
 * call. It knows nothing of keys, quotas or records; it runs what an authenticated replica sends,
 * reports its capacity and warm sandboxes, and kills a call's sandbox when the replica that sent
 * it goes away (connection closed).
 */
export async function startWorkerServer(options: WorkerServerOptions): Promise<WorkerServer> {
  const { engine, logger, tracker } = options;
  const workerId = randomBytes(8).toString("hex");
  const bodyCap = options.bodyCapBytes ?? 16 * 1024 * 1024;
  const metrics = new Metrics();
  for (const gauge of engineGauges(engine)) metrics.addGauge(gauge);
  let inFlight = 0;
  let draining = false;
  const deadlines = new Map<symbol, number>();
  const idle: (() => void)[] = [];
  const sessions = new WorkerSessions(engine, logger, bodyCap);

  const status = (): WorkerStatus => ({
    version: VERSION,
    worker_id: workerId,
    isolation: engine.backend.isolation,
    network_note: engine.networkNote,
    draining,
    slots: {
      max: engine.admission.maxConcurrent,
      active: engine.admission.active,
      queued: engine.admission.queued,
      max_queued: engine.admission.maxQueued,
    },
    warm: Object.fromEntries(
      RUNTIMES.map((r) => [r, engine.backend.pooled(r)]),
    ) as WorkerStatus["warm"],
    sessions: sessions.status(),
  });

  const untrack = tracker
    ? engine.backend.onSandboxReady(() => void tracker.sandboxRunning())
    : null;
  if (tracker) void tracker.sandboxRunning();

  const exec = async ({ req, res }: Exchange) => {
    const body = await readJsonBody(req, bodyCap);
    if (!body.ok) return refuse(res, body.refusal);
    const envelope = workerExecBodySchema.safeParse(body.value);
    if (!envelope.success) return sendError(res, 400, "INVALID_INPUT", "Malformed worker call");
    let request;
    try {
      // A worker runs what an authenticated replica sends, held to its key's policy there: here
      // only the host's ceiling bounds it (defaults stay the product's), checked once, here.
      request = parseExecRequest(envelope.data.request, engine.ceilingPolicy);
    } catch (e) {
      return sendError(res, 400, "INVALID_INPUT", e instanceof Error ? e.message : String(e));
    }
    const { admission } = engine;
    // Refused before it starts (the replica may try another worker): no slot and a full queue.
    if (admission.active >= admission.maxConcurrent && admission.queued >= admission.maxQueued) {
      metrics.refused.inc({ reason: "busy" });
      return sendError(res, 429, "BUSY", "The worker has no free slot", { "Retry-After": "1" });
    }
    const signal = closeSignal(res);
    res.writeHead(200, { "Content-Type": "application/x-ndjson", "Cache-Control": "no-store" });
    const emit = (e: WorkerEvent) => {
      if (!res.destroyed) res.write(`${JSON.stringify(e)}\n`);
    };
    inFlight++;
    const started = Date.now();
    // Its queue wait and sandbox start come on top of the call's own timeout.
    const call = Symbol("call");
    deadlines.set(call, started + request.timeout_ms + 60_000);
    try {
      const outcome = await engine.execute(request, {
        signal,
        parsedUnderCeiling: true,
        ...(envelope.data.egress_allow ? { egressAllow: envelope.data.egress_allow } : {}),
        ...(envelope.data.owner ? { owner: envelope.data.owner } : {}),
        onProgress: (p) => {
          if (p.stage === "output")
            emit({
              t: "output",
              stream: p.stream,
              data_base64: Buffer.from(p.chunk).toString("base64"),
            });
          else emit({ t: "progress", stage: p.stage });
          if (p.stage === "running") void tracker?.sandboxRunning();
        },
      });
      emit({ t: "result", result: outcomeToWire(outcome) });
      metrics.calls.inc({ runtime: request.runtime, exit_reason: outcome.result.exit_reason });
      logger.info(
        {
          run: envelope.data.run_id,
          replica: envelope.data.replica_id,
          runtime: request.runtime,
          exit_reason: outcome.result.exit_reason,
          cancelled: signal.aborted,
          ms: Date.now() - started,
        },
        "call finished",
      );
    } catch (e) {
      const code = isScratchRunError(e) ? e.code : "INTERNAL";
      metrics.refused.inc({ reason: code });
      emit({ t: "error", code, message: isScratchRunError(e) ? e.message : "Internal error" });
      logger.warn({ run: envelope.data.run_id, code }, "call failed");
    } finally {
      res.end();
      void tracker?.callEnded();
      deadlines.delete(call);
      inFlight--;
      if (inFlight === 0) for (const wake of idle.splice(0)) wake();
    }
  };

  /** The rows only API replicas may call: their shared secret first, then (a call) not draining. */
  const replicas = (handle: Handler, refusedWhileDraining = false): Handler => {
    return (x) => {
      if (!tokenMatches(parseBearer(x.req.headers.authorization), options.token))
        return sendError(
          x.res,
          401,
          "UNAUTHORIZED",
          "This endpoint is for ScratchRun API replicas",
        );
      if (refusedWhileDraining && draining)
        return sendError(x.res, 503, "NOT_READY", "The worker is draining", {
          Connection: "close",
        });
      return handle(x);
    };
  };
  const routes: Route[] = [
    ...probeRoutes(metrics, () => ({
      ...engineReadiness(engine),
      ...(draining ? { status: "draining" } : {}),
      worker_id: workerId,
    })),
    {
      method: "GET",
      path: WORKER_PATHS.status,
      handle: replicas(({ res }) => sendJson(res, 200, status())),
    },
    {
      method: "GET",
      path: WORKER_PATHS.info,
      handle: replicas(({ res }) => sendJson(res, 200, { runtimes: engine.options.runtimes })),
    },
    { method: "POST", path: WORKER_PATHS.exec, handle: replicas(exec, true) },
    {
      method: "POST",
      path: WORKER_PATHS.sessions,
      handle: replicas((x) => sessions.start(x, workerId), true),
    },
    { method: "POST", path: WORKER_PATHS.sessionEnd, handle: replicas((x) => sessions.end(x)) },
  ];

  const server = routedServer(router(routes), metrics, logger);
  // Replicas poll the status about once a second with fetch, which keeps its connection alive.
  server.keepAliveTimeout = 65_000;
  const { port, url } = await listen(server, options.host, options.port);
  logger.info({ host: options.host, port, worker_id: workerId }, "worker listening");

  return {
    url,
    port,
    workerId,
    get active() {
      return inFlight;
    },
    latestDeadline: () => Math.max(0, ...deadlines.values()),
    async drain() {
      draining = true;
      if (inFlight > 0) await new Promise<void>((r) => idle.push(r));
    },
    async close() {
      const closed = new Promise<void>((r) => server.close(() => r()));
      server.closeAllConnections();
      await closed;
      untrack?.();
      sessions.close();
    },
  };
}
