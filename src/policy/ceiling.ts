import { allowlistOf, isAllowed } from "../net/allowlist.js";
import type { KeyPolicy } from "./key-policy.js";
import type { CallerPolicy } from "./resolve.js";

/**
 * A console member's key ceiling: the most an admin lets a member give the keys they make and
 * change in the console (`users.key_ceiling`, a key policy; unset: the server's settings, so a
 * member can neither raise a key past what the server gives every caller nor lift what an admin
 * took away from the member). Pure: which fields of a key's policy go beyond a ceiling, both
 * resolved against the server's settings first (resolveCallerPolicy), so a field either leaves
 * unset means what the server gives.
 */
export type PolicyField = keyof KeyPolicy;

export interface Beyond {
  /** The key policy's field that goes beyond the ceiling. */
  field: PolicyField;
  message: string;
}

const names = (list: readonly string[]) => list.map((x) => JSON.stringify(x)).join(", ");

/** Whether an allowlist entry (`name` or `*.suffix`) allows nothing the ceiling's list does not. */
function entryWithin(entry: string, ceiling: readonly string[]): boolean {
  const list = allowlistOf(ceiling);
  if (!entry.startsWith("*.")) return isAllowed(list, entry);
  const suffix = entry.slice(1);
  return list.suffixes.some((w) => suffix === w || suffix.endsWith(w));
}

/** The fields of `key` that go beyond `ceiling`, each with what the ceiling allows. */
export function beyondCeiling(key: CallerPolicy, ceiling: CallerPolicy): Beyond[] {
  const out: Beyond[] = [];
  const extra = key.call.runtimes.filter((r) => !ceiling.call.runtimes.includes(r));
  if (extra.length)
    out.push({
      field: "runtimes",
      message: `runtimes: ${names(extra)} (the ceiling allows ${names(ceiling.call.runtimes)})`,
    });
  const keyPublic = key.call.networks.includes("public");
  if (keyPublic && !ceiling.call.networks.includes("public"))
    out.push({ field: "network", message: 'network: "public" (the ceiling allows "none" only)' });
  else if (keyPublic && ceiling.egressAllow !== null) {
    const allowed = ceiling.egressAllow;
    const wider =
      key.egressAllow === null
        ? ["every public name"]
        : key.egressAllow.filter((e) => !entryWithin(e, allowed));
    if (wider.length)
      out.push({
        field: "egress_allow",
        message: `egress_allow: ${key.egressAllow === null ? wider[0] : names(wider)} (the ceiling allows ${allowed.length ? names(allowed) : "no name"})`,
      });
  }
  const numbers: [PolicyField, number, number][] = [
    ["max_timeout_ms", key.call.timeoutMs.max, ceiling.call.timeoutMs.max],
    ["max_memory_mb", key.call.memoryMb.max, ceiling.call.memoryMb.max],
    ["concurrency", key.quota.maxConcurrent, ceiling.quota.maxConcurrent],
    ["rate_per_minute", key.quota.ratePerMinute, ceiling.quota.ratePerMinute],
  ];
  for (const [field, wanted, most] of numbers)
    if (wanted > most) out.push({ field, message: `${field}: ${wanted} (the ceiling is ${most})` });
  return out;
}

/**
 * What a member's write may not leave beyond the ceiling: a new key, every field; a change, the
 * fields it names (a field an admin set beyond the ceiling stays until the member names it).
 * Naming network or egress_allow names both (together they say where "public" reaches).
 */
export function refusedFields(
  beyond: readonly Beyond[],
  named: readonly string[] | "all",
): Beyond[] {
  if (named === "all") return [...beyond];
  const set = new Set(named);
  if (set.has("network") || set.has("egress_allow")) set.add("network").add("egress_allow");
  return beyond.filter((b) => set.has(b.field));
}
