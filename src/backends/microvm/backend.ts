/**
 * The microVM backend: every call runs in its own QEMU microvm (own guest kernel), taken from the
 * warm pool or cold-booted, used once and killed before run() settles (its cgroup empty; the rest
 * of its teardown runs in the background and close() waits for it).
 *
 * Read top to bottom, the class says where a call's VM comes from: run() → acquire() → a pooled
 * clone or one restored now (pooledOrRestored(), templates from TemplateCache) → clone() or a
 * cold boot(); then what the pool parks (prepare(), warmed up as WarmUpPolicy says), a session's
 * VM, and the reports.
 */
import { availableParallelism } from "node:os";
import type { Lease } from "../../images/lease.js";
import { ScratchRunError } from "../../errors.js";
import { CPU_WEIGHT, type Cgroup, type CpuPriority } from "../../jail/cgroup.js";
import { runCall, Teardowns } from "../call.js";
import type { RuntimeName } from "../../schema/exec.js";
import { LIMITS } from "../../schema/limits.js";
import type {
  Backend,
  BackendOutcome,
  Isolation,
  RunOptions,
  SandboxJob,
  SessionJob,
} from "../types.js";
import { isolationOf } from "./accel.js";
import { runtimeEntry } from "../../runtimes/table.js";
import { sessionSandbox, type SessionSandbox } from "../session.js";
import type { Preimport } from "../../images/preimport.js";
import type { VmNetworkProvider } from "./guest-net.js";
import { PooledBackend, WarmPool, type PoolConfig, type PoolKey, type PoolStart } from "../pool.js";
import { PREIMPORT_MIN_MEMORY_MB, prestartInterpreter, type Flavour } from "../prestart.js";
import { CODE_UID } from "../../protocol/guest-header.js";
import type { Template } from "./snapshot.js";
import type { TemplateStore } from "./template-store.js";
import { TemplateCache } from "./template-cache.js";
import { WarmUpPolicy } from "./warm-up-policy.js";
import { MicroVm } from "./vm.js";
import type { HostContext, StartMode, WarmUp } from "./vm-types.js";
import {
  egressAllowlist,
  egressFor,
  NO_EGRESS,
  networkModeOf,
  poolServes,
  type Egress,
} from "../egress.js";

/** The unprivileged user inside the guest that runs the code (the image's `user`). */
export const GUEST_UID = CODE_UID;

export interface PoolOptions {
  sizes?: Partial<Record<RuntimeName, number>>;
  /** Runtimes pooled only once called (their templates and clones wait for a first call). */
  onceCalled?: readonly RuntimeName[];
  memoryMb?: number;
  maxConcurrentBoots?: number;
  /**
   * "restore" (default): per runtime one snapshot template; pooled VMs are clones restored from it
   * and kept paused (no CPU, little RAM); calls without a pooled VM restore one too once the
   * template exists. "boot": pooled VMs are cold-booted and idle at READY.
   */
  mode?: "restore" | "boot";
  /** Restore mode's burst rule (default BURST); tests shorten its window. */
  burst?: NonNullable<PoolConfig["burst"]>;
}

/**
 * A runtime kind whose pooled clones were taken twice within BURST.windowMs keeps one more clone
 * ready until that long passes without a take (decision 0011, "Bursts"): back-to-back calls then
 * find a clone made while the previous call ran.
 */
const BURST = { extra: 1, takes: 2, windowMs: 20_000 } as const;
/**
 * How long a call that finds no clone of its kind waits for one being made before it restores its
 * own: a clone rehearsed for a burst is ready ~200 ms after it was started, and a clone restored
 * for the call runs it cold (~300 ms slower than a warmed one under TCG).
 */
const AWAIT_REFILL_MS = 300;
/**
 * How long a call routed to a pre-imported interpreter waits for its template's load from the
 * template store (about a second; longer only on a host whose disk or CPUs are busy) before it
 * takes a plain interpreter, which then imports the stack within the call's own timeout_ms.
 */
const LOAD_WAIT_MS = 20_000;
/** How a VM starts, whatever its mode: its size, abort, network and CPU weight. */
interface VmStart {
  memoryMb: number;
  signal?: AbortSignal;
  egress: Egress;
  priority: CpuPriority;
  /** Called with its cgroup once made (a pooled start raises its weight when a call waits). */
  onCgroup?: ((cgroup: Cgroup) => void) | undefined;
}

const BOOT: StartMode = { kind: "boot" };

/** A clone of `t`, warmed up as told before it is parked (a call's or a session's: not at all). */
function cloneOf(
  t: Template,
  warmUp: WarmUp = "none",
  warmAlso: readonly number[] = [],
): StartMode {
  return { kind: "clone", image: t.image, warmUp, ...(warmAlso.length ? { warmAlso } : {}) };
}

export class MicrovmBackend extends PooledBackend<MicroVm> implements Backend {
  readonly name = "microvm" as const;
  readonly isolation: Isolation;
  /** The guest's unprivileged user (the agent in the guest runs as root). */
  readonly codeIds = GUEST_UID;
  /** Keyed by runtime and flavour (a microVM gets its network when a call takes it). */
  readonly pool: WarmPool<MicroVm>;
  readonly mode: "restore" | "boot";
  private readonly live = new Set<MicroVm>();
  /** VMs serving a call right now (taken from the pool or started for it). */
  private readonly serving = new Set<MicroVm>();
  /** Destroys still finishing after their call returned (close() waits for them). */
  private readonly teardowns = new Teardowns();
  /** Calls getting their VM right now (before they are serving). */
  private acquiring = 0;
  /** How a clone made for the pool is warmed up: by the calls in flight and the last one's time. */
  private readonly warmUp: WarmUpPolicy;
  /**
   * What the backend has done so far: templates built, calls run in clones (in pre-imported
   * ones, in fully warmed ones, in rehearsed ones) / cold boots.
   */
  readonly counters = {
    templates: 0,
    /** Of those, templates loaded from the template store instead of booted. */
    templatesLoaded: 0,
    clonedCalls: 0,
    preimportedCalls: 0,
    warmedCalls: 0,
    rehearsedCalls: 0,
    bootedCalls: 0,
    /** Sessions started in a clone of a template / in a cold-booted VM. */
    clonedSessions: 0,
    bootedSessions: 0,
  };
  /** The snapshot templates clones are restored from (restore mode). */
  private readonly templates: TemplateCache;
  private closed = false;
  /**
   * Aborted by close(): VMs still booting for the pool or for a template are destroyed at once
   * instead of being awaited (a server asked to stop must not be killed mid-cleanup by a client
   * that waits only a few seconds, leaving a cgroup and a directory behind).
   */
  private readonly closing = new AbortController();

  private readonly ctx: HostContext;
  private readonly bootTimeoutMs: number;
  private readonly network: VmNetworkProvider | null;
  /** Marks the kernel and root disk this backend boots as in use, for the cache's prune. */
  private readonly lease: Lease | null;
  private readonly preimport: Partial<Record<RuntimeName, Preimport>>;

  constructor(o: {
    ctx: HostContext;
    bootTimeoutMs: number;
    pool?: PoolOptions | undefined;
    network?: VmNetworkProvider | null | undefined;
    lease?: Lease | null;
    preimport?: Partial<Record<RuntimeName, Preimport>> | undefined;
    cpus?: number | undefined;
    templateStore?: TemplateStore | null | undefined;
  }) {
    super();
    const { ctx } = o;
    const poolOptions = o.pool ?? {};
    this.ctx = ctx;
    this.bootTimeoutMs = o.bootTimeoutMs;
    this.network = o.network ?? null;
    this.lease = o.lease ?? null;
    this.preimport = o.preimport ?? {};
    this.warmUp = new WarmUpPolicy({
      accel: ctx.accel,
      cpus: o.cpus ?? availableParallelism(),
      busy: () => this.acquiring + this.serving.size,
    });
    this.isolation = isolationOf(ctx.accel);
    this.mode = poolOptions.mode ?? "restore";
    const memoryMb = poolOptions.memoryMb ?? LIMITS.memoryMb.default;
    this.templates = new TemplateCache({
      ctx,
      bootTimeoutMs: o.bootTimeoutMs,
      store: o.templateStore ?? null,
      keptMemoryMb: memoryMb,
      preimportFor: (runtime, mb) => this.preimportFor(runtime, mb),
      signal: this.closing.signal,
      onMade: (t) => {
        this.counters.templates++;
        if (t.loaded) this.counters.templatesLoaded++;
      },
    });
    const sizes: [PoolKey, number][] = [];
    for (const [runtime, n] of Object.entries(poolOptions.sizes ?? {}) as [RuntimeName, number][]) {
      sizes.push([{ runtime, flavour: "plain" }, n]);
      if (this.preimportFor(runtime, memoryMb)) sizes.push([{ runtime, flavour: "preimport" }, n]);
    }
    this.pool = new WarmPool<MicroVm>((key, mb, start) => this.prepare(key, mb, start), {
      sizes,
      memoryMb,
      maxConcurrentBoots: poolOptions.maxConcurrentBoots ?? 1,
      ...(poolOptions.onceCalled ? { onceCalled: poolOptions.onceCalled } : {}),
      ...(this.mode === "restore" ? { burst: poolOptions.burst ?? BURST } : {}),
    });
    this.pool.start();
  }

  async run(job: SandboxJob, options: RunOptions): Promise<BackendOutcome> {
    if (job.egress.kind !== "none" && !this.network)
      throw new ScratchRunError("INVALID_INPUT", "this microVM backend has no network provider", {
        fix: 'Pass network: "none", or start the server with public egress (SCRATCHRUN_NETWORK)',
      });
    const started = Date.now();
    this.acquiring++;
    this.warmUp.callStarted(job);
    const vm = await this.acquire(job, options.signal, options.onWait)
      .catch((err: unknown) => {
        this.pool.refillNow();
        throw err;
      })
      .finally(() => this.acquiring--);
    this.serving.add(vm);
    try {
      return await runCall(
        {
          input: vm.channel,
          output: vm.channel,
          alreadyReady: true, // activate() read READY
          useAllowlist: (list, broker) => vm.useAllowlist(list, broker),
          // The guest counts its own OOM kills (the agent reports them); QEMU's cgroup only
          // holds the VM as a whole.
          observe: async () => ({ oomKills: 0, network: await vm.networkReport() }),
          kill: () => vm.kill(),
          destroy: () => vm.destroy(),
        },
        job,
        options,
        {
          isolation: this.isolation,
          startedAt: started,
          teardowns: this.teardowns,
        },
      );
    } finally {
      this.serving.delete(vm);
      this.warmUp.callEnded();
      this.pool.refillNow();
    }
  }

  /**
   * A VM for a call: a pooled clone of its kind, else a clone of its template restored for it
   * (the plain template waited for if it is not built yet: TemplateCache.wait), else, in boot
   * mode or when the build failed, a cold boot. A call the engine routed to a pre-imported interpreter whose
   * template is not built yet takes the plain kind. Then resumed to READY. A clone that fails to
   * come up is replaced by a cold boot.
   */
  private async acquire(
    job: SandboxJob,
    signal: AbortSignal,
    onWait?: (what: string) => void,
  ): Promise<MicroVm> {
    const preimported =
      job.flavour === "preimport" && this.preimportFor(job.runtime, job.memoryMb) !== undefined;
    let vm = preimported ? await this.pooledOrRestored(job, "preimport", signal, onWait) : null;
    const fromPreimport = vm !== null;
    vm ??= await this.pooledOrRestored(job, "plain", signal);
    if (vm) {
      try {
        await vm.activate(this.bootTimeoutMs, networkModeOf(job.egress));
        if (vm.kind === "clone") this.counters.clonedCalls++;
        else this.counters.bootedCalls++;
        if (fromPreimport) this.counters.preimportedCalls++;
        if (vm.warmedUp === "full") this.counters.warmedCalls++;
        if (vm.warmedUp === "rehearse") this.counters.rehearsedCalls++;
        return vm;
      } catch {
        await vm.destroy();
      }
    }
    const booted = await this.startVm(this.forCall(job, signal), BOOT);
    try {
      await booted.activate(this.bootTimeoutMs, networkModeOf(job.egress));
    } catch (cause) {
      await booted.destroy();
      throw new ScratchRunError(
        "SANDBOX_FAILED",
        `microVM did not become ready: ${String(cause)}`,
        {
          cause,
        },
      );
    }
    this.counters.bootedCalls++;
    return booted;
  }

  /** A pooled VM of this kind for the call, or a clone of its template restored now, or null. */
  private async pooledOrRestored(
    job: SandboxJob,
    flavour: Flavour,
    signal: AbortSignal,
    onWait?: (what: string) => void,
  ): Promise<MicroVm | null> {
    let vm = poolServes(job.egress, this.network?.defaultAllowlist ?? null)
      ? await this.pool.takeOrAwait({ runtime: job.runtime, flavour }, job.memoryMb, signal, {
          refill: false,
          maxWaitMs: AWAIT_REFILL_MS,
        })
      : null;
    if (vm && job.egress.kind !== "none" && !vm.hasNetwork) {
      void vm.destroy(); // cannot happen with a provider; never serve "public" without a network
      vm = null;
    }
    if (!vm && this.mode === "restore") {
      const key = { runtime: job.runtime, memoryMb: job.memoryMb, flavour };
      let t = this.templates.built(key) ?? null;
      // A plain template is a cold boot that stops at the agent's seed step, so the call waits
      // about as long as its own cold boot would take, plus a clone's restore, and the calls after
      // it find the template built instead of cold-booting beside it (two VMs booting on the same
      // CPUs, each slower).
      if (!t && flavour === "plain") t = await this.templates.wait(key, signal);
      else if (!t && this.templates.keptOnDisk(key)) {
        // Kept on disk: loaded in about a second, where a plain interpreter imports the stack in
        // the call for seconds (more than timeout_ms's default under TCG).
        onWait?.(`loading ${job.runtime}'s pre-imported interpreter from disk`);
        t = await this.templates.wait(key, signal, LOAD_WAIT_MS);
      }
      // A pre-imported template to build imports for seconds: the call goes on to the plain
      // kind, and the build goes on for the calls after it.
      else if (!t) void this.templates.get(key).catch(() => {});
      if (t) vm = await this.startVm(this.forCall(job, signal), cloneOf(t)).catch(() => null);
    }
    return vm;
  }

  /**
   * A VM for a call, a session or the pool, started as `mode` says (a clone of a template, or a
   * cold boot), with a network when its egress needs one; tracked until it exits.
   */
  private async startVm(o: VmStart, mode: StartMode): Promise<MicroVm> {
    if (mode.kind === "boot" && this.closed)
      throw new ScratchRunError("NOT_READY", "the microVM backend is closed");
    const vm = await MicroVm.start(
      this.ctx,
      {
        memoryMb: o.memoryMb,
        priority: o.priority,
        readyTimeoutMs: this.bootTimeoutMs,
        ...(o.signal ? { signal: o.signal } : {}),
        ...(o.egress.kind !== "none" && this.network
          ? { network: this.network, egressAllowlist: egressAllowlist(o.egress) }
          : {}),
        onCgroup: o.onCgroup,
      },
      mode,
    );
    this.live.add(vm);
    void vm.exited.then(() => this.live.delete(vm));
    return vm;
  }

  /** How a call's or a session's VM starts: its size and network, at a call's CPU weight. */
  private forCall(job: SandboxJob | SessionJob, signal: AbortSignal): VmStart {
    return { memoryMb: job.memoryMb, signal, egress: job.egress, priority: "call" };
  }

  /**
   * A pooled VM: a paused clone of the runtime's template (restore mode), else a booted VM
   * waiting for its seed. With a network provider it gets a network now, since most calls ask
   * for "public" (the default) and building one costs tens of ms of ip/nft commands.
   */
  private async prepare(key: PoolKey, memoryMb: number, claim?: PoolStart): Promise<MicroVm> {
    const { runtime, flavour } = key;
    const egress = this.network ? egressFor("public", this.network.defaultAllowlist) : NO_EGRESS;
    const o: VmStart = { memoryMb, signal: this.closing.signal, egress, priority: "background" };
    if (this.mode === "boot") return this.startVm(o, BOOT);
    if (this.closed) throw new ScratchRunError("NOT_READY", "the microVM backend is closed");
    const t = await this.templates.get({ runtime, memoryMb, flavour });
    const { warmUp, warmAlso } = await this.warmUp.forClone(runtime, flavour);
    if (this.closed) throw new ScratchRunError("NOT_READY", "the microVM backend is closed");
    // A call waiting for this clone (takeOrAwait) raises it to a call's CPU weight.
    const onCgroup = (cgroup: Cgroup) =>
      claim?.onClaimed(() => void cgroup.setCpuWeight(CPU_WEIGHT.call).catch(() => {}));
    return this.startVm({ ...o, onCgroup }, cloneOf(t, warmUp, warmAlso));
  }

  /**
   * A session's VM: a clone restored for it from its runtime's template (the one a call of that
   * size clones: pre-imported where the runtime has a pre-import, else plain), at the call CPU
   * weight, never a pooled clone (those are counted on by calls); a cold boot while no template
   * of its size is built (a session starts no template build: the pool's and calls' do). Kept until the session ends,
   * stopped between calls. A clone's pre-started interpreter may become the session's kernel at
   * its first call (SessionParts.prestarted); a booted VM's agent started none.
   */
  async openSession(job: SessionJob, signal: AbortSignal): Promise<SessionSandbox> {
    if (job.egress.kind !== "none" && !this.network)
      throw new ScratchRunError("INVALID_INPUT", "this microVM backend has no network provider", {
        fix: 'Pass network: "none", or start the server with public egress (SCRATCHRUN_NETWORK)',
      });
    const { vm, prestarted } = await this.sessionVm(job, signal);
    try {
      await vm.activate(this.bootTimeoutMs, networkModeOf(job.egress));
      const allow = egressAllowlist(job.egress);
      if (allow) await vm.useAllowlist(allow);
      // Stopped from here until its first call, and between calls.
      await vm.keepControl();
      await vm.pause();
    } catch (cause) {
      await vm.destroy();
      throw new ScratchRunError(
        "SANDBOX_FAILED",
        `microVM did not become ready: ${String(cause)}`,
        {
          cause,
        },
      );
    }
    this.counters[vm.kind === "clone" ? "clonedSessions" : "bootedSessions"]++;
    const { sessionScript } = runtimeEntry(job.runtime);
    return sessionSandbox(
      {
        input: vm.channel,
        output: vm.channel,
        kernel: sessionScript && `/run/scratchrun-${sessionScript}`,
        prestarted,
        ownClock: true,
        // The guest counts its own OOM kills (the agent reports them per call).
        counters: async () => ({ oomKills: 0, network: await vm.networkReport() }),
        exited: vm.exited,
        pause: () => vm.pause(),
        resume: () => vm.resume(),
        kill: () => vm.kill(),
        destroy: () => vm.destroy(),
      },
      { isolation: this.isolation, teardowns: this.teardowns },
    );
  }

  /**
   * The session's VM, not yet activated: a clone of the built template of its size (the
   * pre-imported one first), restored now without a warm-up (the session's cells translate what
   * they run), or a cold boot.
   */
  private async sessionVm(
    job: SessionJob,
    signal: AbortSignal,
  ): Promise<{ vm: MicroVm; prestarted: Flavour | null }> {
    if (this.mode === "restore") {
      const flavours: Flavour[] = this.preimportFor(job.runtime, job.memoryMb)
        ? ["preimport", "plain"]
        : ["plain"];
      for (const flavour of flavours) {
        const t = this.templates.built({ runtime: job.runtime, memoryMb: job.memoryMb, flavour });
        if (!t) continue;
        const vm = await this.startVm(this.forCall(job, signal), cloneOf(t)).catch(() => null);
        if (vm) return { vm, prestarted: prestartInterpreter(job.runtime) ? flavour : null };
      }
    }
    return { vm: await this.startVm(this.forCall(job, signal), BOOT), prestarted: null };
  }

  /** The runtime's pre-import if a VM of memoryMb may have one (restore mode only). */
  private preimportFor(runtime: RuntimeName, memoryMb: number): Preimport | undefined {
    if (this.mode !== "restore" || memoryMb < PREIMPORT_MIN_MEMORY_MB) return undefined;
    return prestartInterpreter(runtime) ? this.preimport[runtime] : undefined;
  }

  /**
   * The snapshot template for (runtime, memoryMb, flavour), created on first use; shared by its
   * clones.
   */
  template(runtime: RuntimeName, memoryMb: number, flavour: Flavour = "plain"): Promise<Template> {
    return this.templates.get({ runtime, memoryMb, flavour });
  }

  /** Last template failure (the backend then cold-boots); for diagnostics. */
  get templateError(): unknown {
    return this.templates.error;
  }

  /** One entry per template save to the store that ended: null when saved, else its error. */
  get templateSaves(): readonly unknown[] {
    return this.templates.saves;
  }

  /**
   * Every template this backend has made or loaded so far (runtime/memory/flavour, ms, loaded),
   * once the saves of those it built are done: what `scratchrun templates` reports.
   */
  templatesKept(): Promise<{ slot: string; buildMs: number; loaded: boolean }[]> {
    return this.templates.list();
  }

  /**
   * Host pids of every process of every live VM (QEMU and its jail), or with `servingOnly` only of
   * the VMs running a call now; for diagnostics and tests.
   */
  async livePids(servingOnly = false): Promise<number[]> {
    const vms = servingOnly ? this.serving : this.live;
    const all = await Promise.all([...vms].map((vm) => vm.pids()));
    return all.flat();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.closing.abort();
    await this.pool.close();
    await Promise.all([...this.live].map((vm) => vm.destroy()));
    await this.teardowns.drain();
    await this.templates.close();
    this.lease?.release();
  }
}
