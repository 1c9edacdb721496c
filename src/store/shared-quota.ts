import type { KeyLimits } from "../policy/quota.js";
import type { ExecRequest } from "../schema/exec.js";
import { randomUUID } from "node:crypto";
import { RUN_INSERT_COLUMNS, runInsertParams } from "./runs.js";
import type { SqlDriver } from "./sql.js";

export type SharedAdmit =
  { ok: true; runId: string } | { ok: false; reason: "concurrency" | "rate"; retryAfterS: number };

/**
 * Per-key quota across API replicas, atomic in Postgres, in one round trip: the function
 * `scratchrun_admit` (migration 4) locks the key's row (recording its last use), counts the key's
 * runs still queued or running on replicas with a live lease (the in-flight count is the runs
 * table itself, so a dead replica's calls stop counting when its lease expires), applies the
 * token bucket stored in key_quota (the rule of `decideQuota`), and inserts the run. Two replicas
 * admitting the same key's calls at once take turns on the row lock.
 */
export async function admitShared(
  sql: SqlDriver,
  call: {
    keyId: string;
    transport: "rest" | "mcp";
    req: ExecRequest;
    replicaId: string;
    limits: KeyLimits;
    /** The session's record, for a call in a session. */
    sessionRecord?: string | null;
  },
  now = Date.now(),
): Promise<SharedAdmit> {
  const runId = randomUUID();
  const p = runInsertParams(
    runId,
    call.keyId,
    call.transport,
    call.req,
    now,
    call.replicaId,
    call.sessionRecord ?? null,
  );
  const run = Object.fromEntries(RUN_INSERT_COLUMNS.map((c, i) => [c, p[i]]));
  run.status = "queued";
  const row = await sql.get<{ ok: boolean; reason: string | null; retry_after_s: number }>(
    "SELECT ok, reason, retry_after_s FROM scratchrun_admit(?, ?, ?, ?, ?, ?::jsonb)",
    [
      call.keyId,
      now,
      call.limits.maxConcurrent,
      call.limits.ratePerMinute,
      call.limits.burst,
      JSON.stringify(run),
    ],
  );
  if (!row) throw new Error("scratchrun_admit returned no row");
  if (row.ok) return { ok: true, runId };
  return {
    ok: false,
    reason: row.reason === "rate" ? "rate" : "concurrency",
    retryAfterS: row.retry_after_s,
  };
}
