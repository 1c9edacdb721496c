import type { PoolsReport } from "./pool.js";
import type { DomainAllowlist } from "../net/allowlist.js";
import type { Egress } from "./egress.js";
import type { Refusal } from "../net/proxy/reasons.js";
import type { BrokerSpec } from "../net/proxy/control.js";
import type { AgentEvent, AgentOutcome, AgentRequest } from "../protocol/types.js";
import type { ISOLATIONS, RuntimeName } from "../schema/exec.js";
import type { Flavour } from "./prestart.js";

/** Which boundary really ran a call. Reported in every result; never silently downgraded. */
export type Isolation = (typeof ISOLATIONS)[number];

/** A call's network mode: the schema's one definition. */
export type { NetworkMode } from "../schema/names.js";

/** One call, as a backend sees it: the agent request plus the resources around it. */
export interface SandboxJob {
  runtime: RuntimeName;
  memoryMb: number;
  /** Where its network goes: the engine's decision from the call, the server and the key. */
  egress: Egress;
  request: AgentRequest;
  /**
   * "preimport": the code starts by importing what the runtime's pre-imported interpreter has
   * imported (the engine decides, src/engine/preimport-route.ts), so such an interpreter may
   * serve it. Absent or "plain": a plain one.
   */
  flavour?: Flavour;
}

/** What a call's network refused: the filter's packet count and the proxy's named refusals. */
export interface NetworkReport {
  /** Packets dropped or refused by the sandbox's nftables rules. */
  blockedPackets: number;
  /** Allowlisted networks only: connections and lookups the proxy refused, by name. */
  refused?: Refusal[];
  /** Refusals beyond the distinct entries listed. */
  refusedDropped?: number;
  /**
   * Packets the filter let out that the host's own firewall then dropped (a forward chain after
   * ScratchRun's, such as Docker's FORWARD policy): the call's public network did not work.
   */
  hostDropped?: number;
}

/** The egress side of a "public" sandbox network, as both backends' providers give it. */
export interface NetworkEgress {
  /** The allowlist the network was made for (its traffic goes through the proxy), or null. */
  readonly allowlist: DomainAllowlist | null;
  /**
   * A proxied network: the allowlist of the call about to run (and its brokered secrets), set
   * before its code starts.
   */
  useAllowlist(allow: DomainAllowlist, broker?: BrokerSpec | null): Promise<void>;
  /** What was refused for this network's sandbox so far. */
  report(): Promise<NetworkReport>;
}

/** A sandbox for many calls, one at a time; `run` after `broken` or `close` throws. */
export interface SessionSandbox {
  /** The sandbox can take no more calls: its agent broke or ended, or it was closed. */
  readonly broken: boolean;
  /**
   * Runs one call in the sandbox (the engine's request; the backend adds the session's part).
   * `flavour`: the interpreter the call would get as a one-off call (src/engine/preimport-route.ts),
   * which decides whether a session's first kernel may be its sandbox's pre-started interpreter.
   */
  run(request: AgentRequest, options: RunOptions, flavour?: Flavour): Promise<BackendOutcome>;
  /** Kills every process of the sandbox and removes what it had on the host. Idempotent. */
  close(): Promise<void>;
}

/** A session's sandbox, as a backend sees it: what every call of the session shares. */
export interface SessionJob {
  runtime: RuntimeName;
  memoryMb: number;
  egress: Egress;
}

export interface RunOptions {
  signal: AbortSignal;
  onEvent?: (event: AgentEvent) => void;
  /** The sandbox is not ready yet and the backend waits for `what` (a progress line). */
  onWait?: (what: string) => void;
}

/** What a backend reports for one call, beyond the agent's own outcome. */
export interface BackendOutcome {
  agent: AgentOutcome;
  isolation: Isolation;
  /** The kernel OOM-killed something in this sandbox (cgroup or guest counters). */
  oomKilled: boolean;
  /** ms spent acquiring the sandbox (pool take or cold start) before the request was sent. */
  sandboxReadyMs: number;
  /** What the egress filter and proxy refused (network "public" only). */
  network?: NetworkReport;
}

export interface Backend {
  readonly name: "microvm" | "namespace";
  readonly isolation: Isolation;
  /**
   * The uid and gid the call's code runs as, decided here once for every call and session of this
   * backend: a number inside the sandbox's own kernel (microVM: the guest's unprivileged user), or
   * null for the agent's own ids (namespace: the jail's sandbox uid, already unprivileged).
   */
  readonly codeIds: number | null;
  /**
   * Runs one job in a fresh sandbox, used for this job only, whose every process has exited
   * before the promise settles; removing what is left of it on the host (cgroup directories,
   * network, uid) may follow in the background, and close() waits for that.
   */
  run(job: SandboxJob, options: RunOptions): Promise<BackendOutcome>;
  /**
   * A fresh sandbox for a session's calls (never a pooled one: the pool's are counted on by
   * calls), started cold and past READY; its calls run one at a time until it is closed.
   */
  openSession(job: SessionJob, signal: AbortSignal): Promise<SessionSandbox>;
  /**
   * Calls `listener` whenever a warm-pool sandbox is ready (its processes run, its cgroup is
   * populated), so the service can record it for crash recovery; returns the unsubscribe.
   */
  onSandboxReady(listener: () => void): () => void;
  /** Pooled sandboxes that could serve a call of this runtime now, and how many the pool keeps. */
  pooled(runtime: RuntimeName): { ready: number; target: number };
  /**
   * Each pool's state (/readyz): its kind, full / building / empty / off and since when, and
   * `fullAfterMs`, how long after start every pool was first full (null: not yet).
   */
  pools(): PoolsReport;
  /** Resolves with `fullAfterMs` once every pool is first full, or null if closed first. */
  whenPoolsFull(): Promise<number | null>;
  /** Stops background work (pools) and destroys every sandbox this backend still owns. */
  close(): Promise<void>;
}

export type { PoolsReport, PoolStatus } from "./pool.js";
