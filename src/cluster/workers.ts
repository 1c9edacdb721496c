import type { Logger } from "../http/log.js";
import { ScratchRunError } from "../errors.js";
import type { RuntimeName } from "../schema/exec.js";
import type { Candidate } from "./choose.js";
import { WORKER_PATHS, workerStatusSchema, type WorkerStatus } from "./protocol.js";

/** How often each worker's status is polled without `pollMs` (SCRATCHRUN_WORKER_POLL_MS). */
export const DEFAULT_POLL_MS = 1000;

/**
 * An API replica's view of the workers: addresses from discovery (DNS of the headless Service:
 * the ready worker pods), each polled for its status about once a second. A worker that misses
 * `missLimit` polls in a row is down: every call this replica has on it fails at once with
 * WORKER_LOST (it may have run to its end or not: it is never re-run). A worker that answers
 * with a new worker_id restarted: the calls on its previous life are lost the same way.
 */
export interface WorkerTableOptions {
  /** Current worker addresses, "host:port" (IPv6 hosts in brackets). */
  discover: () => Promise<string[]>;
  token: string;
  logger: Logger;
  pollMs?: number;
  /** A poll without an answer within this is a miss. */
  pollTimeoutMs?: number;
  missLimit?: number;
  discoverMs?: number;
  /**
   * A worker was lost (stopped answering, or answers as a new process `keep`): its sessions went
   * with it.
   */
  onLost?: (addr: string, keep: string | null) => void;
  /** Each good status a worker answers (the sessions that ended there lately). */
  onStatus?: (addr: string, status: WorkerStatus) => void;
}

/** One call placed on a worker, failed by the table when that worker is lost. */
export interface PlacedCall {
  lose(error: ScratchRunError): void;
}

export interface WorkerView {
  readonly addr: string;
  readonly url: string;
  status: WorkerStatus | null;
  up: boolean;
  /** Still listed by discovery (a pod that is not ready, or gone, is not). */
  listed: boolean;
  misses: number;
  /** This replica's calls on it when its last status was taken (the status counts them). */
  callsAtPoll: number;
  readonly calls: Set<PlacedCall>;
  runtimes?: unknown;
}

const lost = (addr: string, why: string) =>
  new ScratchRunError("WORKER_LOST", `The worker ${addr} running this call ${why}`, {
    fix: "The call may or may not have run to its end; retry it if it is safe to run again",
  });

export class WorkerTable {
  readonly workers = new Map<string, WorkerView>();
  private pollTimer: NodeJS.Timeout | undefined;
  private discoverTimer: NodeJS.Timeout | undefined;
  private readonly polling = new Set<string>();
  private readonly pollMs: number;
  private readonly pollTimeoutMs: number;
  private readonly missLimit: number;
  private stopped = false;

  constructor(private readonly options: WorkerTableOptions) {
    this.pollMs = options.pollMs ?? DEFAULT_POLL_MS;
    this.pollTimeoutMs = options.pollTimeoutMs ?? Math.min(900, this.pollMs);
    this.missLimit = options.missLimit ?? 3;
  }

  /** Discovers and polls once (so a replica starts with a table), then keeps doing both. */
  async start(): Promise<void> {
    await this.discover();
    await Promise.all([...this.workers.keys()].map((a) => this.poll(a)));
    this.pollTimer = setInterval(() => {
      for (const addr of this.workers.keys()) void this.poll(addr);
    }, this.pollMs);
    this.discoverTimer = setInterval(() => void this.discover(), this.options.discoverMs ?? 2000);
    this.pollTimer.unref();
    this.discoverTimer.unref();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.pollTimer);
    clearInterval(this.discoverTimer);
  }

  private async discover(): Promise<void> {
    let found: string[];
    try {
      found = await this.options.discover();
    } catch (e) {
      // Keep the table as it is: the workers did not vanish because DNS hiccuped.
      this.options.logger.warn(
        { err: e instanceof Error ? e.message : String(e) },
        "worker discovery failed",
      );
      return;
    }
    const now = new Set(found);
    for (const addr of now)
      if (!this.workers.has(addr))
        this.workers.set(addr, {
          addr,
          url: `http://${addr}`,
          status: null,
          up: false,
          listed: true,
          misses: 0,
          callsAtPoll: 0,
          calls: new Set(),
        });
    for (const w of this.workers.values()) {
      w.listed = now.has(w.addr);
      // Unlisted and idle: forget it. Unlisted with calls (draining, or its pod is going away):
      // keep polling until they end, or until it is lost.
      if (!w.listed && w.calls.size === 0) this.workers.delete(w.addr);
    }
  }

  private async poll(addr: string): Promise<void> {
    if (this.polling.has(addr) || this.stopped) return;
    this.polling.add(addr);
    const callsAtPoll = this.workers.get(addr)?.calls.size ?? 0;
    try {
      const res = await fetch(`http://${addr}${WORKER_PATHS.status}`, {
        headers: { Authorization: `Bearer ${this.options.token}` },
        signal: AbortSignal.timeout(this.pollTimeoutMs),
      });
      const body: unknown = await res.json();
      const parsed = workerStatusSchema.safeParse(body);
      if (!res.ok || !parsed.success) throw new Error(`status answered HTTP ${res.status}`);
      const w = this.workers.get(addr);
      if (!w) return;
      const previous = w.status?.worker_id;
      if (previous !== undefined && previous !== parsed.data.worker_id) {
        this.loseCalls(w, "restarted");
        this.options.onLost?.(addr, parsed.data.worker_id);
      }
      if (!w.up)
        this.options.logger.info({ worker: addr, worker_id: parsed.data.worker_id }, "worker up");
      w.status = parsed.data;
      w.up = true;
      w.misses = 0;
      w.callsAtPoll = callsAtPoll;
      if (w.runtimes === undefined) void this.readInfo(w);
      this.options.onStatus?.(addr, parsed.data);
    } catch {
      this.miss(addr);
    } finally {
      this.polling.delete(addr);
    }
  }

  private async readInfo(w: WorkerView): Promise<void> {
    try {
      const res = await fetch(`${w.url}${WORKER_PATHS.info}`, {
        headers: { Authorization: `Bearer ${this.options.token}` },
        signal: AbortSignal.timeout(5000),
      });
      if (res.ok) w.runtimes = ((await res.json()) as { runtimes?: unknown }).runtimes ?? null;
    } catch {
      // read again after its next good poll
    }
  }

  /** A poll, or a connection to it, failed: after `missLimit` in a row the worker is down. */
  miss(addr: string): void {
    const w = this.workers.get(addr);
    if (!w) return;
    w.misses++;
    if (w.misses < this.missLimit) return;
    if (w.up) {
      this.options.logger.warn({ worker: addr, misses: w.misses }, "worker lost");
      this.options.onLost?.(addr, null);
    }
    w.up = false;
    this.loseCalls(w, "stopped answering");
    if (!w.listed) this.workers.delete(addr);
  }

  private loseCalls(w: WorkerView, why: string): void {
    const calls = [...w.calls];
    w.calls.clear();
    for (const c of calls) c.lose(lost(w.addr, why));
  }

  attach(addr: string, call: PlacedCall): void {
    const w = this.workers.get(addr);
    if (!w) return call.lose(lost(addr, "left the cluster"));
    w.calls.add(call);
  }

  detach(addr: string, call: PlacedCall): void {
    this.workers.get(addr)?.calls.delete(call);
  }

  /** Workers that may take a call now, as the chooser sees them. */
  candidates(runtime: RuntimeName): Candidate[] {
    const out: Candidate[] = [];
    for (const w of this.workers.values()) {
      const s = w.status;
      if (!w.up || !w.listed || !s || s.draining) continue;
      // Its last status, with this replica's own calls brought up to date (others' calls show
      // at the next poll; the worker itself refuses what it cannot take).
      const busy = Math.max(0, s.slots.active + s.slots.queued - w.callsAtPoll) + w.calls.size;
      out.push({
        id: w.addr,
        warm: s.warm[runtime]?.ready ?? 0,
        room: s.slots.max + s.slots.max_queued - busy,
        load: busy / Math.max(1, s.slots.max),
      });
    }
    return out;
  }

  /** Workers up (answering polls), and how many of those drain. */
  counts(): { up: number; draining: number; known: number } {
    let up = 0;
    let draining = 0;
    for (const w of this.workers.values()) {
      if (!w.up) continue;
      up++;
      if (w.status?.draining || !w.listed) draining++;
    }
    return { up, draining, known: this.workers.size };
  }

  /** Something every worker reports alike (isolation, network note, runtimes), from one up. */
  any(): WorkerView | undefined {
    for (const w of this.workers.values()) if (w.up && w.status) return w;
    return undefined;
  }
}
