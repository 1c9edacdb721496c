import { Agent, request, type IncomingMessage } from "node:http";
import { wireToError, wireToOutcome } from "../api/wire.js";
import type { EngineOptions, ExecuteOptions } from "../engine/engine.js";
import { cancelledOutcome, type ExecOutcome } from "../engine/result.js";
import { ScratchRunError } from "../errors.js";
import { RECORDABLE_CEILING, type Ceiling } from "../policy/host.js";
import type { ExecRequest } from "../schema/exec.js";
import { DEFAULT_POLICY, type CallPolicy } from "../schema/policy.js";
import type { Isolation } from "../backends/types.js";
import { choose } from "./choose.js";
import { WORKER_PATHS, workerEventSchema, type WorkerExecBody } from "./protocol.js";
import type { PlacedCall, WorkerTable } from "./workers.js";
import { requestToWire } from "../schema/validate.js";
import type { SessionInfo } from "../schema/session.js";
import {
  ClusterSessions,
  sessionNotFound,
  type ClusterSessionOptions,
  type SessionStartOptions,
} from "./sessions.js";
import { sessionLost } from "../api/session-records.js";

export interface DispatchOptions {
  token: string;
  replicaId: string;
  /** Workers a call may be offered to before it is refused (each refusal was before it started). */
  maxAttempts?: number;
  random?: () => number;
  /** The server-wide policy of callers without their own (default: the product's). */
  policy?: CallPolicy;
  /** Sessions on the workers, routed by their records (absent: sessions are off here). */
  sessions?: Omit<ClusterSessionOptions, "replicaId">;
}

/** How one attempt on one worker ended. */
type Attempt = { kind: "done"; outcome: ExecOutcome } | { kind: "refused"; error: ScratchRunError };

/**
 * An API replica's engine: the same `execute` as the local Engine, but each call goes straight to
 * a worker (no queue service): power of two choices among workers with room, preferring a warm
 * sandbox for the call's runtime. A worker that refuses before the call starts (busy, draining,
 * not listening) is skipped and the next one tried; once a worker has accepted the call it is
 * never sent anywhere else. Progress and output stream back from the worker as they happen.
 */
export class ClusterEngine {
  /** The server-wide policy; each key's own is laid over it by the service. */
  readonly policy: CallPolicy;
  /** A replica runs no sandbox: what a policy may name; each worker holds calls to its host's. */
  readonly ceiling: Ceiling = RECORDABLE_CEILING;

  /** Sessions on the workers (src/cluster/sessions.ts). */
  readonly sessions: ClusterSessions | null;

  constructor(
    readonly table: WorkerTable,
    private readonly dispatch: DispatchOptions,
  ) {
    this.policy = dispatch.policy ?? DEFAULT_POLICY;
    this.sessions = dispatch.sessions
      ? new ClusterSessions(
          table,
          (addr, path, body, signal) => postJson(addr, path, dispatch.token, body, signal),
          { ...dispatch.sessions, replicaId: dispatch.replicaId },
        )
      : null;
  }

  get sessionsOn(): boolean {
    return this.sessions?.on ?? false;
  }

  /** Starts a session on a worker; its placement goes into the session's record. */
  startSession(
    input: unknown,
    options: SessionStartOptions = {},
  ): Promise<SessionInfo & { placement: { worker: string; workerId: string | null } }> {
    if (!this.sessions) throw sessionNotFound();
    return this.sessions.start(input, options, this.policy);
  }

  endSession(id: string, owner = "local"): Promise<SessionInfo> {
    if (!this.sessions) throw sessionNotFound();
    return this.sessions.end(id, owner);
  }

  /**
   * A session's call goes to the worker holding it, and nowhere else: a refusal there is the
   * answer, a worker that is gone or restarted makes it SESSION_LOST (its record closed so).
   */
  private async sessionCall(req: ExecRequest, options: ExecuteOptions): Promise<ExecOutcome> {
    const placement = options.sessionPlacement;
    if (!this.sessions || !placement || !options.owner) throw sessionNotFound();
    if (!(await this.sessions.reachable(placement))) throw sessionLost();
    options.onProgress?.({ stage: "queued" });
    // Placed: its worker is the session's (the record's start and worker say so).
    options.onProgress?.({ stage: "starting", worker: placement.worker });
    let r: Attempt;
    try {
      r = await this.attempt(placement.worker, req, options, options.owner);
    } catch (e) {
      if (e instanceof ScratchRunError && e.code === "WORKER_LOST")
        await this.sessions.lose(placement);
      throw e;
    }
    if (r.kind === "done") return r.outcome;
    // Never connected: its process is gone, and the session with it.
    if (r.error.code === "NOT_READY" && r.error.message.includes("not accepting connections")) {
      await this.sessions.lose(placement);
      throw sessionLost();
    }
    throw r.error;
  }

  get backend(): { isolation: string } {
    return { isolation: this.table.any()?.status?.isolation ?? "unknown" };
  }

  get networkNote(): string {
    return this.table.any()?.status?.network_note ?? "as the workers allow";
  }

  /** The runtimes the workers' image has (scratchrun_runtimes), from any worker up. */
  get options(): Pick<EngineOptions, "runtimes"> {
    const r = this.table.any()?.runtimes as EngineOptions["runtimes"] | undefined;
    return r ? { runtimes: r } : {};
  }

  async execute(req: ExecRequest, options: ExecuteOptions = {}): Promise<ExecOutcome> {
    if (req.session_id !== undefined) return this.sessionCall(req, options);
    const arrived = Date.now();
    options.onProgress?.({ stage: "queued" });
    const tried = new Set<string>();
    let refusal: ScratchRunError | undefined;
    const attempts = this.dispatch.maxAttempts ?? 3;
    for (let i = 0; i < attempts; i++) {
      const pick = choose(
        this.table.candidates(req.runtime),
        this.dispatch.random ?? Math.random,
        tried,
      );
      if (!pick) break;
      tried.add(pick.id);
      const r = await this.attempt(pick.id, req, options);
      if (r.kind === "done") return r.outcome;
      // Busy somewhere is the answer to give (429, retry soon) over draining or unreachable.
      if (!refusal || r.error.code === "BUSY") refusal = r.error;
      if (options.signal?.aborted) break;
    }
    // Cancelled between attempts: answered as the local engine answers a call cancelled in its
    // queue, not refused.
    if (options.signal?.aborted)
      return cancelledOutcome(req, this.backend.isolation as Isolation, Date.now() - arrived);
    if (refusal) throw refusal;
    if (this.table.counts().up === 0)
      throw new ScratchRunError("NOT_READY", "No worker is available", {
        fix: "Check that worker pods run and are ready (kubectl get pods -l app.kubernetes.io/component=worker)",
      });
    throw new ScratchRunError("BUSY", "Every worker is busy", { fix: "Retry in a few seconds" });
  }

  private async attempt(
    addr: string,
    req: ExecRequest,
    options: ExecuteOptions,
    owner?: string,
  ): Promise<Attempt> {
    const controller = new AbortController();
    let lostWith: ScratchRunError | undefined;
    const placed: PlacedCall = {
      lose: (e) => {
        lostWith = e;
        controller.abort();
      },
    };
    const onAbort = () => controller.abort();
    options.signal?.addEventListener("abort", onAbort, { once: true });
    if (options.signal?.aborted) controller.abort();
    this.table.attach(addr, placed);
    const started = Date.now();
    let startedOnWorker = false;
    let isolation: string | undefined;
    const body: WorkerExecBody = {
      run_id: options.runId ?? "-",
      replica_id: this.dispatch.replicaId,
      // The worker parses it again: bytes as text or base64, and a session's call without the
      // defaults its caller did not name (decision 0013: those are left for the worker to fill).
      request: requestToWire(req),
      ...(options.egressAllow ? { egress_allow: [...options.egressAllow] } : {}),
      ...(owner ? { owner } : {}),
    };
    const cancelled = (): Attempt => ({
      kind: "done",
      outcome: cancelledOutcome(
        req,
        (isolation ?? this.backend.isolation) as Isolation,
        Date.now() - started,
      ),
    });
    try {
      let res: IncomingMessage;
      try {
        res = await post(addr, WORKER_PATHS.exec, this.dispatch.token, body, controller.signal);
      } catch (e) {
        if (lostWith) throw lostWith;
        if (options.signal?.aborted) return cancelled();
        // Never connected: nothing started there, another worker may take it.
        if (connectionRefused(e)) {
          this.table.miss(addr);
          return { kind: "refused", error: notReachable(addr) };
        }
        throw new ScratchRunError("WORKER_LOST", `The connection to worker ${addr} failed`, {
          cause: e,
          fix: "The call may or may not have run; retry it if it is safe to run again",
        });
      }
      const status = res.statusCode ?? 0;
      if (status !== 200) {
        const error = wireToError(status, safeJson((await readAll(res).catch(() => "")) || ""));
        if (status === 429 || status === 503) return { kind: "refused", error };
        throw error;
      }
      isolation = this.table.workers.get(addr)?.status?.isolation;
      try {
        for await (const line of ndjsonLines(res)) {
          const parsed = workerEventSchema.safeParse(safeJson(line));
          if (!parsed.success)
            throw new ScratchRunError("INTERNAL", `worker ${addr} sent a malformed event`);
          const e = parsed.data;
          if (e.t === "progress") {
            if (e.stage === "queued") continue;
            if (e.stage === "starting") {
              startedOnWorker = true;
              options.onProgress?.({ stage: "starting", worker: addr });
            } else options.onProgress?.({ stage: e.stage });
          } else if (e.t === "output") {
            options.onProgress?.({
              stage: "output",
              stream: e.stream,
              chunk: Buffer.from(e.data_base64, "base64"),
            });
          } else if (e.t === "result") {
            return { kind: "done", outcome: wireToOutcome(e.result) };
          } else {
            const error = new ScratchRunError(e.code as ScratchRunError["code"], e.message);
            // Refused in the worker's queue, before a sandbox was touched: try another worker.
            if (!startedOnWorker && (e.code === "BUSY" || e.code === "NOT_READY"))
              return { kind: "refused", error };
            throw error;
          }
        }
      } catch (e) {
        if (lostWith) throw lostWith;
        if (options.signal?.aborted) return cancelled();
        if (e instanceof ScratchRunError) throw e;
      }
      if (lostWith) throw lostWith;
      if (options.signal?.aborted) return cancelled();
      throw new ScratchRunError("WORKER_LOST", `Worker ${addr} broke off the call's answer`, {
        fix: "The call may or may not have run; retry it if it is safe to run again",
      });
    } finally {
      options.signal?.removeEventListener("abort", onAbort);
      this.table.detach(addr, placed);
    }
  }
}

function connectionRefused(e: unknown): boolean {
  return (e as { code?: string } | undefined)?.code === "ECONNREFUSED";
}

/**
 * One new connection per call (node:http: cheaper per call than fetch). A call's connection is
 * its lifeline: closing it cancels the call on the worker. Not reusing connections keeps "refused
 * before it started" unambiguous: a refused connect is the only connection error a call is
 * retried after; a kept-alive socket that a restarted or unplugged worker left half-open would
 * otherwise turn a fresh call into WORKER_LOST (or tempt a retry of a call the worker had read).
 */
const agent = new Agent({ keepAlive: false, maxSockets: Infinity });

function post(
  addr: string,
  path: string,
  token: string,
  body: unknown,
  signal: AbortSignal,
): Promise<IncomingMessage> {
  const url = new URL(`http://${addr}${path}`);
  const payload = Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: url.hostname.replace(/^\[|\]$/g, ""),
        port: url.port,
        path,
        method: "POST",
        agent,
        headers: {
          Authorization: `Bearer ${token}`,
          "Content-Type": "application/json",
          "Content-Length": String(payload.length),
        },
      },
      (res) => {
        signal.addEventListener("abort", () => res.destroy(new Error("aborted")), { once: true });
        resolve(res);
      },
    );
    const onAbort = () => req.destroy(new Error("aborted"));
    if (signal.aborted) onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    req.once("error", reject);
    req.end(payload);
  });
}

/** One JSON request to a worker, answered with its status and parsed body. */
async function postJson(
  addr: string,
  path: string,
  token: string,
  body: unknown,
  signal?: AbortSignal,
): Promise<{ status: number; body: unknown }> {
  const res = await post(addr, path, token, body, signal ?? new AbortController().signal);
  return { status: res.statusCode ?? 0, body: safeJson(await readAll(res)) };
}

async function readAll(res: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of res as AsyncIterable<Buffer>) chunks.push(c);
  return Buffer.concat(chunks).toString("utf8");
}

const notReachable = (addr: string) =>
  new ScratchRunError("NOT_READY", `Worker ${addr} is not accepting connections`);

function safeJson(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}

/** The lines of a newline-delimited JSON body, as they arrive. */
async function* ndjsonLines(body: AsyncIterable<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buffered = "";
  for await (const chunk of body) {
    buffered += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      if (line) yield line;
    }
  }
  if (buffered.trim()) yield buffered;
}
