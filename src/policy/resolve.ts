import type { KeyLimits } from "./quota.js";
import { allowlistOf, intersectAllowlists, type DomainAllowlist } from "../net/allowlist.js";
import { RUNTIMES } from "../runtimes/names.js";
import type { NetworkMode } from "../schema/names.js";
import {
  DEFAULT_POLICY,
  rangeWithMax,
  type CallPolicy,
  type LimitSource,
} from "../schema/policy.js";
import type { Ceiling } from "./host.js";
import type { KeyPolicy } from "./key-policy.js";

/** Everything one caller's calls are held to: the schema's policy, the quota, the allowlist. */
export interface CallerPolicy {
  /** What the caller's tool schema advertises and every call is checked against. */
  readonly call: CallPolicy;
  /** Calls in flight and per minute. */
  readonly quota: KeyLimits;
  /**
   * With network "public": the only domains the calls may reach (a key's list within the
   * server's, when both have one); null: the server's (every public one, if it has none).
   */
  readonly egressAllow: readonly string[] | null;
  /** What "public" means for this caller when its key changes it (tool description), else null. */
  readonly networkNote: string | null;
}

export interface ResolveInput {
  /** The server-wide policy (product defaults, or an operator's raise). */
  server: CallPolicy;
  /** What the host (or, for an API replica, a policy at all) can give. */
  ceiling: Ceiling;
  /** The server-wide per-key quota. */
  quota: KeyLimits;
  /** The key's own policy; null: none (the server's for everything). */
  key: KeyPolicy | null;
  /** The server's egress allowlist (SCRATCHRUN_EGRESS_ALLOW); absent or null: none. */
  serverAllowlist?: DomainAllowlist | null;
}

/** The domains a key's calls reach: its list, within the server's if the server has one. */
function keyAllowlist(key: readonly string[], server: DomainAllowlist | null): readonly string[] {
  return server ? intersectAllowlists(server, allowlistOf(key)).entries : key;
}

function capped(
  wanted: number,
  source: LimitSource,
  ceiling: number,
  ceilingSource: LimitSource,
): { max: number; source: LimitSource } {
  return wanted > ceiling ? { max: ceiling, source: ceilingSource } : { max: wanted, source };
}

/**
 * Pure: the policy a caller gets. A key's field replaces the server's (a raise or a narrowing),
 * then the ceiling caps every maximum (memory: the host's share of RAM), and a default never
 * exceeds its maximum. A key's egress allowlist narrows "public" (within the server's own
 * allowlist, if it has one: Engine.execute intersects them).
 */
export function resolveCallerPolicy(o: ResolveInput): CallerPolicy {
  const { server, ceiling, key } = o;
  const runtimes = key?.runtimes
    ? RUNTIMES.filter((r) => server.runtimes.includes(r) && key.runtimes!.includes(r))
    : server.runtimes;
  let networks: readonly NetworkMode[] = server.networks;
  let networkNote: string | null = null;
  let networksSource = server.sources.networks;
  const allow = key?.egress_allow
    ? keyAllowlist(key.egress_allow, o.serverAllowlist ?? null)
    : null;
  if (key?.network === "none") {
    networks = ["none"];
    networksSource = "key";
    networkNote = "none (this API key has no network)";
  } else if (allow) {
    // What applies: the key's list within the server's, not the key's list as written.
    networkNote =
      allow.length > 0
        ? `public, to these domains only: ${allow.join(", ")}`
        : "public, but to no domain (this API key's allowlist and the server's have none in common)";
  }
  const timeout = capped(
    key?.max_timeout_ms ?? server.timeoutMs.max,
    key?.max_timeout_ms !== undefined ? "key" : server.sources.timeoutMs,
    ceiling.timeoutMs,
    "server",
  );
  const memory = capped(
    key?.max_memory_mb ?? server.memoryMb.max,
    key?.max_memory_mb !== undefined ? "key" : server.sources.memoryMb,
    ceiling.memoryMb,
    ceiling.memorySource,
  );
  // A key names at least one runtime and the server allows all, so neither is ever empty; if it
  // were, refusing everything is the only safe answer (an enum cannot be empty).
  if (runtimes.length === 0 || networks.length === 0)
    throw new Error("a caller's policy allows no runtime or no network mode");
  const rate = key?.rate_per_minute;
  return {
    call: {
      runtimes,
      networks,
      timeoutMs: rangeWithMax(server.timeoutMs, timeout.max),
      memoryMb: rangeWithMax(server.memoryMb, memory.max),
      sources: {
        runtimes: key?.runtimes ? "key" : server.sources.runtimes,
        networks: networksSource,
        timeoutMs: timeout.source,
        memoryMb: memory.source,
      },
    },
    quota: {
      maxConcurrent: key?.concurrency ?? o.quota.maxConcurrent,
      ratePerMinute: rate ?? o.quota.ratePerMinute,
      // A key limited to a few calls a minute does not get the server's whole burst at once.
      burst: rate !== undefined ? Math.min(o.quota.burst, rate) : o.quota.burst,
    },
    egressAllow: networks.includes("public") ? allow : null,
    networkNote,
  };
}

/**
 * The policy of whoever may ask for everything this host can give (a worker, for the calls its
 * replicas admitted): every runtime and network, maxima at the ceiling, the product's defaults.
 */
export function ceilingPolicyOf(ceiling: Ceiling): CallPolicy {
  return {
    ...DEFAULT_POLICY,
    timeoutMs: rangeWithMax(DEFAULT_POLICY.timeoutMs, ceiling.timeoutMs),
    memoryMb: rangeWithMax(DEFAULT_POLICY.memoryMb, ceiling.memoryMb),
    sources: { ...DEFAULT_POLICY.sources, memoryMb: ceiling.memorySource },
  };
}
