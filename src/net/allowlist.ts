/**
 * The egress allowlist: which DNS names a sandbox with an allowlist may reach (through the egress
 * proxy, docs/decisions/0010-egress-allowlist.md). Pure: parsing an operator's list with an error
 * naming the bad entry, normalising a name as a client sent it (SNI, Host, a DNS question), and
 * matching.
 *
 *   example.com     that name only
 *   *.example.com   every name under example.com, at any depth (a.example.com, a.b.example.com),
 *                   but not example.com itself: list both to allow both
 *
 * Names are compared as lower-case A-labels (what clients put on the wire: IDNs as xn--…), with
 * one trailing dot dropped. IP literals are never names: they cannot be listed, and a client that
 * names one (no SNI, `Host: 1.2.3.4`) is refused.
 */
import { parseAddress } from "./parse-address.js";

export interface DomainAllowlist {
  /** The entries as normalised, in the operator's order, duplicates removed (for docs, logs). */
  readonly entries: readonly string[];
  /** Exact names. */
  readonly exact: ReadonlySet<string>;
  /** For each `*.x` entry: ".x" (a name matches when it ends with one and is longer). */
  readonly suffixes: readonly string[];
}

/** At most this many entries (a list is sent to the proxy with each sandbox). */
export const MAX_ALLOWLIST_ENTRIES = 256;
const MAX_NAME = 253;
const LABEL = /^(?!-)[a-z0-9_-]{1,63}(?<!-)$/;

export class AllowlistError extends TypeError {
  constructor(
    readonly entry: string,
    message: string,
  ) {
    super(message);
    this.name = "AllowlistError";
  }
}

/** Whether `s` is an IP literal in any form a resolver or a socket API would accept. */
function isIpLiteral(s: string): boolean {
  return parseAddress(s) !== null || s.includes(":") || /^\[.*\]$/.test(s);
}

/**
 * A host name as a client sent it, normalised (lower case, one trailing dot dropped), or null when
 * it is not a DNS host name: empty, too long, a bad label, non-ASCII, or an IP literal (including
 * inet_aton shorthands such as `2130706433` or `0x7f.1`, which resolvers take as addresses).
 */
export function normaliseHostname(raw: string): string | null {
  let name = raw.toLowerCase();
  if (name.endsWith(".")) name = name.slice(0, -1);
  if (name.length === 0 || name.length > MAX_NAME) return null;
  if (isIpLiteral(name)) return null;
  const labels = name.split(".");
  if (!labels.every((l) => LABEL.test(l))) return null;
  // A name whose last label is all digits is an address to getaddrinfo, never a DNS name.
  if (/^[0-9]+$/.test(labels[labels.length - 1] ?? "")) return null;
  return name;
}

/** One operator entry, normalised; throws AllowlistError saying what is wrong with it. */
export function parseAllowlistEntry(raw: string): string {
  const entry = raw.trim();
  const bad = (why: string) =>
    new AllowlistError(raw, `egress allowlist entry ${JSON.stringify(raw)}: ${why}`);
  if (entry === "") throw bad("empty");
  if (entry === "*" || entry === "*.")
    throw bad('"*" would allow every name; leave the allowlist unset for unrestricted egress');
  const wildcard = entry.startsWith("*.");
  const rest = wildcard ? entry.slice(2) : entry;
  if (rest.includes("*"))
    throw bad('a wildcard is only "*." at the start of an entry ("*.example.com")');
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(rest) || rest.includes("/") || /^[^:]+:[0-9]*$/.test(rest))
    throw bad("a domain name, not a URL (no scheme, path or port)");
  if (isIpLiteral(rest.replace(/\.$/, "")) || /^[0-9.]+$/.test(rest))
    throw bad("IP addresses cannot be allowed, only domain names (the proxy routes by name)");
  const name = normaliseHostname(rest);
  if (name === null)
    throw bad(
      "not a domain name (labels of letters, digits, '-' or '_', 1-63 characters, 253 in all; internationalised names as xn--)",
    );
  if (!wildcard && !name.includes("."))
    throw bad(
      'not a fully qualified domain name (one label); give the whole name, e.g. "pypi.org"',
    );
  if (wildcard && !name.includes("."))
    throw bad(`"*.${name}" would allow a whole top-level domain; list the domains you mean`);
  return wildcard ? `*.${name}` : name;
}

/**
 * The operator's list: entries separated by commas or whitespace. Throws AllowlistError naming the
 * first bad entry; an empty list is an error too (unset it for unrestricted egress).
 */
export function parseAllowlist(spec: string | readonly string[]): DomainAllowlist {
  const raw = typeof spec === "string" ? spec.split(/[\s,]+/).filter((s) => s !== "") : spec;
  if (raw.length === 0)
    throw new AllowlistError(
      "",
      "the egress allowlist names no domain (unset it to allow every public destination)",
    );
  const entries = [...new Set(raw.map(parseAllowlistEntry))];
  if (entries.length > MAX_ALLOWLIST_ENTRIES)
    throw new AllowlistError(
      entries[MAX_ALLOWLIST_ENTRIES] ?? "",
      `the egress allowlist has ${entries.length} entries; at most ${MAX_ALLOWLIST_ENTRIES}`,
    );
  return allowlistOf(entries);
}

/** An allowlist from entries parseAllowlistEntry already normalised (e.g. sent to the proxy). */
export function allowlistOf(entries: readonly string[]): DomainAllowlist {
  const exact = new Set<string>();
  const suffixes: string[] = [];
  for (const e of entries) {
    if (e.startsWith("*.")) suffixes.push(e.slice(1));
    else exact.add(e);
  }
  return { entries: [...entries], exact, suffixes };
}

/** Whether a normalised name (normaliseHostname) is allowed. */
export function isAllowed(list: DomainAllowlist, name: string): boolean {
  if (list.exact.has(name)) return true;
  return list.suffixes.some((s) => name.length > s.length && name.endsWith(s));
}

/**
 * The names both lists allow, as a list (a key's allowlist on a server that has one: a key can
 * only take network away). Exact names stay when the other list allows them; `*.x` stays when the
 * other has `*.x` or a wider `*.y` (x under y). Any name both allow is matched by one of those,
 * and each kept entry is inside both (test/net/allowlist.unit.test.ts, a property).
 */
export function intersectAllowlists(a: DomainAllowlist, b: DomainAllowlist): DomainAllowlist {
  const kept = new Set<string>();
  const within = (suffix: string, wider: readonly string[]) =>
    wider.some((w) => suffix === w || suffix.endsWith(w));
  for (const [one, other] of [
    [a, b],
    [b, a],
  ] as const) {
    for (const name of one.exact) if (isAllowed(other, name)) kept.add(name);
    for (const s of one.suffixes) if (within(s, other.suffixes)) kept.add(`*${s}`);
  }
  return allowlistOf([...kept]);
}
