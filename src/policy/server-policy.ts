import { ScratchRunError } from "../errors.js";
import { LIMITS, RAISE_CEILINGS } from "../schema/limits.js";
import { DEFAULT_POLICY, rangeWithMax, type CallPolicy } from "../schema/policy.js";
import type { Ceiling } from "./host.js";
import type { ServerMaxima } from "../schema/settings/values.js";

/**
 * The server-wide policy: the product's (DEFAULT_POLICY) with the maxima an operator raised (or
 * lowered) with `--max-timeout-ms` / `--max-memory-mb` or SCRATCHRUN_MAX_TIMEOUT_MS /
 * SCRATCHRUN_MAX_MEMORY_MB. Callers without a policy of their own (the stdio server, `scratchrun
 * run`, API keys that set no maximum) get it. Defaults stay the product's.
 */
export interface ServerLimits {
  maxTimeoutMs?: number;
  maxMemoryMb?: number;
}

export const LIMIT_VARIABLES = {
  maxTimeoutMs: "SCRATCHRUN_MAX_TIMEOUT_MS",
  maxMemoryMb: "SCRATCHRUN_MAX_MEMORY_MB",
} as const;

/** The environment with a command line's --max-timeout-ms / --max-memory-mb laid over it. */
export function withServerLimits(
  env: NodeJS.ProcessEnv,
  flags: { maxTimeoutMs?: string | undefined; maxMemoryMb?: string | undefined },
): NodeJS.ProcessEnv {
  const out = { ...env };
  if (flags.maxTimeoutMs !== undefined) out[LIMIT_VARIABLES.maxTimeoutMs] = flags.maxTimeoutMs;
  if (flags.maxMemoryMb !== undefined) out[LIMIT_VARIABLES.maxMemoryMb] = flags.maxMemoryMb;
  return out;
}

const bad = (what: string, message: string, fix: string) =>
  new ScratchRunError("NOT_READY", `${what}: ${message}`, { fix });

/**
 * Checks the server-wide maxima (parsed with the settings) against the ceiling (the host's RAM
 * where sandboxes run): a value out of range refuses the start, naming the variable and the bound.
 */
export function serverLimitsWithin(maxima: ServerMaxima, ceiling: Ceiling): ServerLimits {
  const read = (
    field: keyof typeof LIMIT_VARIABLES,
    min: number,
    max: number,
    unit: string,
    why: string,
  ): number | undefined => {
    const n = maxima[field];
    if (n === undefined) return undefined;
    const flag = field === "maxTimeoutMs" ? "--max-timeout-ms" : "--max-memory-mb";
    const what = `${LIMIT_VARIABLES[field]} (${flag}) = ${JSON.stringify(String(n))}`;
    if (n < min || n > max)
      throw bad(what, `must be from ${min} to ${max} ${unit} (${why})`, `Give ${min} to ${max}`);
    return n;
  };
  const maxTimeoutMs = read(
    "maxTimeoutMs",
    LIMITS.timeoutMs.min,
    ceiling.timeoutMs,
    "ms",
    `the ceiling is ${RAISE_CEILINGS.timeoutMs / 60_000} minutes`,
  );
  const maxMemoryMb = read(
    "maxMemoryMb",
    LIMITS.memoryMb.min,
    ceiling.memoryMb,
    "MB",
    ceiling.memorySource === "host"
      ? `a sandbox may have at most ${RAISE_CEILINGS.hostMemoryShare * 100}% of this host's RAM`
      : "the most a policy may name",
  );
  return {
    ...(maxTimeoutMs !== undefined ? { maxTimeoutMs } : {}),
    ...(maxMemoryMb !== undefined ? { maxMemoryMb } : {}),
  };
}

/** The server-wide policy from its maxima (checked already). */
export function serverPolicy(limits: ServerLimits): CallPolicy {
  return {
    ...DEFAULT_POLICY,
    timeoutMs: rangeWithMax(LIMITS.timeoutMs, limits.maxTimeoutMs ?? LIMITS.timeoutMs.max),
    memoryMb: rangeWithMax(LIMITS.memoryMb, limits.maxMemoryMb ?? LIMITS.memoryMb.max),
  };
}
