import { randomBytes } from "node:crypto";

/**
 * Calls that outlive their request: MCP tasks (the 2026-07-28 `io.modelcontextprotocol/tasks`
 * extension, and the 2025-11-25 core feature). A task is a call already running in this process,
 * its record (status, times, the result once done) kept here until its time to live passes. The
 * record is its caller's alone: a task id is 128 random bits, and a lookup under another owner
 * answers as for an id that never was, so one caller learns nothing of another's tasks.
 */

export type TaskStatus = "working" | "completed" | "failed" | "cancelled";

/** What a task's call ended in: the tool's result, or the JSON-RPC error it threw. */
export type TaskEnd =
  { result: Record<string, unknown> } | { error: { code: number; message: string } };

export interface TaskRecord {
  readonly taskId: string;
  readonly owner: string;
  status: TaskStatus;
  readonly createdAt: number;
  lastUpdatedAt: number;
  /** From creation: the record is dropped this long after createdAt. */
  readonly ttlMs: number;
  statusMessage?: string;
  end?: TaskEnd;
}

export interface TaskRegistryOptions {
  /** Finished records kept per owner; the oldest finished one goes first past this. */
  maxFinishedPerOwner?: number;
  /** The polling interval clients are told to keep. */
  pollIntervalMs?: number;
  now?: () => number;
}

/** Finished tasks kept per caller: results hold output and files, so memory stays bounded. */
export const MAX_FINISHED_TASKS_PER_OWNER = 32;
export const TASK_POLL_INTERVAL_MS = 1000;
/** How long a finished task's result stays after the call's own deadline. */
export const TASK_KEEP_MS = 10 * 60_000;

const TERMINAL = new Set<TaskStatus>(["completed", "failed", "cancelled"]);
export const isTerminal = (s: TaskStatus) => TERMINAL.has(s);

export class TaskRegistry {
  private readonly records = new Map<string, TaskRecord>();
  private readonly controllers = new Map<string, AbortController>();
  private readonly waiters = new Map<string, (() => void)[]>();
  private readonly maxFinished: number;
  readonly pollIntervalMs: number;
  private readonly now: () => number;

  constructor(options: TaskRegistryOptions = {}) {
    this.maxFinished = options.maxFinishedPerOwner ?? MAX_FINISHED_TASKS_PER_OWNER;
    this.pollIntervalMs = options.pollIntervalMs ?? TASK_POLL_INTERVAL_MS;
    this.now = options.now ?? Date.now;
  }

  /**
   * Records a call that is already running as `owner`'s task. `controller` stops it (a cancel);
   * `run` settles with how it ended (a rejection is recorded as an internal error).
   */
  adopt(
    owner: string,
    ttlMs: number,
    controller: AbortController,
    run: Promise<TaskEnd>,
  ): TaskRecord {
    this.purge();
    const at = this.now();
    const record: TaskRecord = {
      taskId: randomBytes(16).toString("base64url"),
      owner,
      status: "working",
      createdAt: at,
      lastUpdatedAt: at,
      ttlMs,
    };
    this.records.set(record.taskId, record);
    this.controllers.set(record.taskId, controller);
    run.then(
      (end) => this.settle(record, end),
      (e: unknown) =>
        this.settle(record, {
          error: { code: -32603, message: e instanceof Error ? e.message : String(e) },
        }),
    );
    return record;
  }

  /** `owner`'s task, or undefined for an unknown, expired or someone else's id. */
  get(owner: string, taskId: string): TaskRecord | undefined {
    this.purge();
    const record = this.records.get(taskId);
    return record && record.owner === owner ? record : undefined;
  }

  /** `owner`'s tasks, newest first (the 2025-11-25 tasks/list). */
  list(owner: string): TaskRecord[] {
    this.purge();
    return [...this.records.values()]
      .filter((r) => r.owner === owner)
      .sort((a, b) => b.createdAt - a.createdAt);
  }

  /**
   * Stops a working task: its call is aborted (its sandbox destroyed) and the task is cancelled
   * at once. Returns the record, or undefined when `get` would. A finished task stays as it is.
   */
  cancel(owner: string, taskId: string): TaskRecord | undefined {
    const record = this.get(owner, taskId);
    if (!record || isTerminal(record.status)) return record;
    this.controllers.get(taskId)?.abort();
    this.finish(record, "cancelled", "Cancelled by the client");
    return record;
  }

  /** Resolves once the task is finished (or gone). */
  async finished(owner: string, taskId: string): Promise<TaskRecord | undefined> {
    const record = this.get(owner, taskId);
    if (!record || isTerminal(record.status)) return record;
    await new Promise<void>((resolve) => {
      const list = this.waiters.get(taskId) ?? [];
      list.push(resolve);
      this.waiters.set(taskId, list);
    });
    return this.get(owner, taskId);
  }

  /** Stops every working task (the server is closing). */
  close(): void {
    for (const record of this.records.values())
      if (!isTerminal(record.status)) {
        this.controllers.get(record.taskId)?.abort();
        this.finish(record, "cancelled", "The server is shutting down");
      }
  }

  private settle(record: TaskRecord, end: TaskEnd): void {
    if (isTerminal(record.status)) return; // cancelled meanwhile: the late result is dropped
    record.end = end;
    this.finish(
      record,
      "result" in end ? "completed" : "failed",
      "error" in end ? end.error.message : undefined,
    );
  }

  private finish(record: TaskRecord, status: TaskStatus, message?: string): void {
    record.status = status;
    record.lastUpdatedAt = this.now();
    if (message !== undefined) record.statusMessage = message;
    this.controllers.delete(record.taskId);
    for (const wake of this.waiters.get(record.taskId) ?? []) wake();
    this.waiters.delete(record.taskId);
    this.trim(record.owner);
  }

  /** Past its time to live a record goes; a working one is cancelled first. */
  private purge(): void {
    const now = this.now();
    for (const record of this.records.values())
      if (now >= record.createdAt + record.ttlMs) {
        if (!isTerminal(record.status)) {
          this.controllers.get(record.taskId)?.abort();
          this.finish(record, "cancelled", "The task outlived its time to live");
        }
        this.drop(record.taskId);
      }
  }

  private trim(owner: string): void {
    const finished = [...this.records.values()]
      .filter((r) => r.owner === owner && isTerminal(r.status))
      .sort((a, b) => a.lastUpdatedAt - b.lastUpdatedAt);
    for (const r of finished.slice(0, Math.max(0, finished.length - this.maxFinished)))
      this.drop(r.taskId);
  }

  private drop(taskId: string): void {
    this.records.delete(taskId);
    this.controllers.delete(taskId);
    for (const wake of this.waiters.get(taskId) ?? []) wake();
    this.waiters.delete(taskId);
  }
}
