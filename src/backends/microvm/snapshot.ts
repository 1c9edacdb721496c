/**
 * Snapshot templates: per runtime (and memory size), one VM cold-booted into a sealed-memfd RAM,
 * run until the guest agent blocks in its seed step (Python or node pre-started and waiting for its
 * call, bash's files in the guest page cache), then saved: the RAM stays in the memfd (x-ignore-shared), QEMU's device state
 * (tens of KB) is kept in host memory. Clones restore from both and are reseeded on activate().
 */
import { closeSync } from "node:fs";
import type { Cgroup } from "../../jail/cgroup.js";
import { SealedRam } from "./sealed-ram.js";
import type { TemplateStore } from "./template-store.js";
import type { MicroVm } from "./vm.js";
import { startMicroVm } from "./vm-start.js";
import { GUEST_KERNEL_MB, type HostContext, type TemplateImage } from "./vm-types.js";

const MiB = 1024 * 1024;

export interface Template {
  readonly image: TemplateImage;
  /** ms from starting the template VM to a sealed image (or from loading it off disk). */
  readonly buildMs: number;
  /** It was loaded from the template store (a template a previous run built), not booted. */
  readonly loaded: boolean;
  /** Built with a template store: settles when its save did (never rejects); absent otherwise. */
  readonly saving?: Promise<void>;
  close(): void;
}

export interface TemplateOptions {
  memoryMb: number;
  /**
   * Interpreter the template runs once so clones start with it cache-hot, and that a clone runs
   * on /dev/null when it warms up (absolute path).
   */
  warm?: string;
  /** More interpreters a clone may be asked to warm up (QemuSpec warmAlso). */
  warmAlso?: readonly string[];
  /** Interpreter the template's agent pre-starts (guest/prestart.py or .js); clones resume it waiting. */
  prestart?: string;
  /** The agent's --preimport SPEC: the pre-started Python imports modules before the snapshot. */
  preimport?: string;
  timeoutMs: number;
  /** Aborts the build (the backend closing): the template VM is destroyed at once. */
  signal?: AbortSignal;
  /** Called with the template VM's cgroup once it exists (a call waiting for it raises its weight). */
  onCgroup?: (cgroup: Cgroup) => void;
  /**
   * Kept across restarts: loaded from here when a previous run saved this very template (its
   * key), else built and then saved in the background (`saved` settles when that is done).
   */
  store?: {
    store: TemplateStore;
    slot: string;
    key: string;
    /** The files the template is made from (recorded: prune() drops it once one is gone). */
    madeFrom: readonly string[];
    saved?: (e: unknown) => void;
  };
}

/** Bytes of a template's guest RAM (the memfd), for memory_mb. */
export const templateRamBytes = (memoryMb: number) => (memoryMb + GUEST_KERNEL_MB) * MiB;

export async function createTemplate(ctx: HostContext, opts: TemplateOptions): Promise<Template> {
  const started = Date.now();
  const bytes = templateRamBytes(opts.memoryMb);
  const kept = opts.store;
  if (kept) {
    const hit = await kept.store
      .load(kept.slot, kept.key, ctx.artifacts.sealedRam, bytes)
      .catch(() => null);
    if (hit) {
      const fd = hit.ram.fd;
      if (fd === null) throw new Error("sealed template RAM has no fd");
      return {
        image: { ramFd: fd, state: hit.state, memoryMb: opts.memoryMb },
        buildMs: Date.now() - started,
        loaded: true,
        close: () => hit.ram.close(),
      };
    }
  }
  const ram = await SealedRam.create(ctx.artifacts.sealedRam, bytes);
  try {
    const state = await bootAndSave(ctx, ram, opts);
    await ram.seal();
    const fd = ram.fd;
    if (fd === null) throw new Error("sealed template RAM has no fd");
    const image: TemplateImage = { ramFd: fd, state, memoryMb: opts.memoryMb };
    const saving = kept
      ? kept.store
          .save(kept.slot, kept.key, `/proc/self/fd/${fd}`, bytes, state, kept.madeFrom)
          .then(
            () => kept.saved?.(null),
            (e: unknown) => kept.saved?.(e),
          )
      : undefined;
    return {
      image,
      buildMs: Date.now() - started,
      loaded: false,
      ...(saving ? { saving } : {}),
      close: () => ram.close(),
    };
  } catch (err) {
    ram.close();
    throw err;
  }
}

/**
 * The template VM: cold-booted into the RAM's shared writable mapping until the agent blocks in
 * its seed step, its device state saved, and destroyed (the mapping must be gone before the RAM's
 * write seal can be added).
 */
async function bootAndSave(ctx: HostContext, ram: SealedRam, opts: TemplateOptions) {
  const rw = ram.openForTemplate();
  let vm: MicroVm;
  try {
    vm = await startMicroVm(
      ctx,
      {
        memoryMb: opts.memoryMb,
        readyTimeoutMs: opts.timeoutMs,
        // Background work until a call waits for it (onCgroup: the backend raises it then).
        priority: "background",
        ...(opts.signal ? { signal: opts.signal } : {}),
        ...(opts.onCgroup ? { onCgroup: opts.onCgroup } : {}),
      },
      {
        kind: "template",
        ramFd: rw,
        ...(opts.warm ? { warm: opts.warm } : {}),
        ...(opts.warmAlso?.length ? { warmAlso: opts.warmAlso } : {}),
        ...(opts.prestart ? { prestart: opts.prestart } : {}),
        ...(opts.preimport ? { preimport: opts.preimport } : {}),
      },
    );
  } finally {
    closeSync(rw);
  }
  try {
    return await vm.saveState();
  } finally {
    await vm.destroy();
  }
}
