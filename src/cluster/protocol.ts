/**
 * What an API replica and a worker say to each other (internal; never exposed to clients):
 *
 * - `GET  /v1/worker/status` → WorkerStatus, polled about once a second by every replica.
 * - `GET  /v1/worker/info`   → WorkerInfo (runtimes from the image), read once per worker.
 * - `POST /v1/worker/exec`   → the call. A refusal before the call starts is an HTTP error
 *   (401, 400, 429 BUSY, 503 NOT_READY while draining) and the replica may place the call on
 *   another worker. Once accepted, the answer is `application/x-ndjson`: progress and output
 *   events, then exactly one `result` or `error` line. A replica that drops the connection
 *   cancels the call: the worker destroys its sandbox.
 *
 * - `POST /v1/worker/sessions`     → `{ session, worker_id }` (201): a session started here for
 *   `owner` (the caller's key id); refusals as for exec. A replica that drops the request before
 *   the answer ends the session it asked for.
 * - `POST /v1/worker/sessions/end` → `{ session }`: the owner's session ended (its running call
 *   cancelled, its sandbox destroyed); SESSION_NOT_FOUND (404) for any other.
 * - A session's call is an exec whose request names its session_id, with its `owner`.
 * - The status lists the sessions that ended here lately (by the SHA-256 of their id, with why
 *   and their calls), so that replicas close their records.
 *
 * Both sides authenticate with a shared secret (Authorization: Bearer, compared as SHA-256 in
 * constant time); workers hold no database credentials and no API keys.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { z } from "zod";
import { wireResultSchema } from "../api/wire.js";
import { ERROR_CODES } from "../errors.js";
import { ISOLATIONS, RUNTIMES } from "../schema/exec.js";

const count = z.number().int().min(0);

export const WORKER_PATHS = {
  status: "/v1/worker/status",
  info: "/v1/worker/info",
  exec: "/v1/worker/exec",
  sessions: "/v1/worker/sessions",
  sessionEnd: "/v1/worker/sessions/end",
} as const;

/** Why a session ended, as a worker reports it (the engine's reasons). */
export const SESSION_END_REASONS = [
  "ended",
  "idle",
  "lifetime",
  "shutdown",
  "crashed",
  "policy",
] as const;

/** A session that ended on a worker lately (kept in its status for ENDED_SESSIONS_KEPT_MS). */
export const endedSessionSchema = z.strictObject({
  id_sha256: z.string().regex(/^[0-9a-f]{64}$/),
  reason: z.enum(SESSION_END_REASONS),
  calls: count,
  at: count,
});
export type EndedSession = z.infer<typeof endedSessionSchema>;

/** How long a worker lists an ended session in its status (replicas poll about once a second). */
export const ENDED_SESSIONS_KEPT_MS = 60_000;

export const workerStatusSchema = z.strictObject({
  version: z.string(),
  /** Random per worker process: a new id at the same address means the worker restarted. */
  worker_id: z.string().min(1).max(64),
  isolation: z.enum(ISOLATIONS),
  network_note: z.string(),
  draining: z.boolean(),
  slots: z.strictObject({ max: count, active: count, queued: count, max_queued: count }),
  /** Warm sandboxes that could take a call of each runtime now (namespace: shared jails). */
  warm: z.strictObject(
    Object.fromEntries(RUNTIMES.map((r) => [r, z.strictObject({ ready: count, target: count })])),
  ),
  /** Sessions open here, and those that ended in the last ENDED_SESSIONS_KEPT_MS. */
  sessions: z
    .strictObject({ open: count, ended: z.array(endedSessionSchema).max(4096) })
    .optional(),
});
export type WorkerStatus = z.infer<typeof workerStatusSchema>;

export const workerInfoSchema = z.object({ runtimes: z.unknown().optional() });

export const workerExecBodySchema = z.strictObject({
  run_id: z.string().min(1).max(64),
  replica_id: z.string().min(1).max(128),
  /**
   * Validated again by the worker with the one request schema, up to its host's ceiling: the
   * replica has already held the call to its key's policy.
   */
  request: z.unknown(),
  /** The key's egress allowlist (domain patterns), when it has one; the worker's engine enforces it. */
  egress_allow: z.array(z.string().max(256)).max(256).optional(),
  /** For a call in a session: the caller's key id, whose session it must be. */
  owner: z.string().min(1).max(128).optional(),
});
export type WorkerExecBody = z.infer<typeof workerExecBodySchema>;

export const workerSessionStartSchema = z.strictObject({
  replica_id: z.string().min(1).max(128),
  owner: z.string().min(1).max(128),
  /** Validated by the worker with the session schema, up to its host's ceiling. */
  request: z.unknown(),
  egress_allow: z.array(z.string().max(256)).max(256).optional(),
});
export type WorkerSessionStart = z.infer<typeof workerSessionStartSchema>;

/**
 * A session's end: its caller's (by the id the caller holds), or a replica's for its key's policy
 * (by the id's SHA-256, which is all the records keep).
 */
export const workerSessionEndSchema = z.union([
  z.strictObject({
    owner: z.string().min(1).max(128),
    session_id: z.string().min(1).max(128),
  }),
  z.strictObject({
    owner: z.string().min(1).max(128),
    id_sha256: z.string().regex(/^[0-9a-f]{64}$/),
    reason: z.literal("policy"),
  }),
]);

export const workerEventSchema = z.discriminatedUnion("t", [
  z.strictObject({
    t: z.literal("progress"),
    stage: z.enum(["queued", "starting", "running", "collecting"]),
  }),
  z.strictObject({
    t: z.literal("output"),
    stream: z.enum(["stdout", "stderr"]),
    data_base64: z.string(),
  }),
  z.strictObject({ t: z.literal("result"), result: wireResultSchema }),
  z.strictObject({ t: z.literal("error"), code: z.enum(ERROR_CODES), message: z.string() }),
]);
export type WorkerEvent = z.infer<typeof workerEventSchema>;

const digest = (s: string) => createHash("sha256").update(s, "utf8").digest();

/** Constant-time check of a presented bearer token against the shared secret. */
export function tokenMatches(presented: string | null, secret: string): boolean {
  return timingSafeEqual(digest(presented ?? ""), digest(secret)) && presented !== null;
}
