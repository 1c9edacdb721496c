/**
 * The microVM backend's snapshot templates, one per (runtime, memory size, flavour): built (or
 * loaded from the template store) on first use, shared by their clones, waited for by a call that
 * finds none, saved to the store in the background, and remembered as failed so that calls
 * cold-boot meanwhile instead of waiting again.
 */
import { readdirSync } from "node:fs";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { ScratchRunError } from "../../errors.js";
import { CPU_WEIGHT, type Cgroup } from "../../jail/cgroup.js";
import type { RuntimeName } from "../../schema/exec.js";
import { runtimeArgv } from "../../runtimes/table.js";
import { shellStartPaths } from "../../runtimes/shell-starts.js";
import type { Preimport } from "../../images/preimport.js";
import {
  PREIMPORT_MIN_MEMORY_MB,
  prestartInterpreter,
  preimportSpec,
  type Flavour,
} from "../prestart.js";
import { VERSION } from "../../version.js";
import { QEMU_BINARY } from "./accel.js";
import { createTemplate, type Template, type TemplateOptions } from "./snapshot.js";
import { templateKey, type TemplateInputs, type TemplateStore } from "./template-store.js";
import type { HostContext } from "./vm-types.js";

/** A pre-imported template imports for seconds under TCG before it is saved. */
const PREIMPORT_BOOT_TIMEOUT_MS = 180_000;
/**
 * How long a call routed to a pre-imported interpreter waits for its template's load from the
 * template store (about a second; longer only on a host whose disk or CPUs are busy) before it
 * takes a plain interpreter, which then imports the stack within the call's own timeout_ms.
 */
const LOAD_WAIT_MS = 20_000;

/** The interpreter a runtime's template runs once to warm the guest page cache. */
export function warmInterpreter(runtime: RuntimeName): string | undefined {
  return runtimeArgv(runtime)[0];
}

/**
 * Which template: its runtime, the VM's memory size and its flavour. Its slot, the
 * `runtime/memoryMb/flavour` text, names it in the template store and in `scratchrun templates`.
 */
export interface TemplateKey {
  runtime: RuntimeName;
  memoryMb: number;
  flavour: Flavour;
}

export const slotOf = (k: TemplateKey): string => `${k.runtime}/${k.memoryMb}/${k.flavour}`;

export interface TemplateCacheOptions {
  ctx: HostContext;
  bootTimeoutMs: number;
  /** Kept across restarts (null: off); only `keptMemoryMb`'s templates are kept. */
  store: TemplateStore | null;
  keptMemoryMb: number;
  /** What each runtime's pre-imported template imports (restore mode; boot mode: none). */
  preimport: Partial<Record<RuntimeName, Preimport>>;
  /** Aborted when the backend closes: templates still booting are destroyed at once. */
  signal: AbortSignal;
  /** Called with each template built or loaded. */
  onMade?: (t: Template) => void;
}

export class TemplateCache {
  private readonly making = new Map<string, Promise<Template>>();
  private readonly made = new Map<string, Template>();
  /**
   * Templates being built that a call waits for, and the cgroup of each build's VM once it has
   * one: a waited-for build runs at a call's CPU weight (calls first), not the background's.
   */
  private readonly waitedFor = new Set<string>();
  private readonly cgroups = new Map<string, Cgroup>();
  /** Templates whose last build failed: calls cold-boot meanwhile instead of waiting again. */
  private readonly failed = new Set<string>();
  /** Template store keys by slot: a key reads the files it is made from, once per cache. */
  private readonly storeKeys = new Map<string, string>();
  /** Last template failure (the backend then cold-boots); for diagnostics. */
  error: unknown = null;
  /** One entry per template save to the store that ended: null when saved, else its error. */
  readonly saves: unknown[] = [];

  constructor(private readonly o: TemplateCacheOptions) {
    // What earlier builds kept that none can load again (their kernel or disk pruned since).
    void o.store?.prune().catch(() => {});
  }

  /** The template of `k`, built or loaded on first use; shared by its clones. */
  get(k: TemplateKey): Promise<Template> {
    const slot = slotOf(k);
    let t = this.making.get(slot);
    if (t) return t;
    if (this.o.signal.aborted)
      return Promise.reject(new ScratchRunError("NOT_READY", "the microVM backend is closed"));
    const build = this.buildOf(k);
    if (!build)
      return Promise.reject(new Error(`${k.runtime} at ${k.memoryMb} MB has no pre-import`));
    t = createTemplate(this.o.ctx, {
      ...this.kept(slot, k.memoryMb, build),
      memoryMb: k.memoryMb,
      timeoutMs: build.preimport
        ? Math.max(this.o.bootTimeoutMs, PREIMPORT_BOOT_TIMEOUT_MS)
        : this.o.bootTimeoutMs,
      signal: this.o.signal,
      onCgroup: (cgroup) => {
        this.cgroups.set(slot, cgroup);
        if (this.waitedFor.has(slot)) void cgroup.setCpuWeight(CPU_WEIGHT.call).catch(() => {});
      },
      // A pre-started interpreter warms the page cache itself.
      ...build,
    });
    this.making.set(slot, t);
    void t
      .catch(() => {})
      .finally(() => {
        this.cgroups.delete(slot);
        this.waitedFor.delete(slot);
      });
    t.then((v) => {
      this.failed.delete(slot);
      this.o.onMade?.(v);
      this.made.set(slot, v);
    }).catch((err: unknown) => {
      this.error = err;
      this.failed.add(slot);
      if (this.making.get(slot) === t) this.making.delete(slot);
    });
    return t;
  }

  /** The runtime's pre-import if a VM of memoryMb may have one (else no pre-imported template). */
  preimportFor(runtime: RuntimeName, memoryMb: number): Preimport | undefined {
    if (memoryMb < PREIMPORT_MIN_MEMORY_MB || !prestartInterpreter(runtime)) return undefined;
    return this.o.preimport[runtime];
  }

  /** The template of `k` if it is built already. */
  built(k: TemplateKey): Template | undefined {
    return this.made.get(slotOf(k));
  }

  /**
   * The template a call that found no pooled clone clones now, or null (it then takes the plain
   * kind, or cold-boots). A plain template is a cold boot that stops at the agent's seed step, so
   * the call waits for it about as long as its own cold boot would take, plus a clone's restore,
   * and the calls after it find the template built instead of cold-booting beside it (two VMs
   * booting on the same CPUs, each slower). A pre-imported one kept on disk is loaded in about a
   * second (a plain interpreter imports the stack in the call for seconds, more than timeout_ms's
   * default under TCG), waited for up to LOAD_WAIT_MS; one to build imports for seconds: the call
   * goes on without it, and the build goes on for the calls after it.
   */
  async forCall(
    k: TemplateKey,
    signal: AbortSignal,
    onWait?: (what: string) => void,
  ): Promise<Template | null> {
    const t = this.built(k);
    if (t) return t;
    if (k.flavour === "plain") return this.wait(k, signal);
    if (this.keptOnDisk(k)) {
      onWait?.(`loading ${k.runtime}'s pre-imported interpreter from disk`);
      return this.wait(k, signal, LOAD_WAIT_MS);
    }
    void this.get(k).catch(() => {});
    return null;
  }

  /**
   * The template of `k`, built or loaded now if need be, for a call that found none: a build runs
   * at a call's CPU weight from then on. Null when the build fails, the last one failed (it is
   * retried in the background, not waited for), `boundMs` passes or `signal` aborts meanwhile.
   */
  private wait(k: TemplateKey, signal: AbortSignal, boundMs?: number): Promise<Template | null> {
    const slot = slotOf(k);
    const build = this.get(k);
    if (this.failed.has(slot)) {
      void build.catch(() => {});
      return Promise.resolve(null);
    }
    this.waitedFor.add(slot);
    void this.cgroups
      .get(slot)
      ?.setCpuWeight(CPU_WEIGHT.call)
      .catch(() => {});
    const stop =
      boundMs === undefined ? signal : AbortSignal.any([signal, AbortSignal.timeout(boundMs)]);
    const stopped = new Promise<null>((resolve) => {
      if (stop.aborted) resolve(null);
      stop.addEventListener("abort", () => resolve(null), { once: true });
    });
    return Promise.race([build.catch(() => null), stopped]);
  }

  /**
   * Whether the template store keeps the template of `k` as this build would make it: its build
   * is then a load from disk (about a second), not a boot.
   */
  private keptOnDisk(k: TemplateKey): boolean {
    const slot = slotOf(k);
    const build = this.buildOf(k);
    const kept = build ? this.kept(slot, k.memoryMb, build).store : undefined;
    return kept ? kept.store.has(slot, kept.key) : false;
  }

  /**
   * Every template made or loaded so far (slot, ms, loaded), once the saves of those built are
   * done: what `scratchrun templates` reports.
   */
  async list(): Promise<{ slot: string; buildMs: number; loaded: boolean }[]> {
    const done = [...this.made];
    await Promise.all(done.map(([, t]) => t.saving));
    return done.map(([slot, t]) => ({ slot, buildMs: t.buildMs, loaded: t.loaded }));
  }

  /** Frees every template made, once those still making settle (`signal` refuses new ones). */
  async close(): Promise<void> {
    const templates = [...this.making.values()];
    this.making.clear();
    this.made.clear();
    for (const t of await Promise.allSettled(templates))
      if (t.status === "fulfilled") t.value.close();
  }

  /** What the template of `k` runs; null: that flavour has no template. */
  private buildOf(k: TemplateKey) {
    const { runtime, memoryMb, flavour } = k;
    const warm = warmInterpreter(runtime);
    const prestart = prestartInterpreter(runtime);
    const pre = flavour === "preimport" ? this.preimportFor(runtime, memoryMb) : undefined;
    if (flavour === "preimport" && !pre) return null;
    const also = !prestart && warm ? shellStartPaths(runtime) : [];
    return {
      ...(prestart ? { prestart } : warm ? { warm } : {}),
      ...(also.length ? { warmAlso: also } : {}),
      ...(pre ? { preimport: preimportSpec(pre) } : {}),
    };
  }

  /**
   * The template store's part of a template build: its slot and key (everything the template is
   * made from, src/backends/microvm/template-store.ts), for the kept memory size only (calls
   * with other sizes are rare, and each size would be another file).
   */
  private kept(
    slot: string,
    memoryMb: number,
    build: TemplateInputs["build"],
  ): Pick<TemplateOptions, "store"> {
    const { store, ctx } = this.o;
    if (!store || memoryMb !== this.o.keptMemoryMb) return {};
    const files = [ctx.artifacts.kernel, ctx.artifacts.initramfs, ctx.disk, QEMU_BINARY];
    files.push(...moduleFiles());
    const key =
      this.storeKeys.get(slot) ??
      templateKey({
        slot,
        memoryMb,
        files,
        accel: ctx.accel,
        tscKhz: ctx.tscKhz,
        build,
        version: VERSION,
      });
    this.storeKeys.set(slot, key);
    return {
      store: { store, slot, key, madeFrom: files, saved: (e) => this.saves.push(e) },
    };
  }
}

/**
 * This backend's own compiled files: the QEMU command line and the guest protocol live here, so
 * a kept template is only reused by the very build that made it.
 */
function moduleFiles(): string[] {
  const dir = dirname(fileURLToPath(import.meta.url));
  return readdirSync(dir)
    .filter((f) => f.endsWith(".js"))
    .sort()
    .map((f) => `${dir}/${f}`);
}
