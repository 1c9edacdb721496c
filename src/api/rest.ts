import type { IncomingMessage, ServerResponse } from "node:http";
import { readJsonBody } from "../http/body.js";
import { answerError, closeSignal, refuse, sendError, sendJson } from "../http/respond.js";
import type { Exchange, Handler, Method, Route } from "../http/router.js";
import { parseExecRequest } from "../schema/validate.js";
import type { KeyStore, VerifiedKey } from "../store/keys.js";
import { VERSION } from "../version.js";
import type { McpSessions } from "./mcp-http.js";
import { buildOpenApiDocument } from "./openapi.js";
import type { Caller, ExecService, ServiceEngine } from "./service.js";
import { batchToWire, limitsToWire, outcomeToWire } from "./wire.js";

export interface RestDeps {
  service: ExecService;
  engine: ServiceEngine;
  keys: KeyStore;
  mcp: McpSessions;
  bodyCapBytes: number;
  /** The key of a request, or null once it is answered (src/api/bearer.ts). */
  authenticate(
    req: IncomingMessage,
    res: ServerResponse,
    mcp: boolean,
  ): Promise<VerifiedKey | null>;
  /** Admission records the key's last use itself (an API replica's): no touch here. */
  admissionTouchesKey?: boolean;
}

const draining = (res: ServerResponse) =>
  sendError(res, 503, "NOT_READY", "The server is shutting down", { Connection: "close" });

/**
 * The service's own routes, each for one key (its policy, quota and records): REST's info,
 * calls and sessions, MCP in both eras at /mcp, and the OpenAPI document that describes them.
 * `execAs` is the console's playground: /v1/exec as one of the signed-in person's keys.
 */
export function restRoutes(d: RestDeps) {
  const { service, engine } = d;

  /** A row for a key's requests: refused while draining, then the bearer is the caller. */
  const keyed = (
    transport: Caller["transport"],
    handle: (x: Exchange, caller: Caller) => Promise<void> | void,
  ): Handler => {
    return async (x) => {
      if (service.isDraining) return draining(x.res);
      const key = await d.authenticate(x.req, x.res, transport === "mcp");
      if (!key) return;
      await handle(x, { keyId: key.id, transport, policy: service.policyFor(key.policy) });
    };
  };

  /** A call, answered with its result or its refusal. */
  const run = async (res: ServerResponse, caller: Caller, request: unknown) => {
    const signal = closeSignal(res);
    try {
      const parsed = parseExecRequest(request, caller.policy.call);
      // With `inputs`: one result per input, in order, and the summary (src/engine/batch.ts).
      const answer =
        parsed.inputs !== undefined
          ? batchToWire(await service.runBatch(caller, parsed, { signal }))
          : outcomeToWire(await service.run(caller, parsed, { signal }));
      if (!res.destroyed) sendJson(res, 200, answer);
    } catch (e) {
      answerError(res, e);
    }
  };

  /** The request's JSON body, or undefined once its refusal is answered. */
  const body = async ({ req, res }: Exchange): Promise<{ value: unknown } | undefined> => {
    const b = await readJsonBody(req, d.bodyCapBytes);
    if (b.ok) return { value: b.value };
    refuse(res, b.refusal);
  };

  /** A caller's sessions, or null (answered) on a server that keeps none. */
  const sessionsOf = (res: ServerResponse, caller: Caller) => {
    const ops = service.sessionsFor(() => caller);
    if (!ops)
      sendError(
        res,
        400,
        "INVALID_INPUT",
        "sessions are off on this server (SCRATCHRUN_SESSIONS_MAX=0)",
      );
    return ops;
  };

  const mcp = keyed("mcp", async (x, caller) => {
    const b = x.req.method === "POST" ? await body(x) : { value: undefined };
    if (b) await d.mcp.handle(x.req, x.res, caller, b.value);
  });

  const routes: Route[] = [
    {
      method: "GET",
      path: "/openapi.json",
      handle: ({ res }) => sendJson(res, 200, buildOpenApiDocument()),
    },
    {
      method: "GET",
      path: "/v1/info",
      handle: keyed("rest", ({ res }, { policy }) =>
        sendJson(res, 200, {
          version: VERSION,
          isolation: engine.backend.isolation,
          network_note: policy.networkNote ?? engine.networkNote,
          sessions: engine.sessionsOn === true && engine.startSession !== undefined,
          limits: limitsToWire(policy),
          ...(engine.options.runtimes ? { runtimes: engine.options.runtimes } : {}),
        }),
      ),
    },
    {
      method: "POST",
      path: "/v1/exec",
      handle: keyed("rest", async (x, caller) => {
        const b = await body(x);
        if (b) await run(x.res, caller, b.value);
      }),
    },
    {
      method: "POST",
      path: "/v1/sessions",
      handle: keyed("rest", async (x, caller) => {
        const ops = sessionsOf(x.res, caller);
        const b = ops && (await body(x));
        if (!ops || !b) return;
        try {
          sendJson(x.res, 201, await ops.start(b.value, closeSignal(x.res)));
        } catch (e) {
          answerError(x.res, e);
        }
      }),
    },
    {
      method: "DELETE",
      path: "/v1/sessions/{session_id}",
      handle: keyed("rest", async ({ res, params }, caller) => {
        const ops = sessionsOf(res, caller);
        if (!ops) return;
        try {
          sendJson(res, 200, await ops.end(params.session_id!));
        } catch (e) {
          answerError(res, e);
        }
      }),
    },
    ...(["GET", "POST", "DELETE"] as Method[]).map((method) => ({
      method,
      path: "/mcp",
      handle: mcp,
    })),
  ];

  const execAs = async (res: ServerResponse, keyId: string, request: unknown) => {
    if (service.isDraining) return draining(res);
    const key = await d.keys.active(keyId);
    if (!key) return sendError(res, 404, "NOT_FOUND", "None of your active keys has this id");
    if (!d.admissionTouchesKey) d.keys.touch(key.id).catch(() => {});
    await run(
      res,
      { keyId: key.id, transport: "rest", policy: service.policyFor(key.policy) },
      request,
    );
  };

  return { routes, execAs };
}
