import { z } from "zod";
import { formatIssues } from "../schema/validate.js";
import { LIMITS, RAISE_CEILINGS } from "../schema/limits.js";
import { RUNTIMES } from "../runtimes/names.js";
import { NETWORK_MODES } from "../schema/names.js";
import { checkDomainPatterns } from "./domains.js";

/**
 * An API key's own policy, stored with the key (keys.policy, JSON) and set by `scratchrun keys
 * create|update`. Every field is optional: absent means the server's setting. Maxima may be
 * above the product's (a raise for this key) or below (a narrower key); a server caps them at
 * what its host can give (src/policy/resolve.ts).
 */
export const KEY_POLICY_BOUNDS = {
  maxTimeoutMs: { min: LIMITS.timeoutMs.min, max: RAISE_CEILINGS.timeoutMs },
  maxMemoryMb: { min: LIMITS.memoryMb.min, max: RAISE_CEILINGS.memoryMb },
  concurrency: { min: 1, max: 1000 },
  ratePerMinute: { min: 1, max: 1_000_000 },
} as const;

const int = (b: { min: number; max: number }, unit: string) =>
  z
    .number()
    .int()
    .min(b.min, { error: `must be from ${b.min} to ${b.max}${unit}` })
    .max(b.max, { error: `must be from ${b.min} to ${b.max}${unit}` });

export const keyPolicySchema = z
  .strictObject({
    /** The runtimes the key may use (its calls' runtime enum). */
    runtimes: z
      .array(z.enum(RUNTIMES))
      .min(1, { error: "names no runtime" })
      .transform((list) => RUNTIMES.filter((r) => list.includes(r)))
      .optional(),
    /** "none": the key's calls have no network; "public": as the server gives. */
    network: z.enum(NETWORK_MODES).optional(),
    /** With network "public": the domains the key's calls may reach (the egress allowlist). */
    egress_allow: z
      .array(z.string())
      .transform((list, ctx) => {
        const c = checkDomainPatterns(list);
        if (c.ok) return c.patterns;
        ctx.addIssue({ code: "custom", message: c.error });
        return z.NEVER;
      })
      .optional(),
    max_timeout_ms: int(KEY_POLICY_BOUNDS.maxTimeoutMs, " ms (15 minutes)").optional(),
    max_memory_mb: int(KEY_POLICY_BOUNDS.maxMemoryMb, " MB").optional(),
    /** Calls in flight at once. */
    concurrency: int(KEY_POLICY_BOUNDS.concurrency, "").optional(),
    /** Calls per minute (token bucket). */
    rate_per_minute: int(KEY_POLICY_BOUNDS.ratePerMinute, "").optional(),
  })
  .superRefine((p, ctx) => {
    if (p.egress_allow && p.network === "none")
      ctx.addIssue({
        code: "custom",
        path: ["egress_allow"],
        message: 'needs network "public" (a key with network "none" reaches nothing)',
      });
  });

export type KeyPolicy = z.output<typeof keyPolicySchema>;

/** Checks and normalises a policy; throws a TypeError naming every bad field. */
export function parseKeyPolicy(input: unknown): KeyPolicy {
  const r = keyPolicySchema.safeParse(input);
  if (!r.success) throw new TypeError(`key policy: ${formatIssues(r.error.issues)}`);
  return r.data;
}

/** A stored policy (keys.policy): null or "{}" is none. */
export function policyFromColumn(text: string | null): KeyPolicy | null {
  if (text === null) return null;
  const p = parseKeyPolicy(JSON.parse(text));
  return Object.keys(p).length === 0 ? null : p;
}

export function policyToColumn(p: KeyPolicy | null): string | null {
  return p === null || Object.keys(p).length === 0 ? null : JSON.stringify(p);
}

/**
 * The command line's policy flags (`scratchrun keys create|update`), each a field to set, or
 * `default` to clear it (back to the server's setting).
 */
export const POLICY_FLAGS = {
  runtimes: "runtimes",
  network: "network",
  egress_allow: "egress-allow",
  max_timeout_ms: "max-timeout-ms",
  max_memory_mb: "max-memory-mb",
  concurrency: "concurrency",
  rate_per_minute: "rate",
} as const satisfies Record<keyof KeyPolicy, string>;

export type PolicyPatch = { [K in keyof KeyPolicy]?: unknown | null };

/**
 * Flag values (strings) into a patch: lists split on commas, numbers as integers, `default` as
 * null. Throws a TypeError naming the flag when a value is not even of the right kind; ranges and
 * names are checked on the merged policy (parseKeyPolicy).
 */
export function patchFromFlags(values: Partial<Record<string, string>>): PolicyPatch {
  const patch: PolicyPatch = {};
  for (const [field, flag] of Object.entries(POLICY_FLAGS) as [keyof KeyPolicy, string][]) {
    const raw = values[flag];
    if (raw === undefined) continue;
    if (raw === "default") {
      patch[field] = null;
      continue;
    }
    if (field === "runtimes" || field === "egress_allow")
      patch[field] = raw
        .split(",")
        .map((s) => s.trim())
        .filter((s) => s !== "");
    else if (field === "network") patch[field] = raw;
    else {
      if (!/^\d+$/.test(raw))
        throw new TypeError(
          `--${flag}: ${JSON.stringify(raw)} is not a whole number (or "default")`,
        );
      patch[field] = Number(raw);
    }
  }
  return patch;
}

/** `base` with the patch applied and checked as a whole (a cleared field is dropped). */
export function applyPatch(base: KeyPolicy | null, patch: PolicyPatch): KeyPolicy | null {
  const merged: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete merged[k];
    else merged[k] = v;
  }
  const p = parseKeyPolicy(merged);
  return Object.keys(p).length === 0 ? null : p;
}

/** One line for `scratchrun keys list`: the fields a key sets, or "server defaults". */
export function describeKeyPolicy(p: KeyPolicy | null): string {
  if (!p) return "server defaults";
  const parts: string[] = [];
  if (p.runtimes) parts.push(`runtimes=${p.runtimes.join(",")}`);
  if (p.network) parts.push(`network=${p.network}`);
  if (p.egress_allow) parts.push(`egress-allow=${p.egress_allow.join(",")}`);
  if (p.max_timeout_ms !== undefined) parts.push(`max-timeout-ms=${p.max_timeout_ms}`);
  if (p.max_memory_mb !== undefined) parts.push(`max-memory-mb=${p.max_memory_mb}`);
  if (p.concurrency !== undefined) parts.push(`concurrency=${p.concurrency}`);
  if (p.rate_per_minute !== undefined) parts.push(`rate=${p.rate_per_minute}/min`);
  return parts.join(" ");
}
