/**
 * What of the host's own network a sandbox must never reach, from the host's addresses and
 * routes: its own addresses, every subnet it reaches directly (the on-link subnets of its
 * interfaces and every other route without a gateway: the neighbours), every gateway of its
 * routes, and the sandbox address pools. The blocked ranges (addresses.ts) stop private space;
 * this stops the host's neighbourhood when it is public address space (a LAN or an IPv6 /64 on
 * public addresses), which no fixed list can know.
 *
 * Pure: `ip -j -force -batch -` output (addr show, route show table all, nexthop show) in, CIDRs
 * out. Fails closed: output that does not parse throws, and nothing is dropped from the block set
 * for being unusual (a device route is on-link whatever the device type).
 */
import { BLOCKED_CIDRS, cidrContains, embedV4Value, parseStrict, type Cidr } from "./addresses.js";
import { formatIpv4, formatIpv6 } from "./parse-address.js";

/** The batch `ip -j -force -batch -` reads (one JSON document per line comes back). */
export const HOST_NETWORK_BATCH = "addr show\nroute show table all\nnexthop show\n";

export interface HostAddress {
  ifname: string;
  local: string;
  /** The peer of a point-to-point address (`ip addr add A peer P/len`). */
  peer?: string;
  prefixlen: number;
}

export interface HostRoute {
  /** unicast (ip's default), local, broadcast, anycast, blackhole, ... */
  type: string;
  /** CIDR, a bare address (a host route) or "default". */
  dst: string;
  dev?: string;
  /** Every next hop's gateway (gateway, via, nexthops, a nexthop object's gateway). */
  gateways: string[];
  /** A next hop that sends straight out of a device, without a gateway. */
  direct: boolean;
}

export interface HostNetwork {
  addresses: HostAddress[];
  routes: HostRoute[];
  /** Gateways of nexthop objects (`ip nexthop`), which routes may name by id only. */
  nexthopGateways: string[];
}

type Json = Record<string, unknown>;
const isObj = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);
const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);

function gatewayOf(hop: Json): string | undefined {
  const via = hop.via;
  return str(hop.gateway) ?? (isObj(via) ? str(via.host) : undefined);
}

/** Parses the batch's output. Throws when the address or route list is missing or malformed. */
export function parseHostNetwork(output: string): HostNetwork {
  const docs = output
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as unknown);
  const lists = docs.filter((d): d is unknown[] => Array.isArray(d));
  const links = lists.find((l) => l.some((x) => isObj(x) && "addr_info" in x));
  const routes = lists.find((l) => l.some((x) => isObj(x) && "dst" in x));
  const nexthops = lists.find((l) => l.some((x) => isObj(x) && "id" in x && !("dst" in x)));
  if (!links || !routes) throw new Error("ip did not list the host's addresses and routes");
  const net: HostNetwork = { addresses: [], routes: [], nexthopGateways: [] };
  for (const link of links) {
    if (!isObj(link) || !Array.isArray(link.addr_info)) continue;
    const ifname = str(link.ifname) ?? "";
    for (const a of link.addr_info) {
      if (!isObj(a) || str(a.local) === undefined || typeof a.prefixlen !== "number") continue;
      const peer = str(a.address);
      net.addresses.push({
        ifname,
        local: str(a.local) as string,
        prefixlen: a.prefixlen,
        ...(peer !== undefined ? { peer } : {}),
      });
    }
  }
  for (const r of routes) {
    if (!isObj(r) || str(r.dst) === undefined) continue;
    const hops = Array.isArray(r.nexthops) ? r.nexthops.filter(isObj) : [r];
    const gateways = hops.map(gatewayOf).filter((g): g is string => g !== undefined);
    const dev = str(r.dev) ?? hops.map((h) => str(h.dev)).find((d) => d !== undefined);
    net.routes.push({
      type: str(r.type) ?? "unicast",
      dst: str(r.dst) as string,
      ...(dev !== undefined ? { dev } : {}),
      gateways,
      // ip prints a nexthop object's gateway on the route (nhid); a hop without one is direct.
      direct: hops.some((h) => gatewayOf(h) === undefined),
    });
  }
  for (const nh of nexthops ?? []) {
    const g = isObj(nh) ? gatewayOf(nh) : undefined;
    if (g !== undefined) net.nexthopGateways.push(g);
  }
  return net;
}

/** Route types whose destination is the host itself or its link (not a way elsewhere). */
const SELF_TYPES = new Set(["local", "broadcast", "anycast"]);

/** A network as numbers (host bits cleared): what the set arithmetic below works on. */
interface Net {
  family: 4 | 6;
  value: bigint;
  prefix: number;
  name: string;
}

const width = (family: 4 | 6) => (family === 4 ? 32 : 128);

/** `text` ("a.b.c.d/n", "x::/n", a bare address), or an address with `prefix`; null if neither. */
function toNet(text: string, prefix?: number, name = "host"): Net | null {
  const [addr, len] = text.includes("/") ? text.split("/") : [text, undefined];
  const p = parseStrict(addr ?? "");
  if (!p) return null;
  const bits = width(p.family);
  const n = prefix ?? (len === undefined ? bits : Number(len));
  if (!Number.isInteger(n) || n < 0 || n > bits) return null;
  const shift = BigInt(bits - n);
  return { family: p.family, value: (p.value >> shift) << shift, prefix: n, name };
}

function toCidr(n: Net): Cidr {
  const network = n.family === 4 ? formatIpv4(n.value) : formatIpv6(n.value);
  return { family: n.family, network, prefix: n.prefix, name: n.name };
}

const SHIFTS = Array.from({ length: 129 }, (_, i) => BigInt(i));

/** Whether every address of `inner` lies in `outer`. */
function covers(outer: Net, inner: Net): boolean {
  if (outer.family !== inner.family || outer.prefix > inner.prefix) return false;
  const shift = SHIFTS[width(outer.family) - outer.prefix] as bigint;
  return inner.value >> shift === outer.value >> shift;
}

const BLOCKED_NETS: readonly Net[] = BLOCKED_CIDRS.map((c) => toNet(c.network, c.prefix, c.name)!);

/** Whether every address of `c` lies in `outer`. */
export function cidrCovers(outer: Cidr, c: Cidr): boolean {
  const [o, i] = [toNet(outer.network, outer.prefix), toNet(c.network, c.prefix)];
  return o !== null && i !== null && covers(o, i);
}

export interface HostBlockOptions {
  /** Links (host ends of sandbox links) to leave out: their /30s are the pools, given below. */
  ignoreLinkPrefix: string;
  /** The sandbox address pools (CIDRs), blocked whole: no sandbox reaches another. */
  pools: readonly string[];
}

export interface HostBlockSet {
  /** The host's own addresses that no blocked range covers (the DNS check needs them apart). */
  addresses: string[];
  /** Everything to drop beyond BLOCKED_CIDRS, both families, none inside another. */
  networks: Cidr[];
}

/**
 * The block set for one host network: own addresses; on-link subnets (each address's prefix, its
 * point-to-point peer's, every route without a gateway but a default one, every local, broadcast
 * or anycast route); every gateway; the pools; and for each IPv4 entry its NAT64 and 6to4 forms.
 * Entries a blocked range already covers are left out, and so is any entry another one covers.
 */
export function hostBlockSet(net: HostNetwork, opts: HostBlockOptions): HostBlockSet {
  const ours = (dev: string | undefined) =>
    dev !== undefined && opts.ignoreLinkPrefix !== "" && dev.startsWith(opts.ignoreLinkPrefix);
  const found: Net[] = [];
  const own: Net[] = [];
  const add = (n: Net | null) => {
    if (n) found.push(n);
  };
  for (const a of net.addresses) {
    const host = toNet(a.local, undefined, "host-address");
    if (host) own.push(host);
    // Its own address is blocked on every link (with its NAT64 and 6to4 forms, below); only the
    // subnets of sandbox links are left to the pools.
    add(host);
    if (ours(a.ifname)) continue;
    add(toNet(a.local, a.prefixlen, "on-link"));
    if (a.peer !== undefined) {
      add(toNet(a.peer, undefined, "peer"));
      add(toNet(a.peer, a.prefixlen, "on-link"));
    }
  }
  for (const r of net.routes) {
    if (ours(r.dev)) continue;
    for (const g of r.gateways) add(toNet(g, undefined, "gateway"));
    if (r.dst === "default") continue;
    const dst = toNet(r.dst, undefined, SELF_TYPES.has(r.type) ? "host-route" : "on-link");
    if (!dst || dst.prefix === 0) continue;
    if (SELF_TYPES.has(r.type) || (r.type === "unicast" && r.direct)) add(dst);
  }
  for (const g of net.nexthopGateways) add(toNet(g, undefined, "gateway"));
  for (const p of opts.pools) add(toNet(p, undefined, "sandbox-pool"));
  const v4 = found.filter((n) => n.family === 4);
  for (const c of v4)
    for (const e of embedV4Value(c.value, c.prefix))
      found.push({ family: 6, value: e.value, prefix: e.prefix, name: `${e.kind}:${c.name}` });
  const blocked = (n: Net) => BLOCKED_NETS.some((b) => covers(b, n));
  const open = found.filter((n) => !blocked(n));
  // Widest first: an entry another one covers is left out.
  const kept: Net[] = [];
  for (const n of open.sort((x, y) => x.prefix - y.prefix))
    if (!kept.some((k) => covers(k, n))) kept.push(n);
  const addresses = own.filter((n) => !blocked(n)).map((n) => toCidr(n).network);
  return { addresses: [...new Set(addresses)], networks: kept.map(toCidr) };
}

/** Whether `addr` (a literal address) lies in one of `networks`. */
export function inNetworks(networks: readonly Cidr[], addr: string): boolean {
  const p = parseStrict(addr);
  return p !== null && networks.some((c) => cidrContains(c, p));
}
