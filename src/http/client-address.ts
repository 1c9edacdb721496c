/**
 * Who a request comes from, for the per-address limits (failed authentications, sign-ins,
 * registrations): the connection's peer, or, when that peer is a proxy the operator named
 * (SCRATCHRUN_TRUSTED_PROXIES), the client its X-Forwarded-For names. Pure.
 *
 * X-Forwarded-For is read from the right: each proxy appends the address it was connected from,
 * so the rightmost entry is what our peer saw, the one before it what the proxy before that saw,
 * and so on. The client is the first entry, from the right, that is not itself a trusted proxy;
 * everything left of it was written by the client and is never read. An entry that is not an
 * address stops the walk at the last trusted hop (a trusted proxy writes addresses only), so a
 * client cannot pick its bucket by writing garbage.
 */
import { BlockList, isIP } from "node:net";

export interface TrustedProxies {
  /** The operator's entries as written (addresses and CIDR ranges), for logs. */
  readonly entries: readonly string[];
  readonly has: (address: string) => boolean;
}

export const NO_TRUSTED_PROXIES: TrustedProxies = { entries: [], has: () => false };

/** `::ffff:1.2.3.4` is 1.2.3.4; an IPv6 zone (`fe80::1%eth0`) is dropped. Null: no address. */
export function normaliseAddress(raw: string): string | null {
  let a = raw.trim();
  if (a.startsWith("[") && a.endsWith("]")) a = a.slice(1, -1);
  const zone = a.indexOf("%");
  if (zone >= 0) a = a.slice(0, zone);
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(a);
  if (mapped) a = mapped[1]!;
  const v = isIP(a);
  if (v === 4) return a;
  if (v === 6) return a.toLowerCase();
  return null;
}

/**
 * The operator's list (addresses and CIDR ranges, IPv4 or IPv6); a TypeError names the first entry
 * that is neither.
 */
export function parseTrustedProxies(list: readonly string[]): TrustedProxies {
  const block = new BlockList();
  const entries: string[] = [];
  for (const raw of list) {
    const entry = raw.trim();
    if (entry === "") continue;
    const slash = entry.indexOf("/");
    const address = normaliseAddress(slash < 0 ? entry : entry.slice(0, slash));
    const type = address === null ? null : isIP(address) === 4 ? "ipv4" : "ipv6";
    const prefixText = slash < 0 ? null : entry.slice(slash + 1);
    const prefix =
      prefixText === null ? null : /^\d{1,3}$/.test(prefixText) ? Number(prefixText) : NaN;
    if (
      address === null ||
      type === null ||
      Number.isNaN(prefix) ||
      (prefix !== null && prefix > (type === "ipv4" ? 32 : 128))
    )
      throw new TypeError(
        `SCRATCHRUN_TRUSTED_PROXIES: ${JSON.stringify(entry)} is not an IP address or CIDR range`,
      );
    if (prefix === null) block.addAddress(address, type);
    else block.addSubnet(address, prefix, type);
    entries.push(entry);
  }
  if (entries.length === 0) return NO_TRUSTED_PROXIES;
  return {
    entries,
    has: (address) => {
      const a = normaliseAddress(address);
      return a !== null && block.check(a, isIP(a) === 4 ? "ipv4" : "ipv6");
    },
  };
}

/**
 * The client's address: the peer's, unless the peer is a trusted proxy; then the rightmost entry
 * of X-Forwarded-For (all its headers, in order) that is not a trusted proxy. "unknown" when the
 * peer has no address (a closed socket).
 */
export function clientAddress(
  peer: string | undefined,
  forwardedFor: string | readonly string[] | undefined,
  trusted: TrustedProxies,
): string {
  const from = peer === undefined ? null : normaliseAddress(peer);
  if (from === null) return "unknown";
  if (!trusted.has(from) || forwardedFor === undefined) return from;
  const hops = (typeof forwardedFor === "string" ? [forwardedFor] : forwardedFor)
    .join(",")
    .split(",");
  let last = from;
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = normaliseAddress(hops[i]!);
    if (hop === null) return last;
    if (!trusted.has(hop)) return hop;
    last = hop;
  }
  return last;
}

/**
 * The bucket an address is counted in: an IPv4 address alone, an IPv6 address by its /64 (one
 * host is commonly given a whole /64, and would otherwise have 2^64 buckets).
 */
export function bucketOf(address: string): string {
  if (isIP(address) !== 6) return address;
  const full = expandIpv6(address);
  return full ? `${full.slice(0, 4).join(":")}::/64` : address;
}

function expandIpv6(a: string): string[] | null {
  const halves = a.split("::");
  if (halves.length > 2) return null;
  const head = halves[0] ? halves[0].split(":") : [];
  const tail = halves.length === 2 && halves[1] ? halves[1].split(":") : [];
  // An embedded IPv4 tail (::1.2.3.4) takes two groups.
  const last = tail.length ? tail : head;
  if (last.length && last[last.length - 1]!.includes(".")) {
    const v4 = last.pop()!.split(".").map(Number);
    last.push(((v4[0]! << 8) | v4[1]!).toString(16), ((v4[2]! << 8) | v4[3]!).toString(16));
  }
  const missing = 8 - head.length - tail.length;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return null;
  const groups = [...head, ...Array<string>(halves.length === 2 ? missing : 0).fill("0"), ...tail];
  return groups.map((g) => (parseInt(g, 16) || 0).toString(16));
}
