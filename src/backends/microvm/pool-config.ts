/**
 * The microVM backend's warm pool as configured: clones per runtime and flavour (a pre-imported
 * flavour as deep as its runtime's plain one), their memory size, how many start at once, the
 * runtimes kept only once called, and restore mode's burst rule.
 */
import type { RuntimeName } from "../../schema/exec.js";
import { LIMITS } from "../../schema/limits.js";
import type { PoolConfig, PoolKey } from "../pool.js";

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

/** The pooled VMs' memory_mb (the template kept across restarts is of this size too). */
export const pooledMemoryMb = (o: PoolOptions): number => o.memoryMb ?? LIMITS.memoryMb.default;

/** The WarmPool config of `o`; `preimported`: whether a runtime has a pre-imported template. */
export function poolConfig(
  o: PoolOptions,
  preimported: (runtime: RuntimeName, memoryMb: number) => boolean,
): PoolConfig {
  const memoryMb = pooledMemoryMb(o);
  const sizes: [PoolKey, number][] = [];
  for (const [runtime, n] of Object.entries(o.sizes ?? {}) as [RuntimeName, number][]) {
    sizes.push([{ runtime, flavour: "plain" }, n]);
    if (preimported(runtime, memoryMb)) sizes.push([{ runtime, flavour: "preimport" }, n]);
  }
  return {
    sizes,
    memoryMb,
    maxConcurrentBoots: o.maxConcurrentBoots ?? 1,
    ...(o.onceCalled ? { onceCalled: o.onceCalled } : {}),
    ...((o.mode ?? "restore") === "restore" ? { burst: o.burst ?? BURST } : {}),
  };
}
