/**
 * The microVM backend: every call runs in its own QEMU microvm (own guest kernel), taken from the
 * warm pool or cold-booted, used once and killed before run() settles (its cgroup empty; the rest
 * of its teardown runs in the background and close() waits for it).
 */
import { execFileSync } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { existsSync } from "node:fs";
import { ScratchRunError } from "../../errors.js";
import { detectCgroups } from "../../jail/cgroup.js";
import { SANDBOX_UID_BASE, SANDBOX_UID_COUNT, UidPool } from "../../jail/uids.js";
import { runAgentSession } from "../../protocol/session.js";
import type { RuntimeName } from "../../schema/exec.js";
import { LIMITS } from "../../schema/limits.js";
import type { Backend, BackendOutcome, Isolation, RunOptions, SandboxJob } from "../types.js";
import { detectAccel, hostTscKhz, isolationOf, QEMU_BINARY, type Accel } from "./accel.js";
import { buildVmArtifacts, ensureRootDisk, touchVmArtifacts, type VmArtifacts } from "./build.js";
import { runtimeArgv } from "../../images/manifest.js";
import type { VmNetworkProvider } from "./guest-net.js";
import { WarmPool } from "../pool.js";
import { createTemplate, type Template } from "./snapshot.js";
import { MicroVm, type HostContext } from "./vm.js";

/** The unprivileged user inside the guest that runs the code (the image's `user`). */
export const GUEST_UID = 1000;
/** QEMU's host uids: a range of their own, after the namespace backend's sandbox uids. */
const VM_UID_BASE = SANDBOX_UID_BASE + SANDBOX_UID_COUNT;
const VM_UID_COUNT = 1024;
/** Grace the host gives the agent past the code's own timeout before destroying the VM. */
const HOST_GRACE_MS = 3000;

export interface MicrovmBackendOptions {
  /** Runtime rootfs directory (src/images); its erofs image is built next to it on first use. */
  rootfsDir: string;
  /** Prebuilt erofs root disk; default: ensureRootDisk(rootfsDir). */
  disk?: string;
  /** Kernel + initramfs; default: built (or found in the cache) by buildVmArtifacts(). */
  artifacts?: VmArtifacts;
  /** Default: detected (SCRATCHRUN_ACCEL overrides). */
  accel?: Accel;
  /** Ready VMs per runtime (default none), their memory_mb, and how many boot at once. */
  pool?: PoolOptions;
  /** Cold boot deadline (default 30 s: TCG boots take ~2 s, more on a loaded host). */
  bootTimeoutMs?: number;
  /**
   * Public egress for calls with network "public" (src/setup/network.ts adapts src/net). Absent:
   * such calls are refused. Pooled VMs are then prepared with a network (off the call's path);
   * a call with network "none" that takes one has it torn down before the guest resumes.
   */
  network?: VmNetworkProvider;
}

export interface PoolOptions {
  sizes?: Partial<Record<RuntimeName, number>>;
  memoryMb?: number;
  maxConcurrentBoots?: number;
  /**
   * "restore" (default): per runtime one snapshot template; pooled VMs are clones restored from it
   * and kept paused (no CPU, little RAM); calls without a pooled VM restore one too once the
   * template exists. "boot": pooled VMs are cold-booted and idle at READY.
   */
  mode?: "restore" | "boot";
}

/** How long no call must have started or ended before a new clone is warmed up. */
const QUIET_MS = 150;

/** The interpreter a runtime's template runs once to warm the guest page cache. */
export function warmInterpreter(runtime: RuntimeName): string | undefined {
  return runtimeArgv(runtime)[0];
}

/**
 * The interpreter a runtime's template pre-starts, so a call pays only for running its code:
 * python (guest/prestart.py) and node (guest/prestart.js, which reseeds OpenSSL's DRBG and V8's
 * random generator in each clone before the code runs). bash is not: a shell that sources the
 * file is not `bash main.sh` (docs/decisions/0003-microvm.md).
 */
export function prestartInterpreter(runtime: RuntimeName): string | undefined {
  return runtime === "bash" ? undefined : runtimeArgv(runtime)[0];
}

function kvmGroupId(): number | null {
  try {
    const line = execFileSync("getent", ["group", "kvm"], { encoding: "utf8" });
    const gid = Number(line.split(":")[2]);
    return Number.isInteger(gid) ? gid : null;
  } catch {
    return null;
  }
}

export class MicrovmBackend implements Backend {
  readonly name = "microvm" as const;
  readonly isolation: Isolation;
  readonly pool: WarmPool<MicroVm>;
  readonly mode: "restore" | "boot";
  private readonly live = new Set<MicroVm>();
  /** VMs serving a call right now (taken from the pool or started for it). */
  private readonly serving = new Set<MicroVm>();
  /** Destroys still finishing after their call returned (close() waits for them). */
  private readonly teardowns = new Set<Promise<void>>();
  /** Calls getting their VM right now (before they are serving). */
  private acquiring = 0;
  /** When a call last started or ended (ms since the epoch). */
  private lastCallAt = 0;
  /** What the backend has done so far: templates built, calls run in clones / cold boots. */
  readonly counters = { templates: 0, clonedCalls: 0, warmedCalls: 0, bootedCalls: 0 };
  private readonly templates = new Map<string, Promise<Template>>();
  private readonly built = new Map<string, Template>();
  private closed = false;
  /**
   * Aborted by close(): VMs still booting for the pool or for a template are destroyed at once
   * instead of being awaited (a server asked to stop must not be killed mid-cleanup by a client
   * that waits only a few seconds, leaving a cgroup and a directory behind).
   */
  private readonly closing = new AbortController();
  /** Last template failure (the backend then cold-boots); for diagnostics. */
  templateError: unknown = null;

  constructor(
    private readonly ctx: HostContext,
    private readonly bootTimeoutMs: number,
    poolOptions: PoolOptions = {},
    private readonly network: VmNetworkProvider | null = null,
  ) {
    this.isolation = isolationOf(ctx.accel);
    this.mode = poolOptions.mode ?? "restore";
    this.pool = new WarmPool<MicroVm>((runtime, memoryMb) => this.prepare(runtime, memoryMb), {
      sizes: poolOptions.sizes ?? {},
      memoryMb: poolOptions.memoryMb ?? LIMITS.memoryMb.default,
      maxConcurrentBoots: poolOptions.maxConcurrentBoots ?? 1,
    });
    this.pool.start();
  }

  /** The snapshot template for (runtime, memoryMb), created on first use; shared by its clones. */
  template(runtime: RuntimeName, memoryMb: number): Promise<Template> {
    const key = `${runtime}/${memoryMb}`;
    let t = this.templates.get(key);
    if (!t) {
      if (this.closed)
        return Promise.reject(new ScratchRunError("NOT_READY", "the microVM backend is closed"));
      const warm = warmInterpreter(runtime);
      const prestart = prestartInterpreter(runtime);
      t = createTemplate(this.ctx, {
        memoryMb,
        timeoutMs: this.bootTimeoutMs,
        signal: this.closing.signal,
        // A pre-started interpreter warms the page cache itself.
        ...(prestart ? { prestart } : warm ? { warm } : {}),
      });
      this.templates.set(key, t);
      t.then((v) => {
        this.counters.templates++;
        this.built.set(key, v);
      }).catch((err: unknown) => {
        this.templateError = err;
        if (this.templates.get(key) === t) this.templates.delete(key);
      });
    }
    return t;
  }

  private track(vm: MicroVm): MicroVm {
    this.live.add(vm);
    void vm.exited.then(() => this.live.delete(vm));
    return vm;
  }

  /**
   * A pooled VM: a paused clone of the runtime's template (restore mode), else a booted VM
   * waiting for its seed. With a network provider it gets a network now, since most calls ask
   * for "public" (the default) and building one costs tens of ms of ip/nft commands.
   */
  private async prepare(runtime: RuntimeName, memoryMb: number): Promise<MicroVm> {
    const publicNet = this.network !== null;
    if (this.mode === "boot") return this.boot(memoryMb, this.closing.signal, publicNet);
    if (this.closed) throw new ScratchRunError("NOT_READY", "the microVM backend is closed");
    const t = await this.template(runtime, memoryMb);
    const warmUp = await this.quiet();
    if (this.closed) throw new ScratchRunError("NOT_READY", "the microVM backend is closed");
    return this.clone(t, memoryMb, this.closing.signal, publicNet, warmUp);
  }

  /**
   * True when no call is in flight and none started or ended in the last QUIET_MS: a clone made
   * then is warmed up before it is parked (vm.ts warmUp()). Under load it is parked cold instead:
   * a warm-up costs more CPU (~600 ms for Python under TCG) than it saves the call (~400 ms), and
   * on a small host that CPU is the calls' throughput. The wait is there because a refill starts
   * as a call ends, a few ms before a busy client's next call arrives.
   */
  private async quiet(): Promise<boolean> {
    // A loop, not one sleep: a timer may fire a millisecond early by Date.now(), and a call that
    // starts or ends meanwhile moves the window.
    for (let wait; (wait = this.lastCallAt + QUIET_MS - Date.now()) > 0;) await sleep(wait);
    return this.acquiring === 0 && this.serving.size === 0;
  }

  private bootOptions(memoryMb: number, signal: AbortSignal | undefined, publicNet: boolean) {
    return {
      memoryMb,
      readyTimeoutMs: this.bootTimeoutMs,
      ...(signal ? { signal } : {}),
      ...(publicNet && this.network ? { network: this.network } : {}),
    };
  }

  private async clone(
    t: Template,
    memoryMb: number,
    signal: AbortSignal | undefined,
    publicNet: boolean,
    warmUp = false,
  ): Promise<MicroVm> {
    const vm = await MicroVm.start(this.ctx, this.bootOptions(memoryMb, signal, publicNet), {
      kind: "clone",
      image: t.image,
      warmUp,
    });
    return this.track(vm);
  }

  /**
   * A VM for a call that found the pool empty: a clone when the template is built, else a cold
   * boot (and, in restore mode, the template gets built in the background for the next calls).
   * Then resumed to READY. A clone that fails to come up is replaced by a cold boot.
   */
  private async acquire(job: SandboxJob, signal: AbortSignal): Promise<MicroVm> {
    const publicNet = job.network === "public";
    let vm = this.pool.take(job.runtime, job.memoryMb, { refill: false });
    if (vm && publicNet && !vm.hasNetwork) {
      void vm.destroy(); // cannot happen with a provider; never serve "public" without a network
      vm = null;
    }
    if (!vm && this.mode === "restore") {
      const t = this.built.get(`${job.runtime}/${job.memoryMb}`);
      if (t) vm = await this.clone(t, job.memoryMb, signal, publicNet).catch(() => null);
      else void this.template(job.runtime, job.memoryMb).catch(() => {});
    }
    if (vm) {
      try {
        const cloned = vm.paused;
        await vm.activate(this.bootTimeoutMs, job.network);
        if (cloned) this.counters.clonedCalls++;
        else this.counters.bootedCalls++;
        if (vm.warmedUp) this.counters.warmedCalls++;
        return vm;
      } catch {
        await vm.destroy();
      }
    }
    const booted = await this.boot(job.memoryMb, signal, publicNet);
    try {
      await booted.activate(this.bootTimeoutMs, job.network);
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

  private async boot(
    memoryMb: number,
    signal: AbortSignal | undefined,
    publicNet: boolean,
  ): Promise<MicroVm> {
    if (this.closed) throw new ScratchRunError("NOT_READY", "the microVM backend is closed");
    const vm = await MicroVm.boot(this.ctx, this.bootOptions(memoryMb, signal, publicNet));
    return this.track(vm);
  }

  onSandboxReady(listener: () => void): () => void {
    return this.pool.onReady(listener);
  }

  warm(runtime: RuntimeName): { ready: number; target: number } {
    return { ready: this.pool.readyCount(runtime), target: this.pool.config.sizes[runtime] ?? 0 };
  }

  async run(job: SandboxJob, options: RunOptions): Promise<BackendOutcome> {
    if (job.network === "public" && !this.network)
      throw new ScratchRunError("INVALID_INPUT", "this microVM backend has no network provider", {
        fix: 'Pass network: "none", or start the server with public egress (SCRATCHRUN_NETWORK)',
      });
    const started = Date.now();
    this.acquiring++;
    this.lastCallAt = Date.now();
    const vm = await this.acquire(job, options.signal)
      .catch((err: unknown) => {
        this.pool.refillNow();
        throw err;
      })
      .finally(() => this.acquiring--);
    this.serving.add(vm);
    try {
      const sandboxReadyMs = Date.now() - started;
      const request = {
        ...job.request,
        uid: job.request.uid ?? GUEST_UID,
        gid: job.request.gid ?? GUEST_UID,
      };
      const agent = await runAgentSession({ input: vm.channel, output: vm.channel }, request, {
        signal: options.signal,
        hardDeadlineMs: job.request.timeoutMs + HOST_GRACE_MS,
        alreadyReady: true,
        ...(options.onEvent ? { onEvent: options.onEvent } : {}),
      });
      const blocked = await vm.blockedCount();
      return {
        agent,
        isolation: this.isolation,
        oomKilled: (agent.exit?.oomKills ?? 0) > 0,
        sandboxReadyMs,
        ...(blocked !== undefined ? { blockedConnections: blocked } : {}),
      };
    } finally {
      // The call's VM is killed before run() settles: every process of it has exited. Reaping
      // the jail and removing its cgroup, directory, network and uid are left to the background;
      // close() waits for them.
      const gone = vm.destroy().catch(() => {});
      this.teardowns.add(gone);
      void gone.then(() => this.teardowns.delete(gone));
      await vm.kill();
      this.serving.delete(vm);
      this.lastCallAt = Date.now();
      this.pool.refillNow();
    }
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
    await Promise.all(this.teardowns);
    const templates = [...this.templates.values()];
    this.templates.clear();
    this.built.clear();
    for (const t of await Promise.allSettled(templates))
      if (t.status === "fulfilled") t.value.close();
  }
}

/**
 * Checks the host, builds or finds the VM artifacts and the root disk, picks KVM or TCG, and
 * starts the warm pool. Throws NOT_READY saying what to install when something is missing.
 */
export async function createMicrovmBackend(
  options: MicrovmBackendOptions,
): Promise<MicrovmBackend> {
  if (!existsSync(QEMU_BINARY))
    throw new ScratchRunError("NOT_READY", `QEMU not found at ${QEMU_BINARY}`, {
      fix: "apt-get install qemu-system-x86 (or use SCRATCHRUN_ISOLATION=namespace)",
    });
  let artifacts: VmArtifacts;
  let disk: string;
  try {
    artifacts = options.artifacts ?? buildVmArtifacts();
    disk = options.disk ?? ensureRootDisk(options.rootfsDir);
    touchVmArtifacts(artifacts);
  } catch (cause) {
    throw new ScratchRunError("NOT_READY", `cannot prepare the microVM images: ${String(cause)}`, {
      fix: "run node scripts/build-vm.mjs and read its error",
      cause,
    });
  }
  const accel = options.accel ?? (await detectAccel(artifacts.kernel, artifacts.initramfs));
  const ctx: HostContext = {
    artifacts,
    disk,
    accel,
    tscKhz: hostTscKhz(),
    cgroups: detectCgroups(),
    uids: new UidPool(VM_UID_BASE, VM_UID_COUNT),
    kvmGid: accel === "kvm" ? kvmGroupId() : null,
    scratchMb: LIMITS.scratchMb,
  };
  return new MicrovmBackend(
    ctx,
    options.bootTimeoutMs ?? 30_000,
    options.pool,
    options.network ?? null,
  );
}
