import { LIMITS } from "./limits.js";
import { RUNTIMES, type RuntimeName } from "../runtimes/names.js";
import { NETWORK_MODES, type NetworkMode } from "./names.js";

/**
 * Who set a limit, for the error that names it: the server's setting (the product's default or
 * an operator's raise), an API key's own policy, or what this host can give at all.
 */
export type LimitSource = "server" | "key" | "host";

export interface RangeLimit {
  default: number;
  max: number;
}

/**
 * What one caller may ask of `scratchrun_exec`: the input schema is built from this
 * (`execInputSchemaFor`), and so are the MCP tool that caller lists and the errors it gets. The
 * product's policy is `DEFAULT_POLICY` (today's LIMITS); an operator's raise or an API key's
 * policy gives another one (src/policy/).
 */
export interface CallPolicy {
  /** Non-empty, in RUNTIMES order. */
  readonly runtimes: readonly RuntimeName[];
  /** ["public", "none"] or ["none"]. */
  readonly networks: readonly NetworkMode[];
  readonly timeoutMs: RangeLimit;
  readonly memoryMb: RangeLimit;
  readonly sources: {
    readonly runtimes: LimitSource;
    readonly networks: LimitSource;
    readonly timeoutMs: LimitSource;
    readonly memoryMb: LimitSource;
  };
}

export const DEFAULT_POLICY: CallPolicy = {
  runtimes: RUNTIMES,
  networks: NETWORK_MODES,
  timeoutMs: { default: LIMITS.timeoutMs.default, max: LIMITS.timeoutMs.max },
  memoryMb: { default: LIMITS.memoryMb.default, max: LIMITS.memoryMb.max },
  sources: { runtimes: "server", networks: "server", timeoutMs: "server", memoryMb: "server" },
};

/** "on this server", "for this API key", "on this host": the end of an error naming a limit. */
export function sourceText(source: LimitSource): string {
  return source === "key"
    ? "for this API key"
    : source === "host"
      ? "on this host"
      : "on this server";
}

/** A stable text of a policy (a cache key; equal policies give equal text). */
export function policyKey(p: CallPolicy): string {
  return JSON.stringify([p.runtimes, p.networks, p.timeoutMs, p.memoryMb, p.sources]);
}

/** The default within a range: the product's default, unless a lower maximum cuts it. */
export function rangeWithMax(limit: { default: number }, max: number): RangeLimit {
  return { default: Math.min(limit.default, max), max };
}

/**
 * What a request (already parsed, so well-typed) asks beyond a policy: one line per field, empty
 * when it is within it. The authority every front end's call passes through (src/api/service.ts,
 * Engine.execute against the host's ceiling), whatever schema parsed the request.
 */
export function policyViolations(
  req: {
    runtime: RuntimeName;
    network: NetworkMode;
    timeout_ms: number;
    memory_mb: number;
  },
  p: CallPolicy,
): string[] {
  const out: string[] = [];
  if (!p.runtimes.includes(req.runtime)) out.push(`runtime: ${runtimeMessage(req.runtime, p)}`);
  if (!p.networks.includes(req.network)) out.push(`network: ${networkMessage(req.network, p)}`);
  if (req.timeout_ms > p.timeoutMs.max) out.push(`timeout_ms: ${maxMessage(p, "timeoutMs")}`);
  if (req.memory_mb > p.memoryMb.max) out.push(`memory_mb: ${maxMessage(p, "memoryMb")}`);
  return out;
}

const shown = (v: unknown) => (typeof v === "string" ? JSON.stringify(v) : String(v));

/** Why `value` is refused as a runtime: not a runtime at all, or not one this policy allows. */
export function runtimeMessage(value: unknown, p: CallPolicy): string {
  const allowed = p.runtimes.join(" | ");
  return (RUNTIMES as readonly unknown[]).includes(value)
    ? `${shown(value)} is not allowed ${sourceText(p.sources.runtimes)} (allowed: ${allowed})`
    : `${shown(value)} is not one of ${allowed}`;
}

/** Why `value` is refused as a network mode. */
export function networkMessage(value: unknown, p: CallPolicy): string {
  const allowed = p.networks.map((n) => JSON.stringify(n)).join(" or ");
  return (NETWORK_MODES as readonly unknown[]).includes(value)
    ? `${shown(value)} is not allowed ${sourceText(p.sources.networks)} (allowed: ${allowed})`
    : `${shown(value)} is not ${allowed}`;
}

export function maxMessage(p: CallPolicy, field: "timeoutMs" | "memoryMb"): string {
  const unit = field === "timeoutMs" ? "ms" : "MB";
  return `at most ${p[field].max} ${unit} ${sourceText(p.sources[field])}`;
}
