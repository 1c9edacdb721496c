/**
 * IP forwarding as dockerd does it, the pure half: the rules and what is read back. A server that
 * turns `net.ipv4.ip_forward` on (src/net/forwarding.ts) first loads the **guard**, one table
 * whose forward chain drops every forwarded packet that neither comes from nor goes to a sandbox
 * link (`<prefix>h*`, one rule pair per server prefix), so the host routes nothing for anyone else
 * because of us; dockerd sets the iptables FORWARD policy to DROP for the same reason. On a host
 * whose firewall already drops forwarded traffic by policy (Docker's `ip filter FORWARD`), the
 * sandbox links are let through in `DOCKER-USER`, the chain Docker keeps for its users' rules.
 * Either way each sandbox's own table (nftables.ts) has filtered its packets at a lower priority
 * first: a drop there is final whatever a later chain accepts.
 */

/** The guard's table (family inet): not a sandbox table, whatever the servers' prefixes. */
export const GUARD_TABLE = "scratchrun_forward";
export const GUARD_COUNTER = "dropped";

/** A server's link prefix as uplink.ts validates it (letters, digits, '-'; 1-9 characters). */
const PREFIX = /^[a-z][a-z0-9-]{0,8}$/;

/** The interface name pattern of a prefix's sandbox links (`sr-` → `sr-h*`). */
export function linkPattern(prefix: string): string {
  if (!PREFIX.test(prefix)) throw new TypeError(`bad link prefix: ${prefix}`);
  return `${prefix}h*`;
}

/**
 * The guard for these prefixes, replacing any guard there was in one transaction: forwarded
 * packets in or out of a sandbox link pass this chain, every other one is counted and dropped.
 */
export function renderForwardGuard(prefixes: readonly string[]): string {
  if (prefixes.length === 0) throw new TypeError("the guard needs at least one prefix");
  const patterns = [...new Set(prefixes.map(linkPattern))].sort();
  return [
    `# ScratchRun's forwarding guard (src/net/forward-guard.ts): forwarding was off before it.`,
    `table inet ${GUARD_TABLE}`,
    `delete table inet ${GUARD_TABLE}`,
    `table inet ${GUARD_TABLE} {`,
    `\tcounter ${GUARD_COUNTER} {`,
    `\t}`,
    `\tchain forward {`,
    `\t\ttype filter hook forward priority filter; policy accept;`,
    ...patterns.flatMap((p) => [`\t\tiifname "${p}" accept`, `\t\toifname "${p}" accept`]),
    `\t\tcounter name "${GUARD_COUNTER}" drop`,
    `\t}`,
    `}`,
    ``,
  ].join("\n");
}

type NftItem = Record<string, unknown>;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null;

function items(json: string): NftItem[] {
  try {
    const doc = JSON.parse(json) as { nftables?: unknown };
    if (!Array.isArray(doc.nftables)) return [];
    return (doc.nftables as unknown[]).filter(isObject);
  } catch {
    return [];
  }
}

/** `meta iifname|oifname == "<pattern>"` followed by `accept`: a rule's pattern, else null. */
function acceptedLink(rule: Record<string, unknown>, key: "iifname" | "oifname"): string | null {
  const expr = rule.expr;
  if (!Array.isArray(expr) || expr.length !== 2) return null;
  const [m, verdict] = expr as unknown[];
  if (!isObject(m) || !isObject(verdict)) return null;
  const match = m.match as { op?: unknown; left?: { meta?: { key?: unknown } }; right?: unknown };
  if (!match || match.op !== "==" || match.left?.meta?.key !== key) return null;
  if (typeof match.right !== "string" || !("accept" in verdict)) return null;
  return match.right;
}

/**
 * The prefixes a guard lets through, from `nft -j list table inet scratchrun_forward`: those with
 * both rules of their pair. Empty for anything else (no guard, unreadable output).
 */
export function guardPrefixes(json: string): string[] {
  const ins = new Set<string>();
  const outs = new Set<string>();
  for (const item of items(json)) {
    const rule = item.rule;
    if (!isObject(rule) || rule.table !== GUARD_TABLE || rule.chain !== "forward") continue;
    const i = acceptedLink(rule, "iifname");
    const o = acceptedLink(rule, "oifname");
    if (i) ins.add(i);
    if (o) outs.add(o);
  }
  return [...ins]
    .filter((p) => outs.has(p) && p.endsWith("h*"))
    .map((p) => p.slice(0, -2))
    .filter((p) => PREFIX.test(p))
    .sort();
}

/** A base chain on the forward hook, as `nft -j list chains` gives it. */
export interface ForwardChain {
  family: string;
  table: string;
  name: string;
  policy: string;
}

/** Every base chain on the forward hook but the guard's and sandbox tables' (`ours`). */
export function forwardChains(json: string, ours: (table: string) => boolean): ForwardChain[] {
  const out: ForwardChain[] = [];
  for (const item of items(json)) {
    const c = item.chain;
    if (!isObject(c) || c.hook !== "forward") continue;
    const table = String(c.table);
    if (table === GUARD_TABLE || ours(table)) continue;
    out.push({
      family: String(c.family),
      table,
      name: String(c.name),
      policy: String(c.policy ?? "accept"),
    });
  }
  return out;
}

/**
 * Docker's place for its users' rules: `DOCKER-USER` of iptables' `filter` table, which Docker's
 * FORWARD chain jumps to first. Null when `chains` (`nft -j list chains`) has none for `family`.
 */
export function dockerUserChain(json: string, family: "ip" | "ip6"): string | null {
  for (const item of items(json)) {
    const c = item.chain;
    if (isObject(c) && c.family === family && c.table === "filter" && c.name === "DOCKER-USER")
      return "DOCKER-USER";
  }
  return null;
}

/**
 * The rules that let a prefix's sandbox links through Docker's FORWARD policy drop, inserted at
 * the head of DOCKER-USER; only those `present` lacks (`nft -j list chain <family> filter
 * DOCKER-USER`). Empty: nothing to do.
 */
export function renderDockerUserRules(
  family: "ip" | "ip6",
  prefix: string,
  present: string,
): string {
  const pattern = linkPattern(prefix);
  const have = { iifname: false, oifname: false };
  for (const item of items(present)) {
    const rule = item.rule;
    if (!isObject(rule) || rule.family !== family || rule.table !== "filter") continue;
    if (rule.chain !== "DOCKER-USER") continue;
    if (acceptedLink(rule, "iifname") === pattern) have.iifname = true;
    if (acceptedLink(rule, "oifname") === pattern) have.oifname = true;
  }
  const lines: string[] = [];
  for (const key of ["oifname", "iifname"] as const)
    if (!have[key])
      lines.push(`insert rule ${family} filter DOCKER-USER ${key} "${pattern}" accept`);
  return lines.length ? lines.join("\n") + "\n" : "";
}
