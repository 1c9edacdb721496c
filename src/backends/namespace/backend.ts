import { randomBytes } from "node:crypto";
import type { ChildProcess } from "node:child_process";
import { createCgroup, detectCgroups, type Cgroup, type CgroupHost } from "../../jail/cgroup.js";
import { renderSeccompFilter } from "../../jail/seccomp.js";
import { spawnJailed } from "../../jail/spawn.js";
import { UidPool } from "../../jail/uids.js";
import { runAgentSession, waitForReady } from "../../protocol/session.js";
import { LIMITS } from "../../schema/limits.js";
import { WarmPool, type PooledVm } from "../pool.js";
import type { Backend, BackendOutcome, NetworkMode, RunOptions, SandboxJob } from "../types.js";
import { renderBwrapArgs } from "./bwrap-args.js";

export interface NamespaceBackendOptions {
  rootfsDir: string;
  agentDir: string;
  /** Hook for network "public": prepares a netns per sandbox (src/net). Absent: none only. */
  network?: NetworkProvider;
  /**
   * Jails kept started and waiting at the agent's READY, per network mode (public only with a
   * provider), at the default memory size, shared by every runtime; each serves one call. 0 or
   * absent: every call starts its own.
   */
  poolSize?: number;
}

export interface NetworkProvider {
  /** A fresh network namespace with egress rules; resolvConf is a host file path to bind. */
  create(id: string): Promise<{
    netnsPath: string;
    resolvConf: string;
    blockedCount(): Promise<number>;
    teardown(): Promise<void>;
  }>;
}

type Net = Awaited<ReturnType<NetworkProvider["create"]>>;

/** Grace the host gives the agent past the code's own timeout before destroying the sandbox. */
const HOST_GRACE_MS = 3000;
/** How long a pooled jail may take to say READY before it is given up. */
const READY_TIMEOUT_MS = 30_000;
const MiB = 1024 * 1024;

/** One started bubblewrap jail: its cgroup, host uid, network and top process. Used once. */
interface Jail extends PooledVm {
  readonly cgroup: Cgroup;
  readonly child: ChildProcess;
  readonly net: Net | undefined;
  /** SIGKILLs everything in the jail; resolves once its cgroup is empty. Memoised. */
  kill(): Promise<void>;
}

/**
 * The namespace backend: one bubblewrap jail per call, in its own cgroup, as its own host uid.
 * Every process of a call's jail has exited before run() settles; removing its cgroup, network
 * and uid follows in the background and close() waits for it. A warm pool keeps jails started to
 * the agent's READY so a call pays only for its code. It shares the host kernel (docs/SECURITY.md).
 */
export class NamespaceBackend implements Backend {
  readonly name = "namespace" as const;
  readonly isolation = "namespace" as const;
  private readonly uids = new UidPool();
  private readonly cgroups: CgroupHost;
  private readonly seccomp = renderSeccompFilter();
  private readonly live = new Set<ChildProcess>();
  /** Every run() in flight, so close() can wait for them. */
  private readonly inflight = new Set<Promise<unknown>>();
  /** Background removal of finished jails (cgroup directories, network, uid). */
  private readonly teardowns = new Set<Promise<void>>();
  private readonly closing = new AbortController();
  /** Keyed by network mode: a jail's network namespace is fixed when it starts. */
  readonly pool: WarmPool<Jail, NetworkMode>;
  /** Calls served by a pooled jail, and by a jail started for them. */
  readonly counters = { pooledCalls: 0, coldCalls: 0 };

  constructor(private readonly options: NamespaceBackendOptions) {
    this.cgroups = detectCgroups();
    const size = options.poolSize ?? 0;
    this.pool = new WarmPool<Jail, NetworkMode>((net, memoryMb) => this.prepare(memoryMb, net), {
      sizes: { none: size, public: options.network ? size : 0 },
      memoryMb: LIMITS.memoryMb.default,
      maxConcurrentBoots: 1,
    });
    this.pool.start();
  }

  onSandboxReady(listener: () => void): () => void {
    return this.pool.onReady(listener);
  }

  /** Jails serve every runtime: the same pool for each. */
  warm(): { ready: number; target: number } {
    const ready = this.pool.readyCount("none") + this.pool.readyCount("public");
    const size = this.options.poolSize ?? 0;
    return { ready, target: this.options.network ? 2 * size : size };
  }

  run(job: SandboxJob, options: RunOptions): Promise<BackendOutcome> {
    if (this.closing.signal.aborted) return Promise.reject(new Error("backend is closed"));
    const signal = AbortSignal.any([options.signal, this.closing.signal]);
    const p = this.runOnce(job, { ...options, signal });
    this.inflight.add(p);
    const forget = () => this.inflight.delete(p);
    p.then(forget, forget);
    return p;
  }

  private async runOnce(job: SandboxJob, options: RunOptions): Promise<BackendOutcome> {
    const started = Date.now();
    const pooled = await this.pool.takeOrAwait(job.network, job.memoryMb, options.signal);
    const jail = pooled ?? (await this.start(job.memoryMb, job.network));
    this.counters[pooled ? "pooledCalls" : "coldCalls"]++;
    try {
      const sandboxReadyMs = Date.now() - started;
      const agent = await runAgentSession(
        { input: jail.child.stdout!, output: jail.child.stdin! },
        job.request,
        {
          signal: options.signal,
          hardDeadlineMs: job.request.timeoutMs + HOST_GRACE_MS,
          alreadyReady: pooled !== null,
          ...(options.onEvent ? { onEvent: options.onEvent } : {}),
        },
      );
      // After DONE the agent exits by itself and takes the sandbox with it: give it a moment so
      // the kill finds an empty cgroup instead of polling for exiting processes.
      await Promise.race([jail.exited, new Promise((r) => setTimeout(r, 100).unref())]);
      await jail.kill();
      const stats = await jail.cgroup.stats();
      const blocked = jail.net ? await jail.net.blockedCount().catch(() => undefined) : undefined;
      return {
        agent,
        isolation: this.isolation,
        oomKilled: stats.oomKills > 0 || (agent.exit?.oomKills ?? 0) > 0,
        sandboxReadyMs,
        ...(blocked !== undefined ? { blockedConnections: blocked } : {}),
      };
    } finally {
      await jail.kill().catch(() => {});
      const gone = jail.destroy();
      this.teardowns.add(gone);
      void gone.then(() => this.teardowns.delete(gone));
    }
  }

  /** A jail for the pool: started and past the agent's READY, so a call sends its request at once. */
  private async prepare(memoryMb: number, network: NetworkMode): Promise<Jail> {
    const jail = await this.start(memoryMb, network);
    const ready = await waitForReady(
      jail.child.stdout!,
      AbortSignal.any([this.closing.signal, AbortSignal.timeout(READY_TIMEOUT_MS)]),
    );
    if (!ready.ok) {
      await jail.destroy();
      throw new Error(`pooled jail failed before READY: ${ready.failure.detail}`);
    }
    return jail;
  }

  /** Starts a jail: uid, cgroup, network, then bwrap with the agent as its pid 1. */
  private async start(memoryMb: number, network: NetworkMode): Promise<Jail> {
    const id = `ns-${randomBytes(6).toString("hex")}`;
    const uid = this.uids.acquire();
    const undo: (() => Promise<void>)[] = [async () => this.uids.release(uid)];
    const unwind = async () => {
      for (const step of undo) {
        try {
          await step();
        } catch {
          // Keep tearing down; leak checks in tests catch what is left.
        }
      }
    };
    try {
      const cgroup = await createCgroup(this.cgroups, id, {
        memoryBytes: memoryMb * MiB,
        pids: LIMITS.pids,
        cpuQuotaPercent: 100,
      });
      undo.unshift(() => cgroup.destroy());

      let net: Net | undefined;
      if (network === "public") {
        if (!this.options.network) throw new Error("network provider missing");
        net = await this.options.network.create(id);
        undo.unshift(net.teardown);
      }

      const argv = renderBwrapArgs({
        rootfsDir: this.options.rootfsDir,
        agentDir: this.options.agentDir,
        scratchBytes: LIMITS.scratchMb * MiB,
        network: net ? "shared" : "none",
        ...(net ? { resolvConf: net.resolvConf } : {}),
        seccompFd: 3,
      });
      const child = spawnJailed({
        cgroupProcsFiles: cgroup.procsFiles,
        uid,
        gid: uid,
        argv,
        stdioExtra: ["pipe"],
        ...(net ? { netnsPath: net.netnsPath } : {}),
      });
      this.live.add(child);
      let dead = false;
      const exited = new Promise<void>((resolve) =>
        child.once("exit", () => {
          dead = true;
          resolve();
        }),
      );
      child.on("error", () => {});
      for (const stream of child.stdio) stream?.on("error", () => {});
      const seccompPipe = child.stdio[3] as NodeJS.WritableStream | null;
      seccompPipe?.end(this.seccomp);
      // Agent diagnostics are sandbox-controlled bytes: drained, never logged.
      if (process.env.SCRATCHRUN_DEBUG_JAIL === "1") child.stderr?.pipe(process.stderr);
      else child.stderr?.resume();

      let killed: Promise<void> | undefined;
      const kill = () =>
        (killed ??= (async () => {
          await cgroup.killAll();
          if (!dead) child.kill("SIGKILL");
        })());
      undo.unshift(async () => {
        await kill();
        await exited;
        for (const stream of child.stdio) stream?.destroy();
        this.live.delete(child);
      });
      let destroyed: Promise<void> | undefined;
      return {
        memoryMb,
        cgroup,
        child,
        net,
        exited,
        get dead() {
          return dead;
        },
        kill,
        destroy: () => (destroyed ??= unwind()),
      };
    } catch (e) {
      await unwind();
      throw e;
    }
  }

  /** Cancels every call in flight; destroys the pool and every jail this backend started. */
  async close(): Promise<void> {
    this.closing.abort();
    for (const child of this.live) child.kill("SIGKILL");
    await Promise.allSettled([...this.inflight]);
    await this.pool.close();
    await Promise.all(this.teardowns);
  }
}
