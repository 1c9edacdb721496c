/**
 * Policy -> nftables ruleset, pure. One `nft -f` script per sandbox, loaded in the uplink network
 * namespace (the host's root namespace in production), creating two tables named for the sandbox:
 *
 *  - `netdev <table>`: ingress hook on the sandbox's host-side link, before any routing. Only IPv4
 *    from the sandbox's own address, IPv6 from its own address (plus neighbour discovery) and ARP
 *    for its own address pass; every other frame (spoofed source, non-IP, VLAN) is dropped.
 *  - `inet <table>`: forward hook: from the sandbox, every blocked destination, every host
 *    address and the host's neighbourhood (on-link subnets, gateways: sets host4/host6, refilled
 *    live by renderHostSetUpdate) is dropped for every protocol, the rest accepted (masqueraded
 *    out); to the sandbox,
 *    only replies. Input hook: nothing from the sandbox reaches the host itself (except neighbour
 *    discovery). Every rule block ends in a counted catch-all drop.
 *
 * What a server loads is the same rules in shared tables (renderSharedTables, renderSandboxRules,
 * decision 0019): one table per family per uplink holding the blocked and host sets once, and
 * each sandbox's chains and counters in it under names of its own (`<table>.<name>`). Every `nft`
 * run fetches every table's sets first, so a table pair per sandbox, each with its own copies of
 * the interval sets, made each load and removal cost ~0.8 ms more per sandbox present. Adding and
 * removing a sandbox's chains is still one atomic transaction each, and one sandbox's rules can
 * never shadow another's. Base chains use policy accept and match only their own link, because
 * an accept in one base chain does not stop another chain on the same hook from dropping:
 * sandboxes compose, the host's own firewall still applies. renderEgressRuleset renders the same
 * rules as a sandbox's own two tables (what the model tests read, and `nft -c` checks).
 */
import { classifyAddress, cidrText, type Cidr } from "./addresses.js";
import { inNetworks } from "./host-block.js";
import { canonical, setBlock } from "./nft-text.js";
import {
  COUNTER_REFUSED,
  proxyDnatRules,
  proxyInputRules,
  proxyRefuseRules,
  type ProxyPorts,
} from "./nftables-proxy.js";

export interface EgressPolicy {
  /** nft table name (both families), unique per sandbox, e.g. "sr-abc123". */
  table: string;
  /** The sandbox's link as seen in the uplink namespace (host end of the veth). */
  hostIfname: string;
  /** The only IPv4 source the sandbox may use. */
  sandboxV4: string;
  /** Host end of the link: the sandbox's gateway (ARP is allowed for it only). */
  gatewayV4: string;
  /** The only global IPv6 source the sandbox may use; null: no IPv6 leaves the sandbox at all. */
  sandboxV6: string | null;
  /** Addresses of the host itself, dropped in forward too (input is dropped wholesale anyway). */
  hostAddresses: readonly string[];
  /**
   * The host's neighbourhood beyond the blocked ranges: on-link subnets, gateways, sandbox pools
   * (host-block.ts). With hostAddresses it fills the sets host4/host6, which renderHostSetUpdate
   * refills in a running sandbox's table when the host's addresses or routes change.
   */
  hostNetworks?: readonly Cidr[];
  /** DNS resolvers the sandbox is given. One inside a blocked range gets a port-53-only exception. */
  dnsResolvers: readonly string[];
  /** Blocked destination ranges; normally BLOCKED_CIDRS. */
  blocked: readonly Cidr[];
  /**
   * Egress through the allowlist proxy (nftables-proxy.ts): DNS and TCP 80/443 go to these ports
   * of the proxy, everything else is refused. Absent: every public destination is accepted.
   */
  proxy?: ProxyPorts;
  /**
   * This network's conntrack mark (a random 32-bit value per network, never 0): every connection
   * the sandbox opens is marked with it, and replies pass to the sandbox only on a connection
   * carrying it. A connection a previous network of the same slot (the same addresses) left in
   * the uplink's conntrack table is not this network's: its replies are dropped. Absent: any
   * established connection's replies pass (the renderer's tests that predate it).
   */
  connMark?: number;
}

/** Names of the named counters the ruleset creates (sum with parseCounters). */
export const COUNTER_BLOCKED = "blocked";
export const COUNTER_LINK = "link_dropped";
/**
 * Packets from the sandbox this filter accepted for forwarding, and of those the ones every other
 * forward chain let through too (counted by a chain after all of them): the difference is what
 * the host's own firewall dropped (Docker's FORWARD policy, ufw, firewalld), which a call's
 * result reports.
 */
export const COUNTER_FORWARDED = "forwarded";
export const COUNTER_PASSED = "passed";
/** After every filter and security chain (0, 50, SELinux's 225), before conntrack's confirm. */
const LATE_PRIORITY = 1000;

const IFNAME = /^[A-Za-z0-9_.-]{1,15}$/;
const TABLE = /^[A-Za-z][A-Za-z0-9_-]{0,62}$/;
const PREFIX = /^[a-z][a-z0-9-]{0,8}$/;
/** A shared table's name (sharedTableName): the prefix, then a dot no sandbox's name has. */
const SHARED = /^[a-z][a-z0-9-]{0,8}\.rules$/;

/** The host set's elements of one family: own addresses and networks, as CIDR text. */
function hostElements(addresses: readonly string[], networks: readonly Cidr[], family: 4 | 6) {
  const own = addresses.map((a) => `${a}/${family === 4 ? 32 : 128}`);
  const nets = networks.filter((c) => c.family === family).map(cidrText);
  return [...new Set([...own, ...nets])];
}

/**
 * Script that refills a running sandbox's host sets (one table, atomically): what the host's
 * neighbourhood is now, after an address or route change. Same inputs as the ruleset's.
 */
export function renderHostSetUpdate(
  table: string,
  hostAddresses: readonly string[],
  hostNetworks: readonly Cidr[],
): string {
  if (!TABLE.test(table) && !SHARED.test(table)) throw new TypeError(`bad table name: ${table}`);
  const host = hostAddresses.map((a) => canonical(a, null, "hostAddresses"));
  const lines: string[] = [];
  for (const [family, set] of [
    [4, "host4"],
    [6, "host6"],
  ] as const) {
    const own = host.filter((a) => a.includes(":") === (family === 6));
    const elements = hostElements(own, hostNetworks, family);
    lines.push(`flush set inet ${table} ${set}`);
    if (elements.length > 0)
      lines.push(`add element inet ${table} ${set} { ${elements.join(", ")} }`);
  }
  return lines.join("\n") + "\n";
}

/** One sandbox's rules, by chain: each chain's rules (a base chain's first line its hook). */
interface EgressPieces {
  netdevCounters: string[];
  netdevChains: Array<[string, string[]]>;
  inetCounters: string[];
  inetChains: Array<[string, string[]]>;
  blocked4: string[];
  blocked6: string[];
  host4: string[];
  host6: string[];
}

/**
 * One sandbox's rules, validated, with every chain and counter name it refers to passed through
 * `nm` (its own table: the names as they are; the shared table: `<table>.<name>`).
 */
function egressPieces(policy: EgressPolicy, nm: (name: string) => string): EgressPieces {
  if (!TABLE.test(policy.table)) throw new TypeError(`bad table name: ${policy.table}`);
  if (!IFNAME.test(policy.hostIfname)) throw new TypeError(`bad ifname: ${policy.hostIfname}`);
  const dev = policy.hostIfname;
  const s4 = canonical(policy.sandboxV4, 4, "sandboxV4");
  const gw4 = canonical(policy.gatewayV4, 4, "gatewayV4");
  const s6 = policy.sandboxV6 === null ? null : canonical(policy.sandboxV6, 6, "sandboxV6");
  const host = policy.hostAddresses.map((a) => canonical(a, null, "hostAddresses"));
  const host4 = host.filter((a) => !a.includes(":"));
  const host6 = host.filter((a) => a.includes(":"));
  const networks = policy.hostNetworks ?? [];
  const resolvers = policy.dnsResolvers.map((a) => canonical(a, null, "dnsResolvers"));
  for (const r of resolvers) {
    const c = classifyAddress(r);
    if (c.valid && (c.range === "loopback" || c.range === "unspecified" || host.includes(r))) {
      throw new TypeError(`dnsResolvers: ${r} is the host or loopback; the sandbox cannot use it`);
    }
  }
  const blocked4 = policy.blocked.filter((c) => c.family === 4).map(cidrText);
  const blocked6 = policy.blocked.filter((c) => c.family === 6).map(cidrText);
  if (blocked4.length === 0 || blocked6.length === 0) {
    throw new TypeError("blocked: both families need at least one range");
  }
  const mark = policy.connMark;
  if (mark !== undefined && (!Number.isInteger(mark) || mark < 1 || mark > 0xffffffff)) {
    throw new TypeError(`connMark: a 32-bit value other than 0: ${mark}`);
  }
  const markHex = mark === undefined ? null : `0x${mark.toString(16).padStart(8, "0")}`;

  const ingress: string[] = [
    `type filter hook ingress device "${dev}" priority -500; policy drop;`,
    `ether type arp arp htype 1 arp ptype ip arp hlen 6 arp plen 4 arp saddr ip ${s4} arp daddr ip ${gw4} accept`,
    `ether type ip ip saddr ${s4} accept`,
  ];
  const DROP = `counter name "${nm(COUNTER_BLOCKED)}" drop`;
  if (s6 !== null) {
    ingress.push(`ether type ip6 ip6 saddr ${s6} accept`);
    ingress.push(
      `ether type ip6 ip6 saddr { ::, fe80::/10 } icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } ip6 hoplimit 255 accept`,
    );
  }
  ingress.push(`counter name "${nm(COUNTER_LINK)}" drop`);

  const fromSandbox: string[] = [`meta nfproto ipv4 ip saddr != ${s4} ${DROP}`];
  fromSandbox.push(
    s6 === null ? `meta nfproto ipv6 ${DROP}` : `meta nfproto ipv6 ip6 saddr != ${s6} ${DROP}`,
  );
  // Proxied: every DNS query is redirected to the proxy, so no resolver needs an exception.
  for (const r of policy.proxy ? [] : resolvers) {
    // A public resolver needs no exception; one in a blocked range or on the host's link does.
    if (!classifyAddress(r).blocked && !inNetworks(networks, r)) continue;
    const ipf = r.includes(":") ? "ip6" : "ip";
    fromSandbox.push(`${ipf} daddr ${r} udp dport 53 accept`);
    fromSandbox.push(`${ipf} daddr ${r} tcp dport 53 accept`);
  }
  fromSandbox.push(`ip daddr @blocked4 ${DROP}`, `ip6 daddr @blocked6 ${DROP}`);
  fromSandbox.push(`ip daddr @host4 ${DROP}`, `ip6 daddr @host6 ${DROP}`);
  if (policy.proxy) fromSandbox.push(...proxyRefuseRules(nm(COUNTER_REFUSED)));
  else {
    const forwarded = `counter name "${nm(COUNTER_FORWARDED)}" accept`;
    fromSandbox.push(`ip saddr ${s4} ${forwarded}`);
    if (s6 !== null) fromSandbox.push(`ip6 saddr ${s6} ${forwarded}`);
  }
  fromSandbox.push(DROP);

  const toHost: string[] = [];
  if (s6 !== null) {
    toHost.push(`icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } ip6 hoplimit 255 accept`);
  }
  if (policy.proxy) toHost.push(...proxyInputRules(policy.proxy));
  toHost.push(DROP);

  const nat = [`type nat hook postrouting priority srcnat; policy accept;`];
  nat.push(`iifname "${dev}" oifname != "${dev}" ip saddr ${s4} masquerade`);
  if (s6 !== null) nat.push(`iifname "${dev}" oifname != "${dev}" ip6 saddr ${s6} masquerade`);

  const inetChains: Array<[string, string[]]> = [
    [
      "forward",
      [
        `type filter hook forward priority -10; policy accept;`,
        `iifname "${dev}" jump ${nm("from_sandbox")}`,
        `oifname "${dev}" jump ${nm("to_sandbox")}`,
      ],
    ],
    ["from_sandbox", fromSandbox],
    [
      "forward_late",
      [
        `type filter hook forward priority ${LATE_PRIORITY}; policy accept;`,
        `iifname "${dev}" counter name "${nm(COUNTER_PASSED)}" accept`,
      ],
    ],
    [
      "to_sandbox",
      [
        markHex
          ? `ct state established,related ct mark ${markHex} accept`
          : `ct state established,related accept`,
        DROP,
      ],
    ],
    [
      "input",
      [
        `type filter hook input priority -10; policy accept;`,
        `iifname "${dev}" jump ${nm("sandbox_to_host")}`,
      ],
    ],
    ["sandbox_to_host", toHost],
  ];
  // Proxied: DNS and TCP 80/443 (not to blocked or host destinations) go to the proxy.
  if (policy.proxy) {
    inetChains.push(
      [
        "prerouting",
        [
          `type nat hook prerouting priority dstnat; policy accept;`,
          `iifname "${dev}" jump ${nm("sandbox_dnat")}`,
        ],
      ],
      ["sandbox_dnat", proxyDnatRules(policy.proxy)],
    );
  }
  if (markHex) {
    inetChains.push(
      // Before routing, so forwarded and proxied (input) connections alike carry the mark.
      [
        "mark_new",
        [
          `type filter hook prerouting priority mangle; policy accept;`,
          // Every packet, not only a connection's first: a connection the previous network of
          // these addresses left, taken up again by this sandbox (same ports and peer), is
          // this sandbox's from its first packet on, and only then are replies to it let in.
          `iifname "${dev}" ct mark set ${markHex}`,
        ],
      ],
      // What the host itself (the egress proxy) sends back: only on this network's connections.
      [
        "output",
        [
          `type filter hook output priority -10; policy accept;`,
          `oifname "${dev}" ct state established,related ct mark != ${markHex} ${DROP}`,
        ],
      ],
    );
  }
  inetChains.push(["postrouting", nat]);
  return {
    netdevCounters: [COUNTER_LINK],
    netdevChains: [["ingress", ingress]],
    inetCounters: [
      COUNTER_BLOCKED,
      COUNTER_FORWARDED,
      COUNTER_PASSED,
      ...(policy.proxy ? [COUNTER_REFUSED] : []),
    ],
    inetChains,
    blocked4,
    blocked6,
    host4: hostElements(host4, networks, 4),
    host6: hostElements(host6, networks, 6),
  };
}

const ind = (rules: readonly string[]): string[] => rules.map((r) => `\t\t${r}`);
const counterBlock = (name: string): string[] => [`\tcounter ${name} {`, `\t}`];
const chainBlock = (name: string, rules: readonly string[]): string[] => [
  `\tchain ${name} {`,
  ...ind(rules),
  `\t}`,
];

/** Renders the complete `nft -f` script for one sandbox. Throws TypeError on malformed input. */
export function renderEgressRuleset(policy: EgressPolicy): string {
  const t = policy.table;
  const p = egressPieces(policy, (n) => n);
  const lines = [
    `# ScratchRun egress policy for ${t} (src/net/nftables.ts). Loaded atomically.`,
    `table netdev ${t}`,
    `delete table netdev ${t}`,
    `table inet ${t}`,
    `delete table inet ${t}`,
    `table netdev ${t} {`,
    ...p.netdevCounters.flatMap(counterBlock),
    ...p.netdevChains.flatMap(([n, r]) => chainBlock(n, r)),
    `}`,
    `table inet ${t} {`,
    ...p.inetCounters.flatMap(counterBlock),
    ...setBlock("blocked4", "ipv4_addr", p.blocked4),
    ...setBlock("blocked6", "ipv6_addr", p.blocked6),
    ...setBlock("host4", "ipv4_addr", p.host4),
    ...setBlock("host6", "ipv6_addr", p.host6),
    ...p.inetChains.flatMap(([n, r]) => chainBlock(n, r)),
    `}`,
  ];
  return lines.join("\n") + "\n";
}

/**
 * The shared tables of an uplink (decision 0019): one per family, named for the uplink's prefix
 * with a character no sandbox id has, so that no sandbox's name is ever theirs.
 */
export function sharedTableName(prefix: string): string {
  if (!PREFIX.test(prefix)) throw new TypeError(`bad prefix: ${prefix}`);
  return `${prefix}.rules`;
}

/**
 * Script that makes an uplink's shared tables afresh (whatever a previous server left of them is
 * removed in the same transaction): empty in netdev, the blocked and host sets in inet, which
 * every sandbox's chains in them use. Sandboxes' rules go in with renderSandboxRules.
 */
export function renderSharedTables(
  shared: string,
  hostAddresses: readonly string[],
  hostNetworks: readonly Cidr[],
  blocked: readonly Cidr[],
): string {
  if (!SHARED.test(shared)) throw new TypeError(`bad shared table name: ${shared}`);
  const host = hostAddresses.map((a) => canonical(a, null, "hostAddresses"));
  const blocked4 = blocked.filter((c) => c.family === 4).map(cidrText);
  const blocked6 = blocked.filter((c) => c.family === 6).map(cidrText);
  if (blocked4.length === 0 || blocked6.length === 0) {
    throw new TypeError("blocked: both families need at least one range");
  }
  const own = (family: 4 | 6) => host.filter((a) => a.includes(":") === (family === 6));
  return [
    `# ScratchRun's shared sandbox tables (src/net/nftables.ts). Loaded atomically.`,
    ...renderSharedTeardown(shared).trimEnd().split("\n"),
    `table netdev ${shared} {`,
    `}`,
    `table inet ${shared} {`,
    ...setBlock("blocked4", "ipv4_addr", blocked4),
    ...setBlock("blocked6", "ipv6_addr", blocked6),
    ...setBlock("host4", "ipv4_addr", hostElements(own(4), hostNetworks, 4)),
    ...setBlock("host6", "ipv6_addr", hostElements(own(6), hostNetworks, 6)),
    `}`,
    ``,
  ].join("\n");
}

/** Script that removes an uplink's shared tables, every sandbox's rules in them with them. */
export function renderSharedTeardown(shared: string): string {
  if (!SHARED.test(shared)) throw new TypeError(`bad shared table name: ${shared}`);
  return [
    `table netdev ${shared}`,
    `delete table netdev ${shared}`,
    `table inet ${shared}`,
    `delete table inet ${shared}`,
    ``,
  ].join("\n");
}

/** A sandbox's chains and counters in the shared tables: `<table>.<name>`. */
const inShared = (table: string) => (name: string) => `${table}.${name}`;

/**
 * Script that adds one sandbox's rules to the shared tables (made by renderSharedTables): the
 * same chains, rules and counters renderEgressRuleset gives it its own tables, each name
 * `<policy.table>.<name>`, using the shared sets. One transaction: all of it or nothing.
 */
export function renderSandboxRules(policy: EgressPolicy, shared: string): string {
  if (!SHARED.test(shared)) throw new TypeError(`bad shared table name: ${shared}`);
  const nm = inShared(policy.table);
  const p = egressPieces(policy, nm);
  return [
    `# ScratchRun egress policy for ${policy.table} (src/net/nftables.ts). Loaded atomically.`,
    `table netdev ${shared} {`,
    ...p.netdevCounters.flatMap((c) => counterBlock(nm(c))),
    ...p.netdevChains.flatMap(([n, r]) => chainBlock(nm(n), r)),
    `}`,
    `table inet ${shared} {`,
    ...p.inetCounters.flatMap((c) => counterBlock(nm(c))),
    ...p.inetChains.flatMap(([n, r]) => chainBlock(nm(n), r)),
    `}`,
    ``,
  ].join("\n");
}

/** A sandbox's objects in the shared tables, as renderSandboxRules made them (or a listing found). */
export interface SandboxObjects {
  netdevChains: readonly string[];
  netdevCounters: readonly string[];
  inetChains: readonly string[];
  inetCounters: readonly string[];
}

/** What renderSandboxRules adds for `policy`, by full name. */
export function sandboxObjects(policy: EgressPolicy): SandboxObjects {
  const nm = inShared(policy.table);
  const p = egressPieces(policy, nm);
  return {
    netdevChains: p.netdevChains.map(([n]) => nm(n)),
    netdevCounters: p.netdevCounters.map(nm),
    inetChains: p.inetChains.map(([n]) => nm(n)),
    inetCounters: p.inetCounters.map(nm),
  };
}

const OBJECT = /^[A-Za-z][A-Za-z0-9_-]{0,62}\.[a-z_]{1,20}$/;

/**
 * Script that removes one sandbox's chains and counters from the shared tables, in one
 * transaction: every chain emptied first (no jump to any is left), then the chains, then the
 * counters (no rule refers to them any more).
 */
export function renderSandboxRulesRemoval(shared: string, o: SandboxObjects): string {
  if (!SHARED.test(shared)) throw new TypeError(`bad shared table name: ${shared}`);
  const all = [...o.netdevChains, ...o.netdevCounters, ...o.inetChains, ...o.inetCounters];
  for (const n of all) if (!OBJECT.test(n)) throw new TypeError(`bad object name: ${n}`);
  const chains = [
    ...o.netdevChains.map((c) => `netdev ${shared} ${c}`),
    ...o.inetChains.map((c) => `inet ${shared} ${c}`),
  ];
  return [
    ...chains.map((c) => `flush chain ${c}`),
    ...chains.map((c) => `delete chain ${c}`),
    ...o.netdevCounters.map((c) => `delete counter netdev ${shared} ${c}`),
    ...o.inetCounters.map((c) => `delete counter inet ${shared} ${c}`),
    ``,
  ].join("\n");
}

/** Script that removes one sandbox's tables; safe when they are already gone. */
export function renderEgressTeardown(table: string): string {
  if (!TABLE.test(table)) throw new TypeError(`bad table name: ${table}`);
  return [
    `table netdev ${table}`,
    `delete table netdev ${table}`,
    `table inet ${table}`,
    `delete table inet ${table}`,
    ``,
  ].join("\n");
}

export interface EgressCounters {
  /** Packets dropped for destination (blocked range, host, inbound, catch-all). */
  blocked: number;
  /** Packets this filter accepted for forwarding (COUNTER_FORWARDED). */
  forwarded: number;
  /** Of those, the ones every later forward chain of the host let through (COUNTER_PASSED). */
  passed: number;
  /** Packets refused because the sandbox's egress goes through the allowlist proxy only. */
  refused: number;
  /** Frames dropped at the link: spoofed source, non-IP, stray neighbour traffic. */
  linkDropped: number;
}

/**
 * Reads the counters of `table` from `nft -j list table` or `list counters` output, each named
 * `names` + its name (a sandbox's in the shared table: `<its table>.`). Missing: zero.
 */
export function parseCounters(json: string, table: string, names = ""): EgressCounters {
  const out: EgressCounters = { blocked: 0, forwarded: 0, passed: 0, refused: 0, linkDropped: 0 };
  let doc: unknown;
  try {
    doc = JSON.parse(json);
  } catch {
    return out;
  }
  const items = (doc as { nftables?: unknown }).nftables;
  if (!Array.isArray(items)) return out;
  for (const item of items) {
    const c = (item as { counter?: Record<string, unknown> }).counter;
    if (!c || c.table !== table || typeof c.packets !== "number") continue;
    if (c.family === "inet" && c.name === names + COUNTER_BLOCKED) out.blocked += c.packets;
    if (c.family === "inet" && c.name === names + COUNTER_REFUSED) out.refused += c.packets;
    if (c.family === "inet" && c.name === names + COUNTER_FORWARDED) out.forwarded += c.packets;
    if (c.family === "inet" && c.name === names + COUNTER_PASSED) out.passed += c.packets;
    if (c.family === "netdev" && c.name === names + COUNTER_LINK) out.linkDropped += c.packets;
  }
  return out;
}
