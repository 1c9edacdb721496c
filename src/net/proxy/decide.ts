/**
 * The egress proxy's decisions, pure: what a connection's first bytes or a DNS question ask for,
 * checked against a sandbox's allowlist; which resolved addresses may be dialled (the blocked
 * ranges and the host's neighbourhood removed, as for the sandbox itself); and the per-sandbox
 * record of refusals that ends up in the call's result.
 */
import { classifyAddress, cidrContains, parseStrict, type Cidr } from "../addresses.js";
import { isAllowed, normaliseHostname, type DomainAllowlist } from "../allowlist.js";
import type { HelloPeek } from "./client-hello.js";
import type { HeadPeek } from "./http-head.js";
import type { Refusal, RefusalReason } from "./reasons.js";

export { REFUSAL_REASONS, type Refusal, type RefusalReason } from "./reasons.js";

export type Decision =
  { allow: true; name: string } | { allow: false; reason: RefusalReason; host: string | null };

/** Report text for a name the sandbox sent: printable ASCII, at most 100 characters. */
export function reportName(raw: string): string {
  const clean = raw.replace(
    /[^\x21-\x7e]/g,
    (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`,
  );
  return clean.length > 100 ? `${clean.slice(0, 100)}…` : clean;
}

/** A name as sent (SNI, Host, question), checked against the allowlist. */
export function decideName(raw: string, allow: DomainAllowlist): Decision {
  const name = normaliseHostname(raw);
  if (name === null) {
    const bare = raw.replace(/^\[|\]$/g, "").replace(/\.$/, "");
    const isIp = parseStrict(bare) !== null || classifyAddress(bare).valid;
    return { allow: false, reason: isIp ? "ip_address" : "bad_name", host: reportName(raw) };
  }
  return isAllowed(allow, name)
    ? { allow: true, name }
    : { allow: false, reason: "not_allowed", host: name };
}

/** A TLS connection's hello (peekClientHello's verdict), checked. */
export function decideTls(
  peek: Exclude<HelloPeek, { kind: "more" }>,
  allow: DomainAllowlist,
): Decision {
  if (peek.kind === "refuse") return { allow: false, reason: "protocol", host: null };
  if (peek.serverName === null) return { allow: false, reason: "no_name", host: null };
  const d = decideName(peek.serverName, allow);
  // ECH: the name read is the outer (public) one; the server behind it is hidden. Refused, named.
  if (peek.ech) return { allow: false, reason: "ech", host: d.allow ? d.name : d.host };
  return d;
}

/** A plain-HTTP connection's request head (peekHttpHead's verdict), checked. */
export function decideHttp(
  peek: Exclude<HeadPeek, { kind: "more" }>,
  allow: DomainAllowlist,
): Decision {
  if (peek.kind === "refuse") {
    const reason =
      peek.reason === "no_name" || peek.reason === "host_mismatch" ? peek.reason : "protocol";
    return { allow: false, reason, host: peek.host === undefined ? null : reportName(peek.host) };
  }
  return decideName(peek.host, allow);
}

/** The host's neighbourhood the proxy must not dial (host-block.ts), as the sandbox's tables hold it. */
export interface HostBlock {
  addresses: readonly string[];
  networks: readonly Cidr[];
}

/** Whether the proxy may dial `addr` for a sandbox: public, and not the host or its network. */
export function dialable(addr: string, host: HostBlock): boolean {
  const c = classifyAddress(addr);
  if (!c.valid || c.blocked) return false;
  if (host.addresses.includes(c.address)) return false;
  const p = parseStrict(c.address);
  return p !== null && !host.networks.some((n) => cidrContains(n, p));
}

/** Distinct refusals kept per sandbox; further ones are only counted (`dropped`). */
export const MAX_REFUSALS = 32;

/** One sandbox's refusals, merged by (host, port, reason), bounded. */
export class RefusalLog {
  private readonly byKey = new Map<string, Refusal>();
  /** Refusals not kept as entries once MAX_REFUSALS distinct ones were. */
  dropped = 0;

  add(host: string | null, port: number, reason: RefusalReason): void {
    const key = `${host ?? ""}\0${port}\0${reason}`;
    const r = this.byKey.get(key);
    if (r) r.count += 1;
    else if (this.byKey.size < MAX_REFUSALS) this.byKey.set(key, { host, port, reason, count: 1 });
    else this.dropped += 1;
  }

  entries(): Refusal[] {
    return [...this.byKey.values()].map((r) => ({ ...r }));
  }
}
