import { AUDIT_PAGE_MAX } from "../store/audit.js";
import { RUNS_PAGE_MAX, USAGE_DAYS_MAX } from "./history.js";
import { err, int, json, jsonBody, nullable, str } from "../http/openapi-parts.js";

/**
 * The OpenAPI paths and schemas of the console's own routes (api.ts): what its pages call, and
 * what a script signed in to the console may call the same way. Merged by api/openapi.ts.
 */
const read = [{ consoleSession: [] }];
const write = [{ consoleSession: [], csrfToken: [] }];
const keyId = { name: "key_id", in: "path", required: true, schema: { type: "string" } };
const query = (name: string, schema: Record<string, unknown>, description: string) => ({
  name,
  in: "query",
  required: false,
  schema,
  description,
});
const signedOut = err("Not signed in");
const csrf = err("X-CSRF-Token missing or wrong");
const notYours = err("None of this user's active keys has this id");
const policy = {
  type: "object",
  description:
    "A key's policy (as `scratchrun keys create|update` sets it): runtimes, network, egress_allow, max_timeout_ms, max_memory_mb, concurrency, rate_per_minute; each optional",
};
const beyondCeiling = err(
  "X-CSRF-Token missing or wrong, or (a member) the policy goes beyond the key ceiling an admin set for this user (each field named)",
);
const ceilingOf = {
  ...policy,
  type: ["object", "null"],
  description:
    "A console user's key ceiling: the most the keys they make and change may be given while they are a member, in a key policy's fields; null, or a field left out: the server's setting",
};

const userId = { name: "user_id", in: "path", required: true, schema: str };
/** An invite or password-reset link as listed (never its token). */
const invite = {
  type: "object",
  required: ["id", "purpose", "name", "created_at", "expires_at"],
  properties: {
    id: str,
    purpose: { enum: ["join", "reset"] },
    name: str,
    role: { type: ["string", "null"], enum: ["admin", "member", null] },
    user_id: nullable("string"),
    created_by: nullable("string"),
    created_at: int,
    expires_at: int,
  },
};
const withLink = {
  ...invite,
  required: [...invite.required, "link"],
  properties: {
    ...invite.properties,
    link: { type: "string", description: "The one-time link; shown only in this answer" },
  },
};

export const CONSOLE_PATHS = {
  "/v1/console/audit": {
    get: {
      operationId: "consoleAudit",
      security: read,
      summary:
        "The audit log, newest first (an admin only): every sign-in (and refused one) and every change to a person, key, grant or key ceiling made in the console or with the CLI, who made it, when and from which address. Nothing changes or removes an entry",
      parameters: [
        query(
          "limit",
          { type: "integer", minimum: 1, maximum: AUDIT_PAGE_MAX },
          "At most this many (50)",
        ),
        query(
          "before",
          int,
          "Only entries older than this time (ms): next_before of the last page",
        ),
      ],
      responses: {
        "200": {
          description: "Entries",
          content: {
            "application/json": {
              schema: {
                type: "object",
                required: ["entries", "next_before"],
                properties: {
                  entries: {
                    type: "array",
                    items: {
                      type: "object",
                      required: ["id", "at", "actor", "action"],
                      properties: {
                        id: str,
                        at: int,
                        actor_id: nullable("string"),
                        actor: str,
                        address: nullable("string"),
                        action: str,
                        target: nullable("string"),
                        detail: nullable("object"),
                      },
                    },
                  },
                  next_before: nullable("integer"),
                },
              },
            },
          },
        },
        "400": err("A bad limit or before"),
        "401": signedOut,
        "403": err("Not an admin"),
      },
    },
  },
  "/": {
    get: {
      operationId: "root",
      security: [],
      summary:
        "Where things are: a browser (Accept: text/html) is sent to the console (303 to /console); any other client gets this server's console, MCP and OpenAPI URLs",
      responses: {
        "200": {
          description: "The URLs",
          content: {
            "application/json": {
              schema: {
                type: "object",
                required: ["service", "version", "console", "mcp", "openapi"],
                properties: { service: str, version: str, console: str, mcp: str, openapi: str },
              },
            },
          },
        },
        "303": { description: "A browser: to /console" },
      },
    },
  },
  /** Merged with its GET (api/openapi-auth.ts) by api/openapi.ts. */
  "/v1/console/keys": {
    post: {
      operationId: "consoleKeyCreate",
      security: write,
      summary: "Create an API key owned by this user; its secret is in this answer only",
      requestBody: jsonBody({
        type: "object",
        required: ["name"],
        properties: {
          name: str,
          policy: { ...policy, type: ["object", "null"] },
          expires_at: {
            ...nullable("integer"),
            description:
              "When the key stops working (ms since the epoch, in the future); null or left out: never. From then on REST, /mcp and the OAuth tokens of its grants refuse it, and its sessions end",
          },
        },
      }),
      responses: {
        "201": { description: "The key", content: json("#/components/schemas/CreatedKey") },
        "400": err("A bad name, policy field (named) or expiry"),
        "401": signedOut,
        "403": beyondCeiling,
      },
    },
  },
  "/v1/console/keys/{key_id}": {
    delete: {
      operationId: "consoleKeyRevoke",
      security: write,
      summary: "Revoke a key at once: its next call (and its OAuth tokens') is refused",
      parameters: [keyId],
      responses: {
        "200": { description: "Revoked" },
        "401": signedOut,
        "403": csrf,
        "404": notYours,
      },
    },
  },
  "/v1/console/keys/{key_id}/policy": {
    put: {
      operationId: "consoleKeyPolicy",
      security: write,
      summary: "Change a key's policy: fields set, null ones back to the server's setting",
      parameters: [keyId],
      requestBody: jsonBody(policy),
      responses: {
        "200": {
          description: "The key's policy now",
          content: {
            "application/json": {
              schema: {
                type: "object",
                required: ["id", "policy"],
                properties: { id: str, policy: { ...policy, type: ["object", "null"] } },
              },
            },
          },
        },
        "400": err("A bad policy field (named); nothing changed"),
        "401": signedOut,
        "403": beyondCeiling,
        "404": notYours,
      },
    },
  },
  "/v1/console/users": {
    get: {
      operationId: "consoleUsers",
      security: read,
      summary: "The console's users with their key ceilings (admins only)",
      responses: {
        "200": {
          description: "Users",
          content: {
            "application/json": {
              schema: {
                type: "object",
                required: ["users"],
                properties: {
                  users: {
                    type: "array",
                    items: {
                      type: "object",
                      required: ["id", "name", "role", "key_ceiling"],
                      properties: {
                        id: str,
                        name: str,
                        role: { enum: ["admin", "member"] },
                        key_ceiling: ceilingOf,
                      },
                    },
                  },
                },
              },
            },
          },
        },
        "401": signedOut,
        "403": err("Not an admin"),
      },
    },
  },
  "/v1/console/invites": {
    get: {
      operationId: "consoleInvites",
      security: read,
      summary: "The invite and password-reset links still open (admins only), newest first",
      responses: {
        "200": {
          description: "Open links (never their tokens)",
          content: {
            "application/json": {
              schema: {
                type: "object",
                required: ["invites"],
                properties: { invites: { type: "array", items: invite } },
              },
            },
          },
        },
        "401": signedOut,
        "403": err("Not an admin"),
      },
    },
    post: {
      operationId: "consoleInviteCreate",
      security: write,
      summary:
        "Invite a person (admins only): a one-time link, good for 24 hours, that makes the user once its holder chooses a password; shown only in this answer",
      requestBody: jsonBody({
        type: "object",
        required: ["name"],
        properties: { name: str, role: { enum: ["admin", "member"] } },
      }),
      responses: {
        "201": {
          description: "The invite and its link",
          content: { "application/json": { schema: withLink } },
        },
        "400": err("A bad name or role, or a user has the name already"),
        "401": signedOut,
        "403": err("X-CSRF-Token missing or wrong, or not an admin"),
      },
    },
  },
  "/v1/console/invites/{invite_id}": {
    delete: {
      operationId: "consoleInviteCancel",
      security: write,
      summary: "Cancel an open invite or password-reset link (admins only): it no longer works",
      parameters: [{ name: "invite_id", in: "path", required: true, schema: str }],
      responses: {
        "200": {
          description: "Cancelled",
          content: {
            "application/json": {
              schema: {
                type: "object",
                required: ["id", "cancelled"],
                properties: { id: str, cancelled: { type: "boolean" } },
              },
            },
          },
        },
        "401": signedOut,
        "403": err("X-CSRF-Token missing or wrong, or not an admin"),
        "404": err("No open link has this id"),
      },
    },
  },
  "/v1/console/users/{user_id}": {
    delete: {
      operationId: "consoleUserRemove",
      security: write,
      summary:
        "Remove a person (admins only, not themselves): their console sessions end and every key they own is revoked",
      parameters: [userId],
      responses: {
        "200": {
          description: "Removed",
          content: {
            "application/json": {
              schema: {
                type: "object",
                required: ["id", "removed", "revoked_keys"],
                properties: {
                  id: str,
                  removed: { type: "boolean" },
                  revoked_keys: { type: "array", items: str },
                },
              },
            },
          },
        },
        "400": err("Yourself: another admin removes you"),
        "401": signedOut,
        "403": err("X-CSRF-Token missing or wrong, or not an admin"),
        "404": err("No console user has this id"),
      },
    },
  },
  "/v1/console/users/{user_id}/role": {
    put: {
      operationId: "consoleUserRole",
      security: write,
      summary:
        "Change a person's role (admins only, not their own); their open sessions hold to it from their next request",
      parameters: [userId],
      requestBody: jsonBody({
        type: "object",
        required: ["role"],
        properties: { role: { enum: ["admin", "member"] } },
      }),
      responses: {
        "200": {
          description: "The user now",
          content: {
            "application/json": {
              schema: {
                type: "object",
                required: ["id", "name", "role"],
                properties: { id: str, name: str, role: { enum: ["admin", "member"] } },
              },
            },
          },
        },
        "400": err("Not a role, or your own"),
        "401": signedOut,
        "403": err("X-CSRF-Token missing or wrong, or not an admin"),
        "404": err("No console user has this id"),
      },
    },
  },
  "/v1/console/users/{user_id}/reset-link": {
    post: {
      operationId: "consoleUserResetLink",
      security: write,
      summary:
        "A password-reset link for a person (admins only): one-time, good for 24 hours; its holder chooses a new password, is signed out everywhere else and signed in; shown only in this answer",
      parameters: [userId],
      responses: {
        "201": { description: "The link", content: { "application/json": { schema: withLink } } },
        "401": signedOut,
        "403": err("X-CSRF-Token missing or wrong, or not an admin"),
        "404": err("No console user has this id"),
      },
    },
  },
  "/v1/console/users/{user_id}/key-ceiling": {
    put: {
      operationId: "consoleUserKeyCeiling",
      security: write,
      summary:
        "Change a user's key ceiling (admins only): fields set, null ones back to the server's setting",
      parameters: [{ name: "user_id", in: "path", required: true, schema: str }],
      requestBody: jsonBody(policy),
      responses: {
        "200": {
          description: "The user's key ceiling now",
          content: {
            "application/json": {
              schema: {
                type: "object",
                required: ["id", "key_ceiling"],
                properties: { id: str, key_ceiling: ceilingOf },
              },
            },
          },
        },
        "400": err("A bad field (named); nothing changed"),
        "401": signedOut,
        "403": err("X-CSRF-Token missing or wrong, or not an admin"),
        "404": err("No console user has this id"),
      },
    },
  },
  "/v1/console/keys/{key_id}/grants": {
    get: {
      operationId: "consoleKeyGrants",
      security: read,
      summary: "The OAuth grants of one key (revoke one with DELETE /v1/console/grants/{id})",
      parameters: [keyId],
      responses: {
        "200": { description: "Grants", content: json("#/components/schemas/Grants") },
        "401": signedOut,
        "404": notYours,
      },
    },
  },
  "/v1/console/runs": {
    get: {
      operationId: "consoleRuns",
      security: read,
      summary: "The run records of this user's keys, newest first, filtered and paged",
      parameters: [
        query("key_id", str, "Only this key's runs (one of the user's)"),
        query("runtime", str, "Only this runtime"),
        query("exit_reason", str, "Only runs that ended so"),
        query("session", str, "Only the calls of this session (a run's session_record)"),
        query("since", int, "Only runs received at or after (ms since the epoch)"),
        query("before", int, "The next page: next_before of the previous answer"),
        query("limit", { ...int, minimum: 1, maximum: RUNS_PAGE_MAX }, "Rows per page (50)"),
      ],
      responses: {
        "200": { description: "Runs", content: json("#/components/schemas/ConsoleRuns") },
        "400": err("A bad query parameter"),
        "401": signedOut,
        "404": notYours,
      },
    },
  },
  "/v1/console/runs/{run_id}": {
    get: {
      operationId: "consoleRun",
      security: read,
      summary:
        "Everything recorded about one run of this user's keys (sizes and digests; never code or output, which are never stored)",
      parameters: [{ name: "run_id", in: "path", required: true, schema: str }],
      responses: {
        "200": { description: "The run", content: json("#/components/schemas/ConsoleRun") },
        "401": signedOut,
        "404": err("None of this user's keys has a run with this id"),
      },
    },
  },
  "/v1/console/usage": {
    get: {
      operationId: "consoleUsage",
      security: read,
      summary:
        "What this user's keys used over a period of whole UTC days: calls per key per day, and per key and in total the calls, compute, peak concurrency and refusals",
      parameters: [
        query("from", { ...str, format: "date" }, "The first day (YYYY-MM-DD, UTC)"),
        query("to", { ...str, format: "date" }, "The last day, included (today)"),
        query(
          "days",
          { ...int, minimum: 1, maximum: USAGE_DAYS_MAX },
          `Without from: this many days up to to (30); a period is at most ${USAGE_DAYS_MAX} days`,
        ),
      ],
      responses: {
        "200": { description: "Usage", content: json("#/components/schemas/ConsoleUsage") },
        "400": err("A bad query parameter"),
        "401": signedOut,
      },
    },
  },
  "/v1/console/health": {
    get: {
      operationId: "consoleHealth",
      security: read,
      summary: "The server's health: readiness, pools, workers (cluster), image and its packages",
      responses: {
        "200": { description: "Health", content: json("#/components/schemas/ConsoleHealth") },
        "401": signedOut,
      },
    },
  },
  "/v1/console/exec": {
    post: {
      operationId: "consoleExec",
      security: write,
      summary:
        "Run code as one of this user's keys (its policy, quota and records): the body is /v1/exec's with key_id",
      requestBody: jsonBody({
        allOf: [
          { $ref: "#/components/schemas/ExecRequest" },
          { type: "object", required: ["key_id"], properties: { key_id: str } },
        ],
      }),
      responses: {
        "200": {
          description: "The run's result, as /v1/exec answers it",
          content: json("#/components/schemas/ExecResult"),
        },
        "400": err("The request failed validation (or the key's policy refuses it); nothing ran"),
        "401": signedOut,
        "403": csrf,
        "404": notYours,
        "429": err("The key's limit, a full queue or the queue deadline; retry later"),
        "503": err("The host cannot run sandboxes, or the server is shutting down"),
      },
    },
  },
};

const run = {
  type: "object",
  required: ["id", "key_id", "runtime", "status", "received_at"],
  properties: {
    id: str,
    key_id: str,
    key_name: nullable("string"),
    transport: str,
    runtime: str,
    status: str,
    received_at: int,
    duration_ms: nullable("integer"),
    isolation: nullable("string"),
    exit_reason: nullable("string"),
    exit_code: nullable("integer"),
    error_code: nullable("string"),
    worker: nullable("string"),
    session_record: nullable("string"),
  },
};

export const CONSOLE_SCHEMAS = {
  CreatedKey: {
    type: "object",
    required: ["id", "name", "key"],
    properties: {
      id: str,
      name: str,
      key: { ...str, description: "The secret: shown in this answer only, never stored" },
      policy: { ...policy, type: ["object", "null"] },
      expires_at: nullable("integer"),
    },
  },
  ConsoleRuns: {
    type: "object",
    required: ["runs", "next_before"],
    properties: {
      runs: { type: "array", items: run },
      next_before: { ...nullable("integer"), description: "Pass as before= for older runs" },
    },
  },
  ConsoleRun: {
    type: "object",
    required: ["run", "session", "key_name"],
    properties: {
      run: {
        type: "object",
        description:
          "Every column of the run's record (docs/ARCHITECTURE.md, the runs table): who, which runtime, network, limits, when it was received, started and finished, how it ended, the sizes and SHA-256 of its code, output and files",
        additionalProperties: { type: ["string", "integer", "null"] },
      },
      session: {
        type: ["object", "null"],
        description: "The session this run was a call of, as its record has it",
        properties: {
          id: str,
          runtime: str,
          started_at: int,
          ended_at: nullable("integer"),
          end_reason: nullable("string"),
          calls: nullable("integer"),
        },
      },
      key_name: nullable("string"),
    },
  },
  ConsoleUsage: {
    type: "object",
    required: ["since", "until", "days", "keys", "usage", "per_key", "total"],
    properties: {
      since: { ...str, description: "The first day (UTC)" },
      until: { ...str, description: "The last day, included" },
      days: int,
      keys: {
        type: "array",
        items: {
          type: "object",
          properties: { id: str, name: str, revoked_at: nullable("integer") },
        },
      },
      usage: {
        type: "array",
        items: {
          type: "object",
          required: ["key_id", "day", "runs", "duration_ms"],
          properties: { key_id: str, day: str, runs: int, duration_ms: int },
        },
      },
      per_key: {
        type: "array",
        items: {
          allOf: [
            { $ref: "#/components/schemas/UsageFigures" },
            { type: "object", required: ["key_id"], properties: { key_id: str } },
          ],
        },
      },
      total: { $ref: "#/components/schemas/UsageFigures" },
    },
  },
  UsageFigures: {
    type: "object",
    description:
      "From the run records of calls received in the period: compute is each run's duration (sandbox-seconds) and that times its memory (GB-seconds, 1 GB = 1024 MB), a session's idle time between calls in neither; peak_concurrency is the most runs at once; refusals are the runs the engine refused or failed, by error code",
    required: ["calls", "sandbox_seconds", "gb_seconds", "peak_concurrency", "refusals"],
    properties: {
      calls: int,
      sandbox_seconds: { type: "number" },
      gb_seconds: { type: "number" },
      peak_concurrency: int,
      refusals: { type: "object", additionalProperties: int },
    },
  },
  ConsoleHealth: {
    type: "object",
    required: ["status", "isolation", "version"],
    properties: {
      status: str,
      isolation: str,
      version: str,
      calls_in_flight: int,
      pools: { type: "object", description: "Each warm pool's state (as /readyz reports it)" },
      workers: { type: "object", description: "Cluster mode: workers by state (up, draining)" },
      runtimes: { type: "object", description: "The image manifest (as scratchrun_runtimes)" },
    },
  },
};
