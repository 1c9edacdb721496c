/**
 * A session's microVM: a clone restored for it from its runtime's built template (the one a call
 * of that size clones: pre-imported where the runtime has a pre-import, else plain), at a call's
 * CPU weight, never a pooled clone (those are counted on by calls); a cold boot while no template
 * of its size is built (a session starts no template build: the pool's and calls' do). Kept until
 * the session ends, stopped between calls. A clone's pre-started interpreter may become the
 * session's kernel at its first call (SessionParts.prestarted); a booted VM's agent started none.
 */
import { ScratchRunError } from "../../errors.js";
import { runtimeEntry } from "../../runtimes/table.js";
import type { Teardowns } from "../call.js";
import { egressAllowlist, networkModeOf } from "../egress.js";
import { prestartInterpreter, type Flavour } from "../prestart.js";
import { sessionSandbox, type SessionSandbox } from "../session.js";
import type { Isolation, SessionJob } from "../types.js";
import { callStart, type VmFleet } from "./fleet.js";
import type { TemplateCache } from "./template-cache.js";
import type { MicroVm } from "./vm.js";

export interface SessionVmParts {
  vms: VmFleet;
  /** Restore mode's templates (null: boot mode, every session cold-boots). */
  templates: TemplateCache | null;
  /** Whether its runtime has a pre-imported template at its size. */
  preimported: boolean;
  bootTimeoutMs: number;
  isolation: Isolation;
  teardowns: Teardowns;
  /** Counts the session as started in a clone or in a cold-booted VM. */
  count: (cloned: boolean) => void;
}

export async function openVmSession(
  job: SessionJob,
  signal: AbortSignal,
  p: SessionVmParts,
): Promise<SessionSandbox> {
  const { vm, prestarted } = await sessionVm(job, signal, p);
  try {
    await vm.activate(p.bootTimeoutMs, networkModeOf(job.egress));
    const allow = egressAllowlist(job.egress);
    if (allow) await vm.useAllowlist(allow);
    // Stopped from here until its first call, and between calls.
    await vm.keepControl();
    await vm.pause();
  } catch (cause) {
    await vm.destroy();
    throw new ScratchRunError("SANDBOX_FAILED", `microVM did not become ready: ${String(cause)}`, {
      cause,
    });
  }
  p.count(vm.kind === "clone");
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
    { isolation: p.isolation, teardowns: p.teardowns },
  );
}

/**
 * The session's VM, not yet activated: a clone of the built template of its size (the
 * pre-imported one first), restored now without a warm-up (the session's cells translate what
 * they run), or a cold boot.
 */
async function sessionVm(
  job: SessionJob,
  signal: AbortSignal,
  p: SessionVmParts,
): Promise<{ vm: MicroVm; prestarted: Flavour | null }> {
  if (p.templates) {
    const flavours: Flavour[] = p.preimported ? ["preimport", "plain"] : ["plain"];
    for (const flavour of flavours) {
      const t = p.templates.built({ runtime: job.runtime, memoryMb: job.memoryMb, flavour });
      if (!t) continue;
      const vm = await p.vms.startVm(callStart(job, signal), t).catch(() => null);
      if (vm) return { vm, prestarted: prestartInterpreter(job.runtime) ? flavour : null };
    }
  }
  return { vm: await p.vms.startVm(callStart(job, signal), null), prestarted: null };
}
