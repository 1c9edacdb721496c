/**
 * Which destinations a sandbox may never reach, as data (a CIDR list the nftables renderer emits)
 * and as a pure classifier (used by the renderer's tests and anything that reasons about an
 * address). The packet filter is the enforcement: a name that resolves into a blocked range is
 * dropped on the wire whatever the classifier was or wasn't asked.
 *
 * Fail closed: anything that does not parse as an address is classified blocked.
 */
import { formatIpv4, formatIpv6, parseAddress, type ParsedAddress } from "./parse-address.js";

export interface Cidr {
  family: 4 | 6;
  /** Canonical network address text (host bits zero). */
  network: string;
  prefix: number;
  /** Why it is blocked, for reports and tests. */
  name: string;
}

/** The IPv4 ranges of issue 4 (RFC 6890 special-purpose blocks a sandbox has no business with). */
const V4_RANGES: ReadonlyArray<readonly [string, number, string]> = [
  ["0.0.0.0", 8, "this-network"],
  ["10.0.0.0", 8, "private-10"],
  ["100.64.0.0", 10, "shared-cgnat"],
  ["127.0.0.0", 8, "loopback"],
  ["169.254.0.0", 16, "link-local-metadata"],
  ["172.16.0.0", 12, "private-172"],
  ["192.0.0.0", 24, "ietf-protocol"],
  ["192.168.0.0", 16, "private-192"],
  ["198.18.0.0", 15, "benchmarking"],
  ["224.0.0.0", 4, "multicast"],
  ["240.0.0.0", 4, "reserved-broadcast"],
];

/** IPv6 prefixes that embed an IPv4 address in their low bits, and how many bits precede it. */
const V4_EMBEDDINGS: ReadonlyArray<readonly [string, bigint, number, number]> = [
  // [name, prefix value, prefix length, bit offset of the v4 address from the low end]
  ["nat64", 0x0064ff9b_0000_0000_0000_0000_0000_0000n, 96, 0],
  ["6to4", 0x2002_0000_0000_0000_0000_0000_0000_0000n, 16, 80],
];

/** IPv6 ranges blocked as a whole. */
const V6_RANGES: ReadonlyArray<readonly [string, number, string]> = [
  ["::", 128, "unspecified"],
  ["::1", 128, "loopback"],
  ["::ffff:0:0", 96, "ipv4-mapped"],
  ["64:ff9b:1::", 48, "nat64-local-use"],
  ["fc00::", 7, "unique-local"],
  ["fe80::", 10, "link-local"],
  ["fec0::", 10, "site-local-deprecated"],
  ["ff00::", 8, "multicast"],
];

function v4Value(text: string): bigint {
  const p = parseAddress(text);
  if (!p || p.family !== 4) throw new Error(`bad built-in IPv4 range ${text}`);
  return p.value;
}

function v6Value(text: string): bigint {
  const p = parseAddress(text);
  if (!p || p.family !== 6) throw new Error(`bad built-in IPv6 range ${text}`);
  return p.value;
}

function buildBlocked(): Cidr[] {
  const out: Cidr[] = [];
  for (const [net, prefix, name] of V4_RANGES) {
    out.push({ family: 4, network: formatIpv4(v4Value(net)), prefix, name });
  }
  for (const [net, prefix, name] of V6_RANGES) {
    out.push({ family: 6, network: formatIpv6(v6Value(net)), prefix, name });
  }
  // Every NAT64 form first, then every 6to4 form (the order the ruleset has always listed).
  const embedded = V4_RANGES.map(([net, prefix, name]) =>
    embedV4({ family: 4, network: net, prefix, name }),
  );
  for (let kind = 0; kind < V4_EMBEDDINGS.length; kind++)
    for (const forms of embedded) out.push(forms[kind] as Cidr);
  return out;
}

/** The IPv6 forms (NAT64, 6to4) of an IPv4 range, each as long as the range itself. */
export function embedV4(c: Cidr): Cidr[] {
  if (c.family !== 4) return [];
  return embedV4Value(v4Value(c.network), c.prefix).map((e) => ({
    family: 6 as const,
    network: formatIpv6(e.value),
    prefix: e.prefix,
    name: `${e.kind}:${c.name}`,
  }));
}

/** embedV4 on numbers: the IPv6 network values and prefixes of an IPv4 network. */
export function embedV4Value(
  value: bigint,
  prefix: number,
): Array<{ value: bigint; prefix: number; kind: string }> {
  return V4_EMBEDDINGS.map(([kind, base, basePrefix, shift]) => ({
    value: base | (value << BigInt(shift)),
    prefix: basePrefix + prefix,
    kind,
  }));
}

/** Every blocked destination range, both families, IPv4 forms embedded in IPv6 included. */
export const BLOCKED_CIDRS: readonly Cidr[] = Object.freeze(buildBlocked());

/** The IPv4 ranges alone, for tests that check each appears in both families. */
export const BLOCKED_V4_CIDRS: readonly Cidr[] = Object.freeze(
  BLOCKED_CIDRS.filter((c) => c.family === 4),
);

export function cidrText(c: Cidr): string {
  return `${c.network}/${c.prefix}`;
}

/** Parses "a.b.c.d/n" or "x::/n"; null if malformed or host bits are set. */
export function parseCidr(text: string, name = "custom"): Cidr | null {
  const m = /^([^/]+)\/(\d{1,3})$/.exec(text.trim());
  if (!m) return null;
  const addr = parseStrict(m[1] as string);
  const prefix = Number(m[2]);
  if (!addr) return null;
  const bits = addr.family === 4 ? 32 : 128;
  if (prefix > bits) return null;
  const hostMask = (1n << BigInt(bits - prefix)) - 1n;
  if ((addr.value & hostMask) !== 0n) return null;
  const network = addr.family === 4 ? formatIpv4(addr.value) : formatIpv6(addr.value);
  return { family: addr.family, network, prefix, name };
}

/** Dotted quad or IPv6 text, no inet_aton shorthands, no zone: for configuration. */
export function parseStrict(text: string): ParsedAddress | null {
  if (text.includes("%") || text.includes("[")) return null;
  if (!text.includes(":") && !/^\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(text)) return null;
  return parseAddress(text);
}

export function cidrContains(c: Cidr, addr: ParsedAddress): boolean {
  if (c.family !== addr.family) return false;
  const bits = c.family === 4 ? 32 : 128;
  const net = parseAddress(c.network);
  if (!net) return false;
  const shift = BigInt(bits - c.prefix);
  return addr.value >> shift === net.value >> shift;
}

export type AddressClass =
  | { valid: false; blocked: true; reason: "unparsable" }
  | {
      valid: true;
      family: 4 | 6;
      /** Canonical text of the address the packet would carry. */
      address: string;
      blocked: boolean;
      /** Name of the first blocked range that matched, or null when public. */
      range: string | null;
      /** The IPv4 address embedded in a mapped/NAT64/6to4 form, when there is one. */
      embeddedV4: string | null;
    };

/** The IPv4 address an IPv6 address carries in a known embedding, or null. */
function embeddedV4Of(value: bigint): bigint | null {
  if (value >> 32n === 0xffffn) return value & 0xffffffffn; // ::ffff:a.b.c.d
  for (const [, base, prefix, shift] of V4_EMBEDDINGS) {
    if (value >> BigInt(128 - prefix) === base >> BigInt(128 - prefix)) {
      return (value >> BigInt(shift)) & 0xffffffffn;
    }
  }
  return null;
}

function firstMatch(addr: ParsedAddress): Cidr | null {
  return BLOCKED_CIDRS.find((c) => cidrContains(c, addr)) ?? null;
}

/**
 * Classifies a destination as a program would name it (inet_aton shorthands, IPv6 with zone or
 * brackets). An IPv6 form that embeds an IPv4 address is blocked when the embedded address is.
 */
export function classifyAddress(input: string): AddressClass {
  const addr = parseAddress(input);
  if (!addr) return { valid: false, blocked: true, reason: "unparsable" };
  if (addr.family === 4) {
    const hit = firstMatch(addr);
    return {
      valid: true,
      family: 4,
      address: formatIpv4(addr.value),
      blocked: hit !== null,
      range: hit ? hit.name : null,
      embeddedV4: null,
    };
  }
  const inner = embeddedV4Of(addr.value);
  const innerHit = inner === null ? null : firstMatch({ family: 4, value: inner });
  const hit = innerHit ?? firstMatch(addr);
  return {
    valid: true,
    family: 6,
    address: formatIpv6(addr.value),
    blocked: hit !== null,
    range: hit ? hit.name : null,
    embeddedV4: inner === null ? null : formatIpv4(inner),
  };
}

/** True when a sandbox must never reach this destination (unparsable input included). */
export function isBlockedAddress(addr: string): boolean {
  return classifyAddress(addr).blocked;
}
