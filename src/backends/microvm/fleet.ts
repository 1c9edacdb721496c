/**
 * The microVM backend's VMs: each started as a clone of a template or a cold boot (vm-start.ts),
 * with a network when its egress needs one, and tracked until it exits, so that close() destroys
 * every one still alive.
 */
import { ScratchRunError } from "../../errors.js";
import type { Cgroup, CpuPriority } from "../../jail/cgroup.js";
import type { SandboxJob, SessionJob } from "../types.js";
import { egressAllowlist, type Egress } from "../egress.js";
import type { VmNetworkProvider } from "./guest-net.js";
import type { Template } from "./snapshot.js";
import type { MicroVm } from "./vm.js";
import { startMicroVm } from "./vm-start.js";
import type { HostContext, StartMode, WarmUp } from "./vm-types.js";

/** How a VM starts, whatever its mode: its size, abort, network and CPU weight. */
export interface VmStart {
  memoryMb: number;
  signal?: AbortSignal;
  egress: Egress;
  priority: CpuPriority;
  /** Called with its cgroup once made (a pooled start raises its weight when a call waits). */
  onCgroup?: ((cgroup: Cgroup) => void) | undefined;
}

/** How a call's or a session's VM starts: its size and network, at a call's CPU weight. */
export function callStart(job: SandboxJob | SessionJob, signal: AbortSignal): VmStart {
  return { memoryMb: job.memoryMb, signal, egress: job.egress, priority: "call" };
}

/** A clone's warm-up before it is parked (a call's or a session's clone: none). */
export interface CloneWarmUp {
  warmUp: WarmUp;
  warmAlso: readonly number[];
}

export class VmFleet {
  /** Every VM started and not yet exited. */
  readonly live = new Set<MicroVm>();
  /** Set by close(): no cold boot starts any more. */
  closed = false;

  constructor(
    private readonly o: {
      ctx: HostContext;
      bootTimeoutMs: number;
      network: VmNetworkProvider | null;
    },
  ) {}

  /**
   * A VM for a call, a session or the pool: a clone of `from` (warmed up as told before it is
   * parked), or a cold boot without one; with a network when its egress needs one.
   */
  async startVm(o: VmStart, from: Template | null, warm?: CloneWarmUp): Promise<MicroVm> {
    const mode: StartMode = from ? cloneOf(from, warm) : { kind: "boot" };
    if (mode.kind === "boot" && this.closed)
      throw new ScratchRunError("NOT_READY", "the microVM backend is closed");
    const { network } = this.o;
    const vm = await startMicroVm(
      this.o.ctx,
      {
        memoryMb: o.memoryMb,
        priority: o.priority,
        readyTimeoutMs: this.o.bootTimeoutMs,
        ...(o.signal ? { signal: o.signal } : {}),
        ...(o.egress.kind !== "none" && network
          ? { network, egressAllowlist: egressAllowlist(o.egress) }
          : {}),
        onCgroup: o.onCgroup,
      },
      mode,
    );
    this.live.add(vm);
    void vm.exited.then(() => this.live.delete(vm));
    return vm;
  }

  /** Destroys every VM still alive (close(): booting ones were aborted by the backend's signal). */
  async destroyAll(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.live].map((vm) => vm.destroy()));
  }
}

function cloneOf(t: Template, warm?: CloneWarmUp): StartMode {
  const warmUp = warm?.warmUp ?? "none";
  const warmAlso = warm?.warmAlso ?? [];
  return { kind: "clone", image: t.image, warmUp, ...(warmAlso.length ? { warmAlso } : {}) };
}
