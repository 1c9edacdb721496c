import { z } from "zod";
import { execInputSchema } from "../schema/exec.js";
import { VERSION } from "../version.js";
import { sessionInfoSchema, sessionStartSchema } from "../schema/session.js";
import { limitsWireSchema, wireBatchSchema, wireErrorSchema, wireResultSchema } from "./wire.js";
import { AUTH_PATHS, AUTH_SCHEMAS, AUTH_SCHEMES } from "./openapi-auth.js";
import { CONSOLE_PATHS, CONSOLE_SCHEMAS } from "../console/openapi.js";

import { json, jsonBody } from "../http/openapi-parts.js";

const error = (description: string, headers?: Record<string, unknown>) => ({
  description,
  content: json("#/components/schemas/Error"),
  ...(headers ? { headers } : {}),
});
const retryAfter = {
  "Retry-After": { description: "Seconds to wait before retrying", schema: { type: "integer" } },
};

/** Strips the draft marker: inside OpenAPI 3.1 the dialect is given once, at the top. */
function schemaOf(s: z.ZodType, io: "input" | "output"): Record<string, unknown> {
  const { $schema: _ignored, ...rest } = z.toJSONSchema(s, { io }) as Record<string, unknown>;
  return rest;
}

/**
 * The OpenAPI 3.1 document of the REST API, derived from the same zod schemas the engine
 * validates with. openapi/openapi.json is this document, checked in; a test keeps them equal.
 */
export function buildOpenApiDocument() {
  return {
    openapi: "3.1.0",
    jsonSchemaDialect: "https://json-schema.org/draft/2020-12/schema",
    info: {
      title: "ScratchRun",
      version: VERSION,
      description:
        "Runs code in a fresh, isolated sandbox per call. POST /v1/exec takes the scratchrun_exec tool's parameters and returns its structured result; returned files carry their bytes in content_base64. POST /v1/sessions starts a session whose sandbox the calls naming its session_id share. MCP over Streamable HTTP is served at /mcp with the same tools; /mcp also takes an OAuth access token (the service is its own authorization server: /.well-known/oauth-authorization-server), which acts as the one API key a signed-in console user approved it for.",
    },
    security: [{ bearer: [] }, { oauth: ["scratchrun:exec"] }],
    paths: {
      "/v1/exec": {
        post: {
          operationId: "exec",
          summary: "Run code in a fresh sandbox",
          requestBody: jsonBody({ $ref: "#/components/schemas/ExecRequest" }),
          responses: {
            "200": {
              description:
                "The run's result (whatever the code did: see exit_reason); with `inputs`, one result per input in order and a summary (BatchResult)",
              content: {
                "application/json": {
                  schema: {
                    oneOf: [
                      { $ref: "#/components/schemas/ExecResult" },
                      { $ref: "#/components/schemas/BatchResult" },
                    ],
                  },
                },
              },
            },
            "400": error("The request failed validation; nothing ran"),
            "401": error("API key missing, unknown or revoked; nothing ran"),
            "403": error("Host or Origin is not this loopback server"),
            "404": error(
              "session_id names no session of this key (SESSION_NOT_FOUND); nothing ran",
            ),
            "410": error(
              "session_id names this key's session that was lost (SESSION_LOST); nothing ran",
            ),
            "413": error("The request body is over the cap"),
            "415": error("Content-Type is not application/json"),
            "429": error("Per-key limit, full queue or queue deadline; retry later", retryAfter),
            "500": error("The sandbox or the server failed"),
            "503": error("The host cannot run sandboxes, or the server is shutting down"),
          },
        },
      },
      "/v1/sessions": {
        post: {
          operationId: "sessionStart",
          summary: "Start a session: a sandbox kept between this key's calls",
          requestBody: jsonBody({ $ref: "#/components/schemas/SessionStart" }),
          responses: {
            "201": {
              description: "The session; pass its session_id to /v1/exec",
              content: json("#/components/schemas/Session"),
            },
            "400": error("The request failed validation, or this server keeps no sessions"),
            "401": error("API key missing, unknown or revoked; nothing started"),
            "429": error("This key's or the server's sessions are at their limit"),
            "500": error("The session's sandbox did not start"),
            "503": error("The host cannot run sandboxes, or the server is shutting down"),
          },
        },
      },
      "/v1/sessions/{session_id}": {
        delete: {
          operationId: "sessionEnd",
          summary: "End a session: a call running in it is cancelled, its sandbox destroyed",
          parameters: [
            { name: "session_id", in: "path", required: true, schema: { type: "string" } },
          ],
          responses: {
            "200": {
              description: "The ended session",
              content: json("#/components/schemas/Session"),
            },
            "401": error("API key missing, unknown or revoked"),
            "404": error("No session of this key has this id (never started, ended, expired)"),
            "410": error(
              "SESSION_LOST: the process holding this key's session stopped (a worker lost, a server restarted)",
            ),
          },
        },
      },
      "/v1/info": {
        get: {
          operationId: "info",
          summary: "Server version and isolation",
          responses: {
            "200": {
              description: "Server facts",
              content: json("#/components/schemas/Info"),
            },
            "401": error("API key missing, unknown or revoked"),
          },
        },
      },
      "/healthz": {
        get: {
          operationId: "health",
          security: [],
          summary: "The process is up",
          responses: { "200": { description: "Up", content: json("#/components/schemas/Status") } },
        },
      },
      "/readyz": {
        get: {
          operationId: "ready",
          security: [],
          summary: "Ready for calls (warm pool, not draining)",
          responses: {
            "200": { description: "Ready", content: json("#/components/schemas/Status") },
            "503": {
              description: "Warming or draining",
              content: json("#/components/schemas/Status"),
            },
          },
        },
      },
      "/metrics": {
        get: {
          operationId: "metrics",
          security: [],
          summary: "Prometheus metrics",
          responses: {
            "200": { description: "Text exposition format", content: { "text/plain": {} } },
          },
        },
      },
      ...AUTH_PATHS,
      ...CONSOLE_PATHS,
      "/v1/console/keys": {
        ...AUTH_PATHS["/v1/console/keys"],
        ...CONSOLE_PATHS["/v1/console/keys"],
      },
    },
    components: {
      securitySchemes: { bearer: { type: "http", scheme: "bearer" }, ...AUTH_SCHEMES },
      schemas: {
        ExecRequest: schemaOf(execInputSchema, "input"),
        ExecResult: schemaOf(wireResultSchema, "output"),
        // Whole, not a $ref to ExecResult: each schema here compiles alone.
        BatchResult: schemaOf(wireBatchSchema, "output"),
        Error: schemaOf(wireErrorSchema, "output"),
        SessionStart: schemaOf(sessionStartSchema, "input"),
        Session: schemaOf(sessionInfoSchema, "output"),
        Info: {
          type: "object",
          required: ["version", "isolation", "network_note"],
          properties: {
            version: { type: "string" },
            isolation: { type: "string" },
            network_note: { type: "string" },
            sessions: {
              type: "boolean",
              description:
                "Whether this server keeps sessions (POST /v1/sessions); false when SCRATCHRUN_SESSIONS_MAX is 0",
            },
            limits: {
              ...schemaOf(limitsWireSchema, "output"),
              description:
                "What this API key may ask for: its runtimes, network modes, timeout_ms and memory_mb (default, max, and whose limit: the server's, the key's own policy, or the host's), concurrency and rate. POST /v1/exec refuses (400) what lies outside it.",
            },
            runtimes: {
              type: "object",
              description: "What each runtime is, from the image manifest (as scratchrun_runtimes)",
            },
          },
        },
        ...AUTH_SCHEMAS,
        ...CONSOLE_SCHEMAS,
        Status: {
          type: "object",
          required: ["status"],
          properties: { status: { type: "string" }, isolation: { type: "string" } },
        },
      },
    },
  };
}
