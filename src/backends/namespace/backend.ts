import { randomBytes } from "node:crypto";
import type { ChildProcess } from "node:child_process";
import {
  CPU_WEIGHT,
  createCgroup,
  detectCgroups,
  type Cgroup,
  type CgroupHost,
  type CgroupOptions,
  type CpuPriority,
} from "../../jail/cgroup.js";
import { renderSeccompFilter } from "../../jail/seccomp.js";
import { spawnJailed } from "../../jail/spawn.js";
import { UidPool } from "../../jail/uids.js";
import { waitForReady } from "../../protocol/session.js";
import { runCall, Teardowns } from "../call.js";
import type { Preimport } from "../../images/preimport.js";
import { RUNTIMES, type RuntimeName } from "../../schema/exec.js";
import { LIMITS } from "../../schema/limits.js";
import { PooledBackend, WarmPool, type PoolKey, type PooledVm, type PoolStart } from "../pool.js";
import type { DomainAllowlist } from "../../net/allowlist.js";
import { agentPrestartArgs } from "../prestart.js";
import type {
  Backend,
  BackendOutcome,
  NetworkEgress,
  NetworkMode,
  RunOptions,
  SandboxJob,
  SessionJob,
} from "../types.js";
import { sessionSandbox, type SessionSandbox } from "../session.js";
import { runtimeEntry } from "../../runtimes/table.js";
import { AGENT_MOUNT, renderBwrapArgs } from "./bwrap-args.js";
import { egressAllowlist, networkModeOf, poolServes } from "../egress.js";
import { UndoStack } from "../undo.js";

export interface NamespaceBackendOptions {
  rootfsDir: string;
  agentDir: string;
  /** Hook for network "public": prepares a netns per sandbox (src/net). Absent: none only. */
  network?: NetworkProvider;
  /**
   * Jails kept started and waiting at the agent's READY per runtime (its interpreter pre-started,
   * and for a runtime with a pre-import also that many with its modules imported), per network
   * mode (public only with a provider), at the default memory size; each serves one call. 0 or
   * absent: every call starts its own.
   */
  poolSize?: number;
  /** Per runtime instead of poolSize. */
  poolSizes?: Partial<Record<RuntimeName, number>>;
  /** Runtimes pooled only once called (no jail is kept for them before their first call). */
  poolOnceCalled?: readonly RuntimeName[];
  /** What each runtime's pre-imported interpreter imports (src/images/preimport.ts). */
  preimport?: Partial<Record<RuntimeName, Preimport>>;
  /** The jails' stderr (the agent's diagnostics) to ours (SCRATCHRUN_DEBUG_JAIL); default drained. */
  debugJail?: boolean;
}

export interface NetworkProvider {
  /** The allowlist pooled networks are made for: the server's (null: unrestricted egress). */
  readonly defaultAllowlist: DomainAllowlist | null;
  /**
   * A fresh network namespace with egress rules, unrestricted or (allowlist given) through the
   * egress proxy; resolvConf is a host file path to bind.
   */
  create(
    id: string,
    allowlist: DomainAllowlist | null,
  ): Promise<
    NetworkEgress & {
      netnsPath: string;
      resolvConf: string;
      teardown(): Promise<void>;
    }
  >;
}

type Net = Awaited<ReturnType<NetworkProvider["create"]>>;

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

/** How a jail starts: its memory, network, the agent's pre-start arguments and its CPU weight. */
interface JailStart {
  memoryMb: number;
  network: NetworkMode;
  /** With network "public": the allowlist its network is made for (null: unrestricted). */
  allowlist: DomainAllowlist | null;
  agentArgs: string[];
  priority: CpuPriority;
  /** A session's jail is freezable (stopped between its calls). */
  cgroupOptions?: CgroupOptions;
  /** Called with its cgroup once made (a pooled start raises its weight when a call waits). */
  onCgroup?: (cgroup: Cgroup) => void;
}

/**
 * The namespace backend: one bubblewrap jail per call, in its own cgroup, as its own host uid.
 * Every process of a call's jail has exited before run() settles; removing its cgroup, network
 * and uid follows in the background and close() waits for it. A warm pool keeps jails started to
 * the agent's READY so a call pays only for its code. It shares the host kernel (docs/SECURITY.md).
 */
export class NamespaceBackend extends PooledBackend<Jail> implements Backend {
  readonly name = "namespace" as const;
  readonly isolation = "namespace" as const;
  /** The agent's own: the jail's sandbox uid. */
  readonly codeIds = null;
  private readonly uids = new UidPool();
  private readonly cgroups: CgroupHost;
  private readonly seccomp = renderSeccompFilter();
  private readonly live = new Set<ChildProcess>();
  /** Every run() in flight, so close() can wait for them. */
  private readonly inflight = new Set<Promise<unknown>>();
  /** Background removal of finished jails (cgroup directories, network, uid). */
  private readonly teardowns = new Teardowns();
  private readonly closing = new AbortController();
  private readonly sessions = new Set<SessionSandbox>();
  /**
   * Keyed by network mode (a jail's network namespace is fixed when it starts), runtime (the
   * interpreter its agent pre-started) and flavour.
   */
  readonly pool: WarmPool<Jail>;
  /** Calls served by a pooled jail (pre-imported ones also counted apart), and by a cold one. */
  readonly counters = { pooledCalls: 0, preimportedCalls: 0, coldCalls: 0 };

  constructor(private readonly options: NamespaceBackendOptions) {
    super();
    this.cgroups = detectCgroups();
    const sizes: [PoolKey, number][] = [];
    for (const network of options.network ? (["none", "public"] as const) : (["none"] as const))
      for (const runtime of RUNTIMES) {
        const n = options.poolSizes?.[runtime] ?? options.poolSize ?? 0;
        sizes.push([{ network, runtime, flavour: "plain" }, n]);
        if (options.preimport?.[runtime])
          sizes.push([{ network, runtime, flavour: "preimport" }, n]);
      }
    this.pool = new WarmPool<Jail>((key, memoryMb, start) => this.prepare(memoryMb, key, start), {
      sizes,
      memoryMb: LIMITS.memoryMb.default,
      maxConcurrentBoots: 1,
      onceCalled: options.poolOnceCalled ?? [],
      // Back-to-back calls of one kind keep one more jail ready (a pre-imported one takes ~0.6 s
      // to start), until 20 s pass without one, and two start at once meanwhile: a plain jail
      // takes longer to start (~20 ms, most of it waiting on the kernel) than a short call takes
      // to run, so one start at a time left every other back-to-back call waiting for one.
      burst: { extra: 1, takes: 2, windowMs: 20_000, maxConcurrentBoots: 2 },
    });
    this.pool.start();
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

  /**
   * A jail for the job: a pooled pre-imported one if the engine chose that flavour (or the one
   * being started: it is further along than a plain interpreter importing the stack in the call),
   * else a pooled plain one (or the one being started), else a cold one whose agent pre-starts
   * nothing (the call would wait for it).
   */
  private async acquire(job: SandboxJob, signal: AbortSignal): Promise<Jail | null> {
    if (job.flavour === "preimport") {
      const key: PoolKey = {
        network: networkModeOf(job.egress),
        runtime: job.runtime,
        flavour: "preimport",
      };
      const jail = await this.pool.takeOrAwait(key, job.memoryMb, signal);
      if (jail) {
        this.counters.preimportedCalls++;
        return jail;
      }
    }
    const key: PoolKey = {
      network: networkModeOf(job.egress),
      runtime: job.runtime,
      flavour: "plain",
    };
    return this.pool.takeOrAwait(key, job.memoryMb, signal);
  }

  private async runOnce(job: SandboxJob, options: RunOptions): Promise<BackendOutcome> {
    const started = Date.now();
    const poolable = poolServes(job.egress, this.options.network?.defaultAllowlist ?? null);
    const pooled = poolable ? await this.acquire(job, options.signal) : null;
    const jail =
      pooled ??
      (await this.start({
        memoryMb: job.memoryMb,
        network: networkModeOf(job.egress),
        allowlist: egressAllowlist(job.egress),
        agentArgs: [],
        priority: "call",
      }));
    this.counters[pooled ? "pooledCalls" : "coldCalls"]++;
    return runCall(
      {
        input: jail.child.stdout!,
        output: jail.child.stdin!,
        alreadyReady: pooled !== null,
        useAllowlist: async (list, broker) => jail.net?.useAllowlist(list, broker),
        observe: async () => {
          // After DONE the agent exits by itself and takes the sandbox with it: give it a moment
          // so the kill finds an empty cgroup instead of polling for exiting processes. The
          // cgroup's OOM count and the network's refusals are final once it is stopped.
          await Promise.race([jail.exited, new Promise((r) => setTimeout(r, 100).unref())]);
          await jail.kill();
          const stats = await jail.cgroup.stats();
          const network = jail.net ? await jail.net.report().catch(() => undefined) : undefined;
          return { oomKills: stats.oomKills, network };
        },
        kill: () => jail.kill(),
        destroy: () => jail.destroy(),
      },
      job,
      options,
      { isolation: this.isolation, startedAt: started, teardowns: this.teardowns },
    );
  }

  /**
   * A session's jail: cold, at the call CPU weight, its agent without a pre-started interpreter
   * (the session's kernel is started by its first call), in a freezable cgroup: frozen from here
   * until its first call and between calls, thawed for each call.
   */
  async openSession(job: SessionJob, signal: AbortSignal): Promise<SessionSandbox> {
    if (this.closing.signal.aborted) throw new Error("backend is closed");
    const jail = await this.start({
      memoryMb: job.memoryMb,
      network: networkModeOf(job.egress),
      allowlist: egressAllowlist(job.egress),
      agentArgs: [],
      priority: "call",
      cgroupOptions: { freezable: true },
    });
    try {
      const ready = await waitForReady(
        jail.child.stdout!,
        AbortSignal.any([signal, this.closing.signal, AbortSignal.timeout(READY_TIMEOUT_MS)]),
      );
      if (!ready.ok) throw new Error(`session jail failed before READY: ${ready.failure.detail}`);
      const allow = egressAllowlist(job.egress);
      if (allow) await jail.net?.useAllowlist(allow);
    } catch (e) {
      await jail.destroy();
      throw e;
    }
    const { sessionScript } = runtimeEntry(job.runtime);
    const session = sessionSandbox(
      {
        input: jail.child.stdout!,
        output: jail.child.stdin!,
        kernel: sessionScript && `${AGENT_MOUNT}/${sessionScript}`,
        prestarted: null,
        ownClock: false,
        counters: async () => ({
          oomKills: (await jail.cgroup.stats()).oomKills,
          network: jail.net ? await jail.net.report() : undefined,
        }),
        exited: jail.exited,
        pause: async () => {
          await jail.cgroup.freeze();
        },
        resume: () => jail.cgroup.thaw(),
        kill: () => jail.kill(),
        destroy: () => jail.destroy(),
      },
      { isolation: this.isolation, teardowns: this.teardowns },
    );
    await jail.cgroup.freeze();
    this.sessions.add(session);
    void jail.exited.then(() => this.sessions.delete(session));
    return session;
  }

  /**
   * A jail for the pool: started with its runtime's interpreter pre-started (and for the
   * pre-import flavour its modules imported) and past the agent's READY, so a call sends its
   * request at once.
   */
  private async prepare(memoryMb: number, key: PoolKey, claim: PoolStart): Promise<Jail> {
    const { network = "none", runtime, flavour } = key;
    const args = agentPrestartArgs(
      runtime,
      flavour,
      this.options.preimport?.[runtime],
      AGENT_MOUNT,
    );
    const jail = await this.start({
      memoryMb,
      network,
      allowlist: this.options.network?.defaultAllowlist ?? null,
      agentArgs: args,
      priority: claim.claimed ? "call" : "background",
      // A call waiting for this jail raises it to a call's weight (pool.ts PoolStart).
      onCgroup: (cgroup) =>
        claim.onClaimed(() => void cgroup.setCpuWeight(CPU_WEIGHT.call).catch(() => {})),
    });
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

  /**
   * Starts a jail: uid, cgroup, network, then bwrap with the agent as its pid 1. A pooled jail
   * starts at the background CPU weight and is promoted when a call takes it.
   */
  private async start(o: JailStart): Promise<Jail> {
    const { memoryMb, network, allowlist, agentArgs, priority, cgroupOptions = {}, onCgroup } = o;
    const id = `ns-${randomBytes(6).toString("hex")}`;
    const undo = new UndoStack();
    try {
      const uid = this.uids.acquire();
      undo.push(() => this.uids.release(uid));

      const cgroup = await createCgroup(
        this.cgroups,
        id,
        {
          memoryBytes: memoryMb * MiB,
          pids: LIMITS.pids,
          cpuQuotaPercent: 100,
          cpuWeight: CPU_WEIGHT[priority],
        },
        cgroupOptions,
      );
      undo.push(() => cgroup.destroy());
      onCgroup?.(cgroup);

      let net: Net | undefined;
      if (network === "public") {
        if (!this.options.network) throw new Error("network provider missing");
        net = await this.options.network.create(id, allowlist);
        undo.push(net.teardown);
      }

      const argv = renderBwrapArgs({
        rootfsDir: this.options.rootfsDir,
        agentDir: this.options.agentDir,
        scratchBytes: LIMITS.scratchMb * MiB,
        network: net ? "shared" : "none",
        ...(net ? { resolvConf: net.resolvConf } : {}),
        seccompFd: 3,
        agentArgs,
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
      if (this.options.debugJail) child.stderr?.pipe(process.stderr);
      else child.stderr?.resume();

      let killed: Promise<void> | undefined;
      const kill = () =>
        (killed ??= (async () => {
          await cgroup.killAll();
          if (!dead) child.kill("SIGKILL");
        })());
      undo.push(async () => {
        await kill();
        await exited;
        for (const stream of child.stdio) stream?.destroy();
        this.live.delete(child);
      });
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
        promote: () => cgroup.setCpuWeight(CPU_WEIGHT.call),
        demote: () => cgroup.setCpuWeight(CPU_WEIGHT.background),
        destroy: () => undo.unwind(),
        usage: async () => ({
          pids: await cgroup.pids(),
          memoryBytes: (await cgroup.stats()).memoryBytes,
        }),
      };
    } catch (e) {
      await undo.unwind();
      throw e;
    }
  }

  /** Cancels every call in flight; destroys the pool and every jail this backend started. */
  async close(): Promise<void> {
    this.closing.abort();
    await Promise.all([...this.sessions].map((s) => s.close()));
    for (const child of this.live) child.kill("SIGKILL");
    await Promise.allSettled([...this.inflight]);
    await this.pool.close();
    await this.teardowns.drain();
  }
}
