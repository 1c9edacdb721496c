import type { AgentEvent, AgentOutcome, AgentRequest } from "../protocol/types.js";
import type { RuntimeName } from "../schema/exec.js";

/** Which boundary really ran a call. Reported in every result; never silently downgraded. */
export type Isolation = "microvm-kvm" | "microvm-tcg" | "namespace";

export type NetworkMode = "none" | "public";

/** One call, as a backend sees it: the agent request plus the resources around it. */
export interface SandboxJob {
  runtime: RuntimeName;
  memoryMb: number;
  network: NetworkMode;
  request: AgentRequest;
}

export interface RunOptions {
  signal: AbortSignal;
  onEvent?: (event: AgentEvent) => void;
}

/** What a backend reports for one call, beyond the agent's own outcome. */
export interface BackendOutcome {
  agent: AgentOutcome;
  isolation: Isolation;
  /** The kernel OOM-killed something in this sandbox (cgroup or guest counters). */
  oomKilled: boolean;
  /** ms spent acquiring the sandbox (pool take or cold start) before the request was sent. */
  sandboxReadyMs: number;
  /** Packets/connections the egress filter dropped, when the backend can count them cheaply. */
  blockedConnections?: number;
}

export interface Backend {
  readonly name: "microvm" | "namespace";
  readonly isolation: Isolation;
  /**
   * Runs one job in a fresh sandbox, used for this job only, whose every process has exited
   * before the promise settles; removing what is left of it on the host (cgroup directories,
   * network, uid) may follow in the background, and close() waits for that.
   */
  run(job: SandboxJob, options: RunOptions): Promise<BackendOutcome>;
  /**
   * Calls `listener` whenever a warm-pool sandbox is ready (its processes run, its cgroup is
   * populated), so the service can record it for crash recovery; returns the unsubscribe.
   */
  onSandboxReady(listener: () => void): () => void;
  /** Warm sandboxes that could serve a call of this runtime now, and how many the pool keeps. */
  warm(runtime: RuntimeName): { ready: number; target: number };
  /** Stops background work (pools) and destroys every sandbox this backend still owns. */
  close(): Promise<void>;
}
