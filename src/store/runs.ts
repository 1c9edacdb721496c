import { createHash, randomUUID } from "node:crypto";
import type { ExecOutcome } from "../engine/result.js";
import type { ExecRequest } from "../schema/exec.js";
import type { Db } from "./db.js";

/**
 * One row per call: who, which runtime, when, how it ended, how big, and SHA-256 digests that let
 * an operator match a run to code or output they hold. Never the code, output, file contents,
 * env names or env values themselves.
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

export class RunStore {
  constructor(private readonly db: Db) {}

  /** Records a call as it arrives (status queued); returns its run id. */
  begin(
    keyId: string | null,
    transport: "rest" | "mcp",
    req: ExecRequest,
    now = Date.now(),
  ): string {
    const id = randomUUID();
    const files = Object.values(req.files);
    this.db
      .prepare(
        `INSERT INTO runs (id, key_id, transport, runtime, network, timeout_ms, memory_mb, status,
           received_at, code_bytes, code_sha256, env_count, files_in_count, files_in_bytes)
         VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?)`,
      )
      .run(
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
        files.reduce((n, f) => n + bytes(f), 0),
      );
    return id;
  }

  /** The call left the queue and a sandbox is being prepared. */
  started(id: string, now = Date.now()): void {
    this.db
      .prepare(
        "UPDATE runs SET status = 'running', started_at = ? WHERE id = ? AND status = 'queued'",
      )
      .run(now, id);
  }

  finished(id: string, outcome: ExecOutcome, now = Date.now()): void {
    const r = outcome.result;
    const filesDigest = createHash("sha256");
    let filesBytes = 0;
    for (const f of outcome.files) {
      filesDigest.update(`${f.path}\0${sha256(f.content)}\n`);
      filesBytes += f.content.length;
    }
    this.db
      .prepare(
        `UPDATE runs SET status = 'finished', finished_at = ?, duration_ms = ?, isolation = ?,
           exit_reason = ?, exit_code = ?, signal = ?, stdout_bytes = ?, stdout_sha256 = ?,
           stderr_bytes = ?, stderr_sha256 = ?, files_out_count = ?, files_out_bytes = ?,
           files_out_sha256 = ?
         WHERE id = ?`,
      )
      .run(
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
        id,
      );
  }

  /** The engine refused or failed the call (BUSY, NOT_READY, SANDBOX_FAILED, INTERNAL). */
  failed(id: string, errorCode: string, now = Date.now()): void {
    this.db
      .prepare(
        "UPDATE runs SET status = 'failed', finished_at = ?, error_code = ? WHERE id = ? AND status IN ('queued', 'running')",
      )
      .run(now, errorCode, id);
  }

  /**
   * At server start: every run still queued or running belonged to a server that died (crash,
   * kill -9, power loss). They are marked failed with error_code INTERRUPTED.
   */
  markInterrupted(now = Date.now()): number {
    return this.db
      .prepare(
        "UPDATE runs SET status = 'failed', finished_at = ?, error_code = 'INTERRUPTED' WHERE status IN ('queued', 'running')",
      )
      .run(now).changes;
  }

  get(id: string): RunRow | undefined {
    return this.db.prepare("SELECT * FROM runs WHERE id = ?").get(id) as RunRow | undefined;
  }

  all(): RunRow[] {
    return this.db.prepare("SELECT * FROM runs ORDER BY received_at, id").all() as RunRow[];
  }
}
