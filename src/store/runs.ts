import { createHash, randomUUID } from "node:crypto";
import type { ExecOutcome } from "../engine/result.js";
import type { ExecRequest } from "../schema/exec.js";
import { fileBytes } from "../schema/file-content.js";
import type { Db } from "./db.js";
import { asDriver, type SqlDriver } from "./sql.js";

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
    files.reduce((n, f) => n + fileBytes(f).length, 0),
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
}
