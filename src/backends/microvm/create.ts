/**
 * Making a microVM backend: checks the host, builds or finds the VM artifacts and the root disk,
 * picks KVM or TCG and gathers what every VM of the backend shares (HostContext), then starts the
 * backend (backend.ts) and its warm pool.
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname } from "node:path";
import { takeLease } from "../../images/lease.js";
import { ScratchRunError } from "../../errors.js";
import { detectCgroups } from "../../jail/cgroup.js";
import { SANDBOX_UID_BASE, SANDBOX_UID_COUNT, UidPool } from "../../jail/uids.js";
import type { RuntimeName } from "../../schema/exec.js";
import { LIMITS } from "../../schema/limits.js";
import {
  buildVmArtifacts,
  ensureRootDisk,
  touchVmArtifacts,
  type VmArtifacts,
} from "../../images/vm/build.js";
import type { Preimport } from "../../images/preimport.js";
import { detectAccel, hostTscKhz, QEMU_BINARY, type Accel } from "./accel.js";
import { MicrovmBackend } from "./backend.js";
import type { VmNetworkProvider } from "./guest-net.js";
import type { PoolOptions } from "./pool-config.js";
import type { TemplateStore } from "./template-store.js";
import type { HostContext } from "./vm-types.js";
import { DEFAULT_SETTINGS } from "../../schema/settings/values.js";

export type { MicrovmBackend, PoolOptions };

/** QEMU's host uids: a range of their own, after the namespace backend's sandbox uids. */
const VM_UID_BASE = SANDBOX_UID_BASE + SANDBOX_UID_COUNT;
const VM_UID_COUNT = 1024;

export interface MicrovmBackendOptions {
  /** Runtime rootfs directory (src/images); its erofs image is built next to it on first use. */
  rootfsDir: string;
  /** Prebuilt erofs root disk; default: ensureRootDisk(rootfsDir) in `vmCache`. */
  disk?: string;
  /** Kernel + initramfs; default: built (or found in `vmCache`) by buildVmArtifacts(). */
  artifacts?: VmArtifacts;
  /** Where the defaults above are built (SCRATCHRUN_VM_CACHE); default: the settings' default. */
  vmCache?: string;
  /** Default: detected (the settings' `accel`, SCRATCHRUN_ACCEL, forces one). */
  accel?: Accel;
  /** Ready VMs per runtime (default none), their memory_mb, and how many boot at once. */
  pool?: PoolOptions;
  /** Cold boot deadline (default 30 s: TCG boots take ~2 s, more on a loaded host). */
  bootTimeoutMs?: number;
  /**
   * CPUs the warm-up decision counts (default: the host's): with fewer calls running, a clone made
   * meanwhile is rehearsed; with as many, parked cold.
   */
  cpus?: number;
  /**
   * Public egress for calls with network "public" (src/compose/network.ts adapts src/net). Absent:
   * such calls are refused. Pooled VMs are then prepared with a network (off the call's path);
   * a call with network "none" that takes one has it torn down before the guest resumes.
   */
  network?: VmNetworkProvider;
  /**
   * What each runtime's pre-imported interpreter imports (src/images/preimport.ts): such a runtime
   * gets a second template whose Python has imported them (and drawn a throwaway figure), and a
   * pool of its clones as deep as the runtime's, for calls the engine routes there.
   */
  preimport?: Partial<Record<RuntimeName, Preimport>>;
  /** Snapshot templates kept across restarts (SCRATCHRUN_TEMPLATE_CACHE); absent: none. */
  templateStore?: TemplateStore | null;
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
    const cacheRoot = options.vmCache ?? DEFAULT_SETTINGS.images.vmCache;
    artifacts = options.artifacts ?? buildVmArtifacts({ cacheRoot });
    disk = options.disk ?? ensureRootDisk(options.rootfsDir, cacheRoot);
    touchVmArtifacts(artifacts);
  } catch (cause) {
    throw new ScratchRunError("NOT_READY", `cannot prepare the microVM images: ${String(cause)}`, {
      fix: "run node scripts/build-vm.mjs and read its error",
      cause,
    });
  }
  // Templates and clones boot this kernel and disk for as long as the backend lives: no build's
  // prune (scripts/build-vm.mjs, scratchrun image build) may remove them meanwhile.
  const lease = takeLease(dirname(dirname(artifacts.kernel)), [dirname(artifacts.kernel), disk]);
  let accel: Accel;
  try {
    accel = options.accel ?? (await detectAccel(artifacts.kernel, artifacts.initramfs));
  } catch (e) {
    lease.release();
    throw e;
  }
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
  return new MicrovmBackend({
    ctx,
    bootTimeoutMs: options.bootTimeoutMs ?? 30_000,
    pool: options.pool,
    network: options.network,
    lease,
    preimport: options.preimport,
    cpus: options.cpus,
    templateStore: options.templateStore,
  });
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
