/**
 * What a microVM is started from and with: the host's parts every VM shares, a start mode, a
 * call's boot options, and the guest RAM sizes they add up to.
 */
import type { Socket } from "node:net";
import type { CgroupHost, Cgroup, CpuPriority } from "../../jail/cgroup.js";
import type { UidPool } from "../../jail/uids.js";
import type { DomainAllowlist } from "../../net/allowlist.js";
import type { VmArtifacts } from "../../images/vm/build.js";
import type { Accel } from "./accel.js";
import type { VmNetworkProvider } from "./guest-net.js";
import type { Qmp } from "./qmp.js";

/** Guest RAM on top of memory_mb: the guest kernel, init and page tables live there. */
export const GUEST_KERNEL_MB = 64;
/** Host memory QEMU may use beyond guest RAM (TCG translation cache, device state, libraries). */
export const QEMU_OVERHEAD_MB = 160;

export interface HostContext {
  artifacts: VmArtifacts;
  disk: string;
  accel: Accel;
  tscKhz: number | null;
  cgroups: CgroupHost;
  uids: UidPool;
  /** gid QEMU runs as: the kvm group under KVM (for /dev/kvm), else its own uid. */
  kvmGid: number | null;
  scratchMb: number;
}

/** A saved "ready" VM: guest RAM in a sealed memfd plus QEMU's device state (a few tens of KB). */
export interface TemplateImage {
  /** Sealed memfd (see sealed-ram.ts), inherited by each clone as fd 3. */
  ramFd: number;
  state: Buffer;
  /** memory_mb the template was booted with (clones must match it). */
  memoryMb: number;
}

/**
 * How a VM starts. boot: cold boot until the guest agent waits for its seed (agent --seed);
 * activate() then seeds it and waits for READY. template: the same into `ramFd` (shared), for
 * saveState(). clone: restore `image` paused (with warmUp: first resumed until the guest has run
 * what a call runs once, or rehearsed it, then paused again; see warmUpClone()); activate()
 * resumes, seeds and waits for READY.
 */
export type StartMode =
  | { kind: "boot" }
  | {
      kind: "template";
      ramFd: number;
      warm?: string;
      warmAlso?: readonly string[];
      prestart?: string;
      preimport?: string;
    }
  | { kind: "clone"; image: TemplateImage; warmUp?: WarmUp; warmAlso?: readonly number[] };

/**
 * How a clone is warmed up before it is parked: "full" runs what a call runs (a second
 * interpreter, or a pre-imported Python's hot paths), "rehearse" only the call's path in the kept
 * interpreter (~4x cheaper to make, the call runs its exit untranslated), "none" parks it cold.
 */
export type WarmUp = "full" | "rehearse" | "none";

/** The tap's name inside the VM's own network namespace (one tap per namespace). */
export const TAP_NAME = "tap0";

export interface BootOptions {
  /** memory_mb of the call; the guest gets this plus GUEST_KERNEL_MB. */
  memoryMb: number;
  readyTimeoutMs: number;
  signal?: AbortSignal;
  /**
   * Give the VM a "public" network: a tap in a sandbox network namespace from this provider, QEMU
   * started inside that namespace. Absent: the NIC is a hub port with nothing behind it.
   */
  network?: VmNetworkProvider;
  /** With `network`: the allowlist its network is made for (null: unrestricted egress). */
  egressAllowlist?: DomainAllowlist | null;
  /**
   * Its CPU weight (default "call"): a template or a pooled VM starts at "background" and a
   * pooled one is promoted when a call takes it.
   */
  priority?: CpuPriority;
  /** Called with its cgroup once made (a pooled start raises its weight when a call waits). */
  onCgroup?: (cgroup: Cgroup) => void;
}

/** The sockets a VM is driven through before its call: the seed port and (not booted) QMP. */
export interface Control {
  seed: Socket;
  qmp: Qmp | null;
  /** The agent's byte stream (the call's, once activated). */
  channel: Socket;
}
