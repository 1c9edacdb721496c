/**
 * A model of the nftables subset renderEgressRuleset emits: parses the script back into chains
 * and sets and evaluates a packet against a chain in order (first verdict wins), so properties
 * can be checked on the exact text the kernel gets. Unknown syntax throws: if the renderer grows
 * a construct the model does not understand, the tests fail instead of passing vacuously.
 */
import { parseAddress } from "../../src/net/parse-address.js";
import { parseCidr, cidrContains, type Cidr } from "../../src/net/addresses.js";

export interface Packet {
  family: 4 | 6;
  src: string;
  dst: string;
  proto: "tcp" | "udp" | "icmp";
  dport: number;
  icmpv6Type?: "nd-neighbor-solicit" | "nd-neighbor-advert" | "echo-request";
  hoplimit: number;
  ct: "new" | "established";
  /** The interface it came in on (iifname rules); default: the sandbox's link. */
  iif?: string;
  /** The interface it leaves by (oifname rules); default: the uplink's ("$uplink"). */
  oif?: string;
  /** The local socket's uid (meta skuid; output chains). */
  uid?: number;
  /** conntrack says the connection was destination-NATed (redirected). */
  dnat?: boolean;
}

/** What a rule or chain decided: a filter verdict, a redirect to a port, a jump. */
export type Verdict =
  "accept" | "drop" | "reject" | "return" | `redirect:${number}` | `jump:${string}`;

export interface Model {
  sets: Map<string, Cidr[]>;
  chains: Map<string, string[]>;
}

export function parseScript(script: string): Model {
  const sets = new Map<string, Cidr[]>();
  const chains = new Map<string, string[]>();
  let chain: string | null = null;
  let set: string | null = null;
  for (const raw of script.split("\n")) {
    const line = raw.trim();
    let m: RegExpExecArray | null;
    if ((m = /^chain (\S+) \{$/.exec(line))) {
      chain = m[1] as string;
      chains.set(chain, []);
    } else if ((m = /^set (\S+) \{$/.exec(line))) {
      set = m[1] as string;
      sets.set(set, []); // a set without elements is empty, not unknown
    } else if (line === "}") {
      chain = null;
      set = null;
    } else if (set && (m = /^elements = \{ (.*) \}$/.exec(line))) {
      sets.set(
        set,
        (m[1] as string).split(", ").map((t) => parseCidr(t) as Cidr),
      );
    } else if (chain && line !== "" && !line.startsWith("type ")) {
      chains.get(chain)?.push(line);
    }
  }
  return { sets, chains };
}

function addrMatch(model: Model, spec: string, addr: string, family: 4 | 6): boolean {
  const a = parseAddress(addr);
  if (!a || a.family !== family) return false;
  let cidrs: Cidr[];
  if (spec.startsWith("@")) {
    const s = model.sets.get(spec.slice(1));
    if (!s) throw new Error(`unknown set ${spec}`);
    cidrs = s;
  } else {
    const items = spec.startsWith("{")
      ? spec
          .slice(1, -1)
          .split(",")
          .map((x) => x.trim())
      : [spec];
    cidrs = items.map(
      (t) => parseCidr(t.includes("/") ? t : `${t}/${t.includes(":") ? 128 : 32}`) as Cidr,
    );
  }
  if (cidrs.some((c) => c === null)) throw new Error(`bad address spec ${spec}`);
  return cidrs.some((c) => cidrContains(c, a));
}

const TOKEN =
  /^(meta nfproto (ipv4|ipv6)|(ip6?) (saddr|daddr) (!= )?(@\S+|\{[^}]*\}|[0-9a-f.:/]+)|(tcp|udp|th) dport (\d+|\{[^}]*\})|icmpv6 type \{([^}]*)\}|ip6 hoplimit (\d+)|ct state (\S+)|meta l4proto (\w+|\{[^}]*\})|ct status dnat|iifname (!= )?"([^"]+)"|meta skuid (\d+)|counter name "[a-z_]+"|counter|accept|drop|return|reject( with (tcp reset|icmpx admin-prohibited))?|redirect to :(\d+)|jump (\S+)|oifname (!= )?"([^"]+)")( |$)/;

const list = (spec: string): string[] =>
  spec.startsWith("{")
    ? spec
        .slice(1, -1)
        .split(",")
        .map((x) => x.trim())
    : [spec];

/** Evaluates one rule: its verdict when it matches, null when it does not. */
export function evalRule(model: Model, rule: string, p: Packet): Verdict | null {
  let rest = rule;
  while (rest.length > 0) {
    const m = TOKEN.exec(rest);
    if (!m) throw new Error(`model does not understand: ${rest}`);
    rest = rest.slice(m[0].length);
    const tok = m[1] as string;
    if (tok === "accept" || tok === "drop" || tok === "return") return tok;
    if (tok.startsWith("reject")) {
      // "with tcp reset" is only valid for TCP: nft would refuse the rule otherwise.
      if (m[17] === "tcp reset" && p.proto !== "tcp") throw new Error(`tcp reset on ${p.proto}`);
      return "reject";
    }
    if (m[18]) return `redirect:${Number(m[18])}`;
    if (m[19]) return `jump:${m[19]}`;
    if (tok.startsWith("counter")) continue;
    if (m[12]) {
      if (!list(m[12]).includes(p.proto)) return null;
      continue;
    }
    if (tok === "ct status dnat") {
      if (!p.dnat) return null;
      continue;
    }
    if (m[14]) {
      const pattern = m[14];
      const iif = p.iif ?? "$sandbox";
      const hit = pattern.endsWith("*") ? iif.startsWith(pattern.slice(0, -1)) : iif === pattern;
      if (hit === Boolean(m[13])) return null;
      continue;
    }
    if (m[15]) {
      if (p.uid !== Number(m[15])) return null;
      continue;
    }
    if (m[21]) {
      const pattern = m[21];
      const oif = p.oif ?? "$uplink";
      const hit = pattern.endsWith("*") ? oif.startsWith(pattern.slice(0, -1)) : oif === pattern;
      if (hit === Boolean(m[20])) return null;
      continue;
    }
    if (m[2]) {
      if ((m[2] === "ipv4" ? 4 : 6) !== p.family) return null;
    } else if (m[3]) {
      const fam = m[3] === "ip" ? 4 : 6;
      if (fam !== p.family) return null;
      const hit = addrMatch(model, m[6] as string, m[4] === "saddr" ? p.src : p.dst, fam);
      if (hit === Boolean(m[5])) return null;
    } else if (m[7]) {
      if (m[7] === "th" ? p.proto === "icmp" : p.proto !== m[7]) return null;
      if (
        !list(m[8] as string)
          .map(Number)
          .includes(p.dport)
      )
        return null;
    } else if (m[9] !== undefined) {
      const types = m[9].split(",").map((x) => x.trim());
      if (p.family !== 6 || p.proto !== "icmp" || !p.icmpv6Type || !types.includes(p.icmpv6Type))
        return null;
    } else if (m[10]) {
      if (p.family !== 6 || p.hoplimit !== Number(m[10])) return null;
    } else if (m[11]) {
      const states = m[11].split(",");
      if (!states.includes(p.ct)) return null;
    }
  }
  throw new Error(`rule without verdict: ${rule}`);
}

/**
 * Runs a chain in order; the first verdict wins ("return" when nothing matched or a rule said
 * so). A jump runs the other chain; its verdict wins unless it returns.
 */
export function evalChain(
  model: Model,
  chain: string,
  p: Packet,
): { verdict: Exclude<Verdict, `jump:${string}`>; rule: string | null } {
  const rules = model.chains.get(chain);
  if (!rules) throw new Error(`no chain ${chain}`);
  for (const rule of rules) {
    const v = evalRule(model, rule, p);
    if (v === null) continue;
    if (v.startsWith("jump:")) {
      const sub = evalChain(model, v.slice(5), p);
      if (sub.verdict !== "return") return sub;
      continue;
    }
    return { verdict: v as Exclude<Verdict, `jump:${string}`>, rule };
  }
  return { verdict: "return", rule: null };
}
