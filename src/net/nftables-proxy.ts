/**
 * The nftables side of the egress allowlist (docs/decisions/0010-egress-allowlist.md), pure:
 *
 *  - for a sandbox whose egress goes through the proxy, the rules renderEgressRuleset adds to its
 *    own table: a nat prerouting chain on its link sending every DNS query (UDP and TCP port 53,
 *    any destination) to the proxy's DNS port, then, for destinations outside the blocked ranges
 *    and the host's neighbourhood (those `return`, and the forward chain drops them as always),
 *    TCP 80 and 443 to the proxy's HTTP and TLS ports; an input exception for exactly those
 *    redirected connections; and in forward, a counted fast refusal (TCP reset, ICMP
 *    administratively prohibited) of everything else instead of the accept;
 *  - one server-wide table in the uplink namespace: the proxy's ports are reachable from sandbox
 *    links only, and the proxy's own uid may open connections to TCP 80/443 of dialable
 *    destinations and to its resolvers' port 53, nothing else (the blocked ranges and the host's
 *    neighbourhood are refused in the kernel, whatever the proxy decided).
 */
import { cidrText, classifyAddress, type Cidr } from "./addresses.js";
import { canonical, setBlock } from "./nft-text.js";

/** The proxy's listening ports in the uplink namespace (DNS: UDP and TCP). */
export interface ProxyPorts {
  http: number;
  tls: number;
  dns: number;
}

/** Name of the counter of packets refused because the sandbox's egress is allowlisted. */
export const COUNTER_REFUSED = "refused";

const TABLE = /^[A-Za-z][A-Za-z0-9_-]{0,62}$/;
const PREFIX = /^[a-z][a-z0-9-]{0,8}$/;

export function validatePorts(p: ProxyPorts): void {
  for (const [k, v] of Object.entries(p))
    if (!Number.isInteger(v) || v < 1 || v > 65535) throw new TypeError(`proxy port ${k}: ${v}`);
  if (new Set([p.http, p.tls, p.dns]).size !== 3) throw new TypeError("proxy ports must differ");
}

/** Rules of a proxied sandbox's nat prerouting chain `sandbox_dnat` (its link only). */
export function proxyDnatRules(ports: ProxyPorts): string[] {
  validatePorts(ports);
  return [
    // Every DNS query, to any server: the proxy answers (names on the allowlist only).
    `meta l4proto { tcp, udp } th dport 53 redirect to :${ports.dns}`,
    // Blocked and host destinations are not redirected: forward drops them, counted, as always.
    `ip daddr @blocked4 return`,
    `ip6 daddr @blocked6 return`,
    `ip daddr @host4 return`,
    `ip6 daddr @host6 return`,
    `tcp dport 80 redirect to :${ports.http}`,
    `tcp dport 443 redirect to :${ports.tls}`,
  ];
}

/** Input rules (before the drop) admitting the redirected connections to the proxy. */
export function proxyInputRules(ports: ProxyPorts): string[] {
  return [
    `ct status dnat tcp dport { ${ports.http}, ${ports.tls}, ${ports.dns} } accept`,
    `ct status dnat udp dport ${ports.dns} accept`,
  ];
}

/** Forward rules replacing the sandbox's accept: everything not redirected is refused, fast. */
export function proxyRefuseRules(counter = COUNTER_REFUSED): string[] {
  const count = `counter name "${counter}"`;
  return [
    `meta l4proto tcp ${count} reject with tcp reset`,
    `${count} reject with icmpx admin-prohibited`,
  ];
}

export interface ProxyTablePolicy {
  /** Table name (inet), e.g. "sr-egress": carries the uplink's prefix, so reaping finds it. */
  table: string;
  /** The uplink's prefix: sandbox links are `<prefix>h*`. */
  prefix: string;
  ports: ProxyPorts;
  /** The proxy's host uid: the only one these output rules restrict. */
  uid: number;
  /** Resolvers the proxy asks (port 53 allowed to them even in a blocked range or on the link). */
  resolvers: readonly string[];
  blocked: readonly Cidr[];
  hostAddresses: readonly string[];
  hostNetworks: readonly Cidr[];
}

/** The server-wide table guarding the proxy (loaded once the proxy listens; refilled like a sandbox's). */
export function renderProxyTable(p: ProxyTablePolicy): string {
  if (!TABLE.test(p.table)) throw new TypeError(`bad table name: ${p.table}`);
  if (!PREFIX.test(p.prefix)) throw new TypeError(`bad prefix: ${p.prefix}`);
  if (!Number.isInteger(p.uid) || p.uid <= 0) throw new TypeError(`bad proxy uid: ${p.uid}`);
  validatePorts(p.ports);
  const resolvers = p.resolvers.map((a) => canonical(a, null, "resolver"));
  const host = p.hostAddresses.map((a) => canonical(a, null, "host address"));
  for (const r of resolvers) {
    const c = classifyAddress(r);
    if (c.valid && (c.range === "loopback" || c.range === "unspecified" || host.includes(r)))
      throw new TypeError(`resolver ${r} is the host or loopback; the proxy cannot use it`);
  }
  const hostEl = (family: 4 | 6) => [
    ...new Set([
      ...host
        .filter((a) => a.includes(":") === (family === 6))
        .map((a) => `${a}/${family === 4 ? 32 : 128}`),
      ...p.hostNetworks.filter((c) => c.family === family).map(cidrText),
    ]),
  ];
  const ind = (rules: string[]) => rules.map((r) => `\t\t${r}`);
  const ports = `{ ${p.ports.http}, ${p.ports.tls}, ${p.ports.dns} }`;
  const reject = `counter name "${COUNTER_REFUSED}" reject`;
  const out: string[] = [`ct state established,related accept`];
  for (const r of resolvers) {
    const ipf = r.includes(":") ? "ip6" : "ip";
    out.push(`${ipf} daddr ${r} udp dport 53 accept`, `${ipf} daddr ${r} tcp dport 53 accept`);
  }
  out.push(
    `ip daddr @blocked4 ${reject}`,
    `ip6 daddr @blocked6 ${reject}`,
    `ip daddr @host4 ${reject}`,
    `ip6 daddr @host6 ${reject}`,
    `tcp dport { 80, 443 } accept`,
    reject,
  );
  const lines = [
    `# ScratchRun egress proxy guard (src/net/nftables-proxy.ts). Loaded atomically.`,
    `table inet ${p.table}`,
    `delete table inet ${p.table}`,
    `table inet ${p.table} {`,
    `\tcounter ${COUNTER_REFUSED} {`,
    `\t}`,
    ...setBlock("blocked4", "ipv4_addr", p.blocked.filter((c) => c.family === 4).map(cidrText)),
    ...setBlock("blocked6", "ipv6_addr", p.blocked.filter((c) => c.family === 6).map(cidrText)),
    ...setBlock("host4", "ipv4_addr", hostEl(4)),
    ...setBlock("host6", "ipv6_addr", hostEl(6)),
    `\tchain input {`,
    ...ind([
      `type filter hook input priority -10; policy accept;`,
      // Only sandbox links reach the proxy (their own tables admit redirected connections only).
      `iifname != "${p.prefix}h*" meta l4proto { tcp, udp } th dport ${ports} counter drop`,
    ]),
    `\t}`,
    `\tchain output {`,
    ...ind([
      `type filter hook output priority -10; policy accept;`,
      `meta skuid ${p.uid} jump proxy_out`,
    ]),
    `\t}`,
    `\tchain proxy_out {`,
    ...ind(out),
    `\t}`,
    `}`,
  ];
  return lines.join("\n") + "\n";
}

export function renderProxyTableTeardown(table: string): string {
  if (!TABLE.test(table)) throw new TypeError(`bad table name: ${table}`);
  return `table inet ${table}\ndelete table inet ${table}\n`;
}
