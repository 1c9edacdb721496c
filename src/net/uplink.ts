/**
 * Where sandbox traffic leaves: the uplink namespace (the host's root network namespace in
 * production, a namespace the test builds in tests), the address pools sandboxes draw from, and the
 * DNS resolvers they are told to use. Pure: validation, pool arithmetic, resolv.conf text.
 */
import { parseCidr, parseStrict, type Cidr } from "./addresses.js";
import { formatIpv4, formatIpv6 } from "./parse-address.js";

export interface UplinkConfig {
  /** Named namespace (under /run/netns) holding the uplink; null = the host's root namespace. */
  netns: string | null;
  /**
   * Prefix of everything this module creates: netns `<prefix><id>`, host links `<prefix>h<n>`, nft
   * tables `<prefix><id>`. Reaping and leak checks look for exactly this prefix.
   */
  prefix: string;
  /** IPv4 pool, carved into one /30 per sandbox (gateway .1, sandbox .2). */
  poolV4: string;
  /** IPv6 /48 pool giving each sandbox a /64 (gateway ::1, sandbox ::2); null = IPv4 only. */
  poolV6: string | null;
  /** Resolvers written into the sandbox's resolv.conf (reached like any public address). */
  dnsResolvers: string[];
  /**
   * Turn on IP forwarding in the uplink namespace. Off by default in production: forwarding is a
   * host-wide router setting the operator should own; when it is off, creation fails with a fix.
   */
  enableForwarding: boolean;
}

export const DEFAULT_UPLINK: Readonly<UplinkConfig> = Object.freeze({
  netns: null,
  prefix: "sr-",
  poolV4: "10.250.0.0/16",
  poolV6: null,
  dnsResolvers: ["1.1.1.1", "9.9.9.9"],
  enableForwarding: false,
});

export function uplinkConfig(overrides: Partial<UplinkConfig> = {}): UplinkConfig {
  const u: UplinkConfig = { ...DEFAULT_UPLINK, ...overrides };
  u.dnsResolvers = [...u.dnsResolvers];
  validateUplink(u);
  return u;
}

const PREFIX = /^[a-z][a-z0-9-]{0,8}$/;
const NETNS = /^[A-Za-z0-9_.-]{1,64}$/;

export function validateUplink(u: UplinkConfig): void {
  if (!PREFIX.test(u.prefix)) throw new TypeError(`uplink.prefix must match ${PREFIX}`);
  if (u.netns !== null && (!NETNS.test(u.netns) || u.netns.startsWith("."))) {
    throw new TypeError(`uplink.netns: bad namespace name ${u.netns}`);
  }
  const v4 = parseCidr(u.poolV4);
  if (!v4 || v4.family !== 4 || v4.prefix > 29)
    throw new TypeError("uplink.poolV4: IPv4 CIDR, /29 or larger");
  if (u.poolV6 !== null) {
    const v6 = parseCidr(u.poolV6);
    if (!v6 || v6.family !== 6 || v6.prefix !== 48)
      throw new TypeError("uplink.poolV6: an IPv6 /48");
  }
  if (u.dnsResolvers.length === 0 || u.dnsResolvers.length > 3) {
    throw new TypeError("uplink.dnsResolvers: one to three addresses");
  }
  for (const r of u.dnsResolvers) {
    if (!parseStrict(r)) throw new TypeError(`uplink.dnsResolvers: not an address: ${r}`);
  }
}

export interface SlotAddresses {
  index: number;
  sandboxV4: string;
  gatewayV4: string;
  /** Prefix length of the link (30). */
  prefixV4: number;
  sandboxV6: string | null;
  gatewayV6: string | null;
}

function cidrValue(c: Cidr): bigint {
  const p = parseStrict(c.network);
  if (!p) throw new TypeError(`bad cidr ${c.network}`);
  return p.value;
}

/** How many sandboxes the pools can hold at once. */
export function poolSize(u: UplinkConfig): number {
  const v4 = parseCidr(u.poolV4) as Cidr;
  const n = 2 ** (32 - v4.prefix) / 4;
  return u.poolV6 === null ? n : Math.min(n, 65536);
}

/** Addresses of slot `index` (0-based) of the pools. */
export function slotAddresses(u: UplinkConfig, index: number): SlotAddresses {
  if (!Number.isInteger(index) || index < 0 || index >= poolSize(u)) {
    throw new RangeError(`slot ${index} outside the pool`);
  }
  const base4 = cidrValue(parseCidr(u.poolV4) as Cidr) + BigInt(index * 4);
  const out: SlotAddresses = {
    index,
    gatewayV4: formatIpv4(base4 + 1n),
    sandboxV4: formatIpv4(base4 + 2n),
    prefixV4: 30,
    sandboxV6: null,
    gatewayV6: null,
  };
  if (u.poolV6 !== null) {
    const base6 = cidrValue(parseCidr(u.poolV6) as Cidr) | (BigInt(index) << 64n);
    out.gatewayV6 = formatIpv6(base6 + 1n);
    out.sandboxV6 = formatIpv6(base6 + 2n);
  }
  return out;
}

/** The /etc/resolv.conf a sandbox on this uplink should see (bind it read-only into the jail). */
export function resolvConf(u: UplinkConfig): string {
  const lines = u.dnsResolvers.map((r) => `nameserver ${r}`);
  lines.push("options timeout:2 attempts:2");
  return lines.join("\n") + "\n";
}

/**
 * Public networks a server keeps made ahead per kind (ready.ts, SCRATCHRUN_NET_READY): enough
 * for a burst's cold sandboxes while the pooled ones are taken (decision 0019 has the numbers).
 */
export const DEFAULT_READY_NETWORKS = 24;
