import { createHash, randomUUID } from "node:crypto";
import type { ExecOutcome } from "../engine/result.js";
import type { ExecRequest } from "../schema/exec.js";
import type { Db } from "./db.js";
import { asDriver, type SqlDriver } from "./sql.js";
import { usageReport, type UsagePeriod, type UsageReport } from "./usage.js";

/**
 * One row per call: who, which runtime, when, how it ended, how big, and SHA-256 digests that let
 * an operator match a run to code or output they hold. Never the code, output, file contents,
 * env names or env values themselves.
 *
 * Every write after `begin` is idempotent (guarded by the row's status, or a plain overwrite of
 * the same values), so the Postgres driver may retry it across a failover (`retryMs`).
 */
export type RunStatus = "queued" | "running" | "finished" | "failed";

const sha256 = (data: string | Buffer) => createHash("sha256").update(data).digest("hex");
const bytes = (s: string) => Buffer.byteLength(s, "utf8");

export interface RunRow {
  id: string;
  key_id: string | null;
  transport: string;
  runtime: string;
  status: RunStatus;
  exit_reason: string | null;
  error_code: string | null;
  [column: string]: unknown;
}

/**
 * Who records a run: the replica (its lease) and, once placed, the worker that ran it; and the
 * session's record when the call ran in a session.
 */
export interface RunOwner {
  replicaId?: string | null;
  sessionRecord?: string | null;
}

/** When a call left the queue, and the worker it was placed on (API replicas). */
export interface RunStart {
  at: number;
  worker?: string | undefined;
}

/** What the console's run history asks for (RunStore.history). */
export interface RunFilter {
  keyIds: readonly string[];
  runtime?: string;
  exitReason?: string;
  /** Only the calls of this session (its record's id, runs.session_record). */
  session?: string;
  since?: number;
  before?: number;
  limit: number;
}

export interface RunSummary {
  id: string;
  key_id: string;
  transport: string;
  runtime: string;
  status: RunStatus;
  received_at: number;
  duration_ms: number | null;
  isolation: string | null;
  exit_reason: string | null;
  exit_code: number | null;
  error_code: string | null;
  worker: string | null;
  session_record: string | null;
}

/** The session a run was a call of, as its record has it (never the caller's session_id). */
export interface RunSession {
  id: string;
  runtime: string;
  started_at: number;
  ended_at: number | null;
  end_reason: string | null;
  calls: number | null;
}

/**
 * Everything recorded about one run (RunStore.one): every column of its row, which holds sizes
 * and digests, never code, output, file contents or env; and its session's record, if any.
 */
export interface RunRecord {
  /** Column → value; numbers as numbers on both stores. */
  run: Record<string, string | number | null>;
  session: RunSession | null;
}

export interface UsageRow {
  key_id: string;
  /** UTC, YYYY-MM-DD. */
  day: string;
  runs: number;
  duration_ms: number;
}

/** How long a record write keeps retrying across a lost database before it gives up. */
export const RECORD_RETRY_MS = 60_000;

/** The columns runInsertParams fills, in its order (status is 'queued'). */
export const RUN_INSERT_COLUMNS = [
  "id",
  "key_id",
  "transport",
  "runtime",
  "network",
  "timeout_ms",
  "memory_mb",
  "received_at",
  "code_bytes",
  "code_sha256",
  "env_count",
  "files_in_count",
  "files_in_bytes",
  "replica_id",
  "session_record",
] as const;

export const INSERT_RUN_SQL = `INSERT INTO runs (${RUN_INSERT_COLUMNS.join(", ")}, status)
         VALUES (${RUN_INSERT_COLUMNS.map(() => "?").join(", ")}, 'queued')`;

/** The parameters of INSERT_RUN_SQL for a call arriving now. */
export function runInsertParams(
  id: string,
  keyId: string | null,
  transport: "rest" | "mcp",
  req: ExecRequest,
  now: number,
  replicaId: string | null,
  sessionRecord: string | null = null,
): unknown[] {
  const files = Object.values(req.files);
  return [
    id,
    keyId,
    transport,
    req.runtime,
    req.network,
    req.timeout_ms,
    req.memory_mb,
    now,
    bytes(req.code),
    sha256(req.code),
    Object.keys(req.env).length,
    files.length,
    files.reduce((n, f) => n + f.length, 0),
    replicaId,
    sessionRecord,
  ];
}

export class RunStore {
  private readonly sql: SqlDriver;

  constructor(
    db: Db | SqlDriver,
    private readonly retryMs = RECORD_RETRY_MS,
  ) {
    this.sql = asDriver(db);
  }

  /** Records a call as it arrives (status queued); returns its run id. */
  async begin(
    keyId: string | null,
    transport: "rest" | "mcp",
    req: ExecRequest,
    now = Date.now(),
    owner: RunOwner = {},
  ): Promise<string> {
    const id = randomUUID();
    await this.sql.run(
      INSERT_RUN_SQL,
      runInsertParams(
        id,
        keyId,
        transport,
        req,
        now,
        owner.replicaId ?? null,
        owner.sessionRecord ?? null,
      ),
    );
    return id;
  }

  /** The call left the queue and a sandbox is being prepared (on `worker`, when dispatched). */
  async started(id: string, now = Date.now(), worker: string | null = null): Promise<void> {
    await this.sql.run(
      "UPDATE runs SET status = 'running', started_at = ?, worker = ? WHERE id = ? AND status = 'queued'",
      [now, worker, id],
      { retryMs: this.retryMs },
    );
  }

  /**
   * The call's end, with its start when `started` was never written for it (a call shorter than
   * the service's STARTED_RECORD_DELAY_MS): one statement instead of two.
   */
  async finished(
    id: string,
    outcome: ExecOutcome,
    now = Date.now(),
    start: RunStart | null = null,
  ): Promise<void> {
    const r = outcome.result;
    const filesDigest = createHash("sha256");
    let filesBytes = 0;
    for (const f of outcome.files) {
      filesDigest.update(`${f.path}\0${sha256(f.content)}\n`);
      filesBytes += f.content.length;
    }
    await this.sql.run(
      `UPDATE runs SET status = 'finished', finished_at = ?, duration_ms = ?, isolation = ?,
           exit_reason = ?, exit_code = ?, signal = ?, stdout_bytes = ?, stdout_sha256 = ?,
           stderr_bytes = ?, stderr_sha256 = ?, files_out_count = ?, files_out_bytes = ?,
           files_out_sha256 = ?, error_code = NULL,
           started_at = COALESCE(started_at, ?), worker = COALESCE(worker, ?)
         WHERE id = ?`,
      [
        now,
        r.duration_ms,
        r.isolation,
        r.exit_reason,
        r.exit_code,
        r.signal,
        bytes(r.stdout),
        sha256(r.stdout),
        bytes(r.stderr),
        sha256(r.stderr),
        outcome.files.length,
        filesBytes,
        filesDigest.digest("hex"),
        start?.at ?? null,
        start?.worker ?? null,
        id,
      ],
      { retryMs: this.retryMs },
    );
  }

  /**
   * The engine refused or failed the call (BUSY, NOT_READY, SANDBOX_FAILED, WORKER_LOST,
   * INTERNAL).
   */
  async failed(
    id: string,
    errorCode: string,
    now = Date.now(),
    start: RunStart | null = null,
  ): Promise<void> {
    await this.sql.run(
      `UPDATE runs SET status = 'failed', finished_at = ?, error_code = ?,
           started_at = COALESCE(started_at, ?), worker = COALESCE(worker, ?)
         WHERE id = ? AND status IN ('queued', 'running')`,
      [now, errorCode, start?.at ?? null, start?.worker ?? null, id],
      { retryMs: this.retryMs },
    );
  }

  /**
   * At server start: every run still queued or running belonged to a server that died (crash,
   * kill -9, power loss). They are marked failed with error_code INTERRUPTED.
   */
  markInterrupted(now = Date.now()): Promise<number> {
    return this.sql.run(
      "UPDATE runs SET status = 'failed', finished_at = ?, error_code = 'INTERRUPTED' WHERE status IN ('queued', 'running')",
      [now],
    );
  }

  get(id: string): Promise<RunRow | undefined> {
    return this.sql.get<RunRow>("SELECT * FROM runs WHERE id = ?", [id]);
  }

  all(): Promise<RunRow[]> {
    return this.sql.all<RunRow>("SELECT * FROM runs ORDER BY received_at, id");
  }

  /**
   * The console's run history: the runs of `keyIds` (never others), newest first, filtered and
   * paged (`before`: the received_at of the last row of the previous page). Only the columns a
   * person browsing runs needs; the digests stay out.
   */
  async history(f: RunFilter): Promise<RunSummary[]> {
    if (f.keyIds.length === 0) return [];
    const where = [`key_id IN (${f.keyIds.map(() => "?").join(", ")})`];
    const params: unknown[] = [...f.keyIds];
    for (const [col, v] of [
      ["runtime", f.runtime],
      ["exit_reason", f.exitReason],
      ["session_record", f.session],
    ] as const)
      if (v !== undefined) {
        where.push(`${col} = ?`);
        params.push(v);
      }
    if (f.since !== undefined) {
      where.push("received_at >= ?");
      params.push(f.since);
    }
    if (f.before !== undefined) {
      where.push("received_at < ?");
      params.push(f.before);
    }
    params.push(f.limit);
    const rows = await this.sql.all<Record<string, unknown>>(
      `SELECT id, key_id, transport, runtime, status, received_at, duration_ms, isolation,
              exit_reason, exit_code, error_code, worker, session_record
         FROM runs WHERE ${where.join(" AND ")} ORDER BY received_at DESC, id LIMIT ?`,
      params,
    );
    const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));
    return rows.map((r) => ({
      id: String(r.id),
      key_id: String(r.key_id),
      transport: String(r.transport),
      runtime: String(r.runtime),
      status: r.status as RunStatus,
      received_at: Number(r.received_at),
      duration_ms: num(r.duration_ms),
      isolation: (r.isolation as string | null) ?? null,
      exit_reason: (r.exit_reason as string | null) ?? null,
      exit_code: num(r.exit_code),
      error_code: (r.error_code as string | null) ?? null,
      worker: (r.worker as string | null) ?? null,
      session_record: (r.session_record as string | null) ?? null,
    }));
  }

  /**
   * One run of `keyIds` (never another key's: undefined, as for no such run) with everything
   * recorded about it, for the console's run page.
   */
  async one(keyIds: readonly string[], id: string): Promise<RunRecord | undefined> {
    if (keyIds.length === 0) return undefined;
    const row = await this.sql.get<Record<string, unknown>>(
      `SELECT * FROM runs WHERE id = ? AND key_id IN (${keyIds.map(() => "?").join(", ")})`,
      [id, ...keyIds],
    );
    if (!row) return undefined;
    const out: Record<string, string | number | null> = {};
    for (const [col, v] of Object.entries(row))
      out[col] = v === null || v === undefined ? null : typeof v === "string" ? v : Number(v);
    let session: RunSession | null = null;
    if (typeof row.session_record === "string") {
      const s = await this.sql.get<Record<string, unknown>>(
        "SELECT id, runtime, started_at, ended_at, end_reason, calls FROM sessions WHERE id = ?",
        [row.session_record],
      );
      const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));
      if (s)
        session = {
          id: String(s.id),
          runtime: String(s.runtime),
          started_at: Number(s.started_at),
          ended_at: num(s.ended_at),
          end_reason: (s.end_reason as string | null) ?? null,
          calls: num(s.calls),
        };
    }
    return { run: out, session };
  }

  /** Calls per key per UTC day from `since` to before `until` (ms), for `keyIds` only. */
  async usage(
    keyIds: readonly string[],
    since: number,
    until = Number.MAX_SAFE_INTEGER,
  ): Promise<UsageRow[]> {
    if (keyIds.length === 0) return [];
    const rows = await this.sql.all<{ key_id: string; day: unknown; runs: unknown; ms: unknown }>(
      `SELECT key_id, received_at / 86400000 AS day, COUNT(*) AS runs,
              COALESCE(SUM(duration_ms), 0) AS ms
         FROM runs WHERE key_id IN (${keyIds.map(() => "?").join(", ")}) AND received_at >= ?
           AND received_at < ?
         GROUP BY key_id, received_at / 86400000 ORDER BY day, key_id`,
      [...keyIds, since, until],
    );
    return rows.map((r) => ({
      key_id: r.key_id,
      day: new Date(Math.floor(Number(r.day)) * 86_400_000).toISOString().slice(0, 10),
      runs: Number(r.runs),
      duration_ms: Number(r.ms),
    }));
  }

  /** Per key and in total over a period: calls, compute, peak concurrency, refusals (usage.ts). */
  report(p: UsagePeriod): Promise<UsageReport> {
    return usageReport(this.sql, p);
  }
}
