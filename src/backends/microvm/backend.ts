/**
 * The microVM backend: every call runs in its own QEMU microvm (own guest kernel), taken from the
 * warm pool or cold-booted, used once and killed before run() settles (its cgroup empty; the rest
 * of its teardown runs in the background and close() waits for it).
 *
 * Read top to bottom, the class says where a call's VM comes from: run() → vmFor(): a pooled
 * clone of its kind, else a clone of its template restored now (TemplateCache.forCall), else a
 * cold boot, started by the fleet (fleet.ts, vm-start.ts) and activated; then what the pool parks
 * (prepare(), warmed up as WarmUpPolicy says), a session's VM (session-vm.ts), and the reports.
 */
import { availableParallelism } from "node:os";
import type { Lease } from "../../images/lease.js";
import { ScratchRunError } from "../../errors.js";
import { CPU_WEIGHT, type Cgroup } from "../../jail/cgroup.js";
import { runCall, Teardowns } from "../call.js";
import type { RuntimeName } from "../../schema/exec.js";
import type {
  Backend,
  BackendOutcome,
  Isolation,
  RunOptions,
  SandboxJob,
  SessionJob,
} from "../types.js";
import { isolationOf } from "./accel.js";
import type { SessionSandbox } from "../session.js";
import type { Preimport } from "../../images/preimport.js";
import type { VmNetworkProvider } from "./guest-net.js";
import { PooledBackend, WarmPool, type PoolKey, type PoolStart } from "../pool.js";
import type { Flavour } from "../prestart.js";
import { CODE_UID } from "../../protocol/guest-header.js";
import type { Template } from "./snapshot.js";
import type { TemplateStore } from "./template-store.js";
import { TemplateCache } from "./template-cache.js";
import { WarmUpPolicy } from "./warm-up-policy.js";
import { callStart, VmFleet, type VmStart } from "./fleet.js";
import { poolConfig, pooledMemoryMb, type PoolOptions } from "./pool-config.js";
import { openVmSession } from "./session-vm.js";
import type { MicroVm } from "./vm.js";
import type { HostContext } from "./vm-types.js";
import { egressFor, NO_EGRESS, networkModeOf, poolServes } from "../egress.js";

/** The unprivileged user inside the guest that runs the code (the image's `user`). */
export const GUEST_UID = CODE_UID;

/**
 * How long a call that finds no clone of its kind waits for one being made before it restores its
 * own: a clone rehearsed for a burst is ready ~200 ms after it was started, and a clone restored
 * for the call runs it cold (~300 ms slower than a warmed one under TCG).
 */
const AWAIT_REFILL_MS = 300;

export class MicrovmBackend extends PooledBackend<MicroVm> implements Backend {
  readonly name = "microvm" as const;
  readonly isolation: Isolation;
  /** The guest's unprivileged user (the agent in the guest runs as root). */
  readonly codeIds = GUEST_UID;
  /** Keyed by runtime and flavour (a microVM gets its network when a call takes it). */
  readonly pool: WarmPool<MicroVm>;
  readonly mode: "restore" | "boot";
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
  /**
   * Aborted by close(): VMs still booting for the pool or for a template are destroyed at once
   * instead of being awaited (a server asked to stop must not be killed mid-cleanup by a client
   * that waits only a few seconds, leaving a cgroup and a directory behind).
   */
  private readonly closing = new AbortController();

  /** Every VM this backend started, until it exits. */
  private readonly vms: VmFleet;
  private readonly bootTimeoutMs: number;
  private readonly network: VmNetworkProvider | null;
  /** Marks the kernel and root disk this backend boots as in use, for the cache's prune. */
  private readonly lease: Lease | null;

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
    this.bootTimeoutMs = o.bootTimeoutMs;
    this.network = o.network ?? null;
    this.vms = new VmFleet({ ctx, bootTimeoutMs: o.bootTimeoutMs, network: this.network });
    this.lease = o.lease ?? null;
    this.warmUp = new WarmUpPolicy({
      accel: ctx.accel,
      cpus: o.cpus ?? availableParallelism(),
      busy: () => this.acquiring + this.serving.size,
    });
    this.isolation = isolationOf(ctx.accel);
    this.mode = poolOptions.mode ?? "restore";
    this.templates = new TemplateCache({
      ctx,
      bootTimeoutMs: o.bootTimeoutMs,
      store: o.templateStore ?? null,
      keptMemoryMb: pooledMemoryMb(poolOptions),
      preimport: this.mode === "restore" ? (o.preimport ?? {}) : {},
      signal: this.closing.signal,
      onMade: (t) => {
        this.counters.templates++;
        if (t.loaded) this.counters.templatesLoaded++;
      },
    });
    this.pool = new WarmPool<MicroVm>(
      (key, mb, start) => this.prepare(key, mb, start),
      poolConfig(poolOptions, (r, mb) => this.templates.preimportFor(r, mb) !== undefined),
    );
    this.pool.start();
  }

  async run(job: SandboxJob, options: RunOptions): Promise<BackendOutcome> {
    this.refuseWithoutNetwork(job);
    const started = Date.now();
    this.acquiring++;
    this.warmUp.callStarted(job);
    const vm = await this.vmFor(job, options.signal, options.onWait)
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
   * Where a call's VM comes from: a pooled clone of its kind; else a clone of its template
   * restored for it now (TemplateCache.forCall says which template a call waits for); else, in
   * boot mode or when the template failed, a cold boot. A call the engine routed to a pre-imported
   * interpreter tries that kind first, then the plain one. Then resumed to READY; a clone that
   * fails to come up is replaced by a cold boot.
   */
  private async vmFor(
    job: SandboxJob,
    signal: AbortSignal,
    onWait?: (what: string) => void,
  ): Promise<MicroVm> {
    const start = callStart(job, signal);
    const flavours: Flavour[] =
      job.flavour === "preimport" && this.templates.preimportFor(job.runtime, job.memoryMb)
        ? ["preimport", "plain"]
        : ["plain"];
    let vm: MicroVm | null = null;
    let fromPreimport = false;
    for (const flavour of flavours) {
      vm = poolServes(job.egress, this.network?.defaultAllowlist ?? null)
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
        const t = await this.templates.forCall(key, signal, onWait);
        if (t) vm = await this.vms.startVm(start, t).catch(() => null);
      }
      fromPreimport = vm !== null && flavour === "preimport";
      if (vm) break;
    }
    for (;;) {
      const cold = vm === null;
      vm ??= await this.vms.startVm(start, null);
      try {
        await vm.activate(this.bootTimeoutMs, networkModeOf(job.egress));
      } catch (cause) {
        await vm.destroy();
        const message = `microVM did not become ready: ${String(cause)}`;
        if (cold) throw new ScratchRunError("SANDBOX_FAILED", message, { cause });
        vm = null; // a clone that did not come up: a cold boot instead
        fromPreimport = false;
        continue;
      }
      if (vm.kind === "clone") this.counters.clonedCalls++;
      else this.counters.bootedCalls++;
      if (fromPreimport) this.counters.preimportedCalls++;
      if (vm.warmedUp === "full") this.counters.warmedCalls++;
      if (vm.warmedUp === "rehearse") this.counters.rehearsedCalls++;
      return vm;
    }
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
    if (this.mode === "boot") return this.vms.startVm(o, null);
    if (this.vms.closed) throw new ScratchRunError("NOT_READY", "the microVM backend is closed");
    const t = await this.templates.get({ runtime, memoryMb, flavour });
    const warm = await this.warmUp.forClone(runtime, flavour);
    if (this.vms.closed) throw new ScratchRunError("NOT_READY", "the microVM backend is closed");
    // A call waiting for this clone (takeOrAwait) raises it to a call's CPU weight.
    const onCgroup = (cgroup: Cgroup) =>
      claim?.onClaimed(() => void cgroup.setCpuWeight(CPU_WEIGHT.call).catch(() => {}));
    return this.vms.startVm({ ...o, onCgroup }, t, warm);
  }

  /** A session's VM (session-vm.ts): a clone of a built template, or a cold boot. */
  async openSession(job: SessionJob, signal: AbortSignal): Promise<SessionSandbox> {
    this.refuseWithoutNetwork(job);
    return openVmSession(job, signal, {
      vms: this.vms,
      templates: this.mode === "restore" ? this.templates : null,
      preimported: this.templates.preimportFor(job.runtime, job.memoryMb) !== undefined,
      bootTimeoutMs: this.bootTimeoutMs,
      isolation: this.isolation,
      teardowns: this.teardowns,
      count: (cloned) => this.counters[cloned ? "clonedSessions" : "bootedSessions"]++,
    });
  }

  /** A call or session that asks for a network from a backend without a network provider. */
  private refuseWithoutNetwork(job: SandboxJob | SessionJob): void {
    if (job.egress.kind !== "none" && !this.network)
      throw new ScratchRunError("INVALID_INPUT", "this microVM backend has no network provider", {
        fix: 'Pass network: "none", or start the server with public egress (SCRATCHRUN_NETWORK)',
      });
  }

  /** The snapshot template for (runtime, memoryMb, flavour), made on first use (bench, tests). */
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

  /** Every template made or loaded so far, once saved: what `scratchrun templates` reports. */
  templatesKept(): Promise<{ slot: string; buildMs: number; loaded: boolean }[]> {
    return this.templates.list();
  }

  /**
   * Host pids of every process of every live VM (QEMU and its jail), or with `servingOnly` only of
   * the VMs running a call now; for diagnostics and tests.
   */
  async livePids(servingOnly = false): Promise<number[]> {
    const vms = servingOnly ? this.serving : this.vms.live;
    const all = await Promise.all([...vms].map((vm) => vm.pids()));
    return all.flat();
  }

  async close(): Promise<void> {
    this.vms.closed = true;
    this.closing.abort();
    await this.pool.close();
    await this.vms.destroyAll();
    await this.teardowns.drain();
    await this.templates.close();
    this.lease?.release();
  }
}
