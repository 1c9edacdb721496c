/**
 * Address parsing the way a sandboxed program's libc parses it, so that classification sees the
 * address the packet will really carry: `2130706433`, `0x7f.1`, `017700000001` and `127.1` are all
 * 127.0.0.1 to inet_aton(3); `[::ffff:7f00:1%eth0]` is an IPv6 address with a zone.
 *
 * Pure; no I/O. The packet filter is the enforcement, this is what the ruleset and tests reason with.
 */

export interface ParsedAddress {
  family: 4 | 6;
  /** 32-bit value for IPv4, 128-bit value for IPv6. */
  value: bigint;
}

const V4_MAX = (1n << 32n) - 1n;

/** One inet_aton part: 0x-prefixed hex, 0-prefixed octal, or decimal. */
function parseAtonPart(part: string): bigint | null {
  if (/^0x[0-9a-f]+$/i.test(part)) return BigInt(part);
  if (/^0[0-7]*$/.test(part)) return part.length === 1 ? 0n : BigInt(`0o${part.slice(1)}`);
  if (/^[1-9][0-9]*$/.test(part)) return BigInt(part);
  return null;
}

/**
 * inet_aton(3) semantics: 1 to 4 parts; every part but the last is one byte, the last fills the
 * remaining bytes. glibc stops at the first whitespace, so "127.0.0.1 x" is 127.0.0.1 too.
 */
export function parseIpv4Loose(input: string): bigint | null {
  const text = input.split(/[\s]/, 1)[0] ?? "";
  if (text.length === 0 || text.length > 64) return null;
  const parts = text.split(".");
  if (parts.length > 4) return null;
  const nums: bigint[] = [];
  for (const part of parts) {
    const n = parseAtonPart(part);
    if (n === null) return null;
    nums.push(n);
  }
  let value = 0n;
  for (let i = 0; i < nums.length - 1; i++) {
    const n = nums[i] as bigint;
    if (n > 255n) return null;
    value |= n << BigInt(8 * (3 - i));
  }
  const last = nums[nums.length - 1] as bigint;
  const lastBits = BigInt(8 * (4 - (nums.length - 1)));
  if (last >= 1n << lastBits) return null;
  value |= last;
  return value <= V4_MAX ? value : null;
}

/** Strict dotted quad (what may appear embedded in an IPv6 address). */
function parseIpv4Strict(text: string): bigint | null {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(text);
  if (!m) return null;
  let value = 0n;
  for (let i = 1; i <= 4; i++) {
    const n = Number(m[i]);
    if (n > 255) return null;
    value = (value << 8n) | BigInt(n);
  }
  return value;
}

function parseGroups(text: string): bigint[] | null {
  if (text === "") return [];
  const out: bigint[] = [];
  const parts = text.split(":");
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i] as string;
    if (i === parts.length - 1 && part.includes(".")) {
      const v4 = parseIpv4Strict(part);
      if (v4 === null) return null;
      out.push(v4 >> 16n, v4 & 0xffffn);
    } else if (/^[0-9a-f]{1,4}$/i.test(part)) {
      out.push(BigInt(`0x${part}`));
    } else {
      return null;
    }
  }
  return out;
}

/** RFC 4291 text forms, with optional brackets and zone id (`%eth0`), case-insensitive. */
export function parseIpv6(input: string): bigint | null {
  let text = input.trim();
  if (text.startsWith("[") && text.endsWith("]")) text = text.slice(1, -1);
  const zone = text.indexOf("%");
  if (zone !== -1) text = text.slice(0, zone);
  if (text.length === 0 || text.length > 45 || !text.includes(":")) return null;
  const halves = text.split("::");
  if (halves.length > 2) return null;
  let groups: bigint[];
  if (halves.length === 2) {
    const head = parseGroups(halves[0] as string);
    const tail = parseGroups(halves[1] as string);
    if (head === null || tail === null || head.length + tail.length > 7) return null;
    groups = [...head, ...new Array<bigint>(8 - head.length - tail.length).fill(0n), ...tail];
  } else {
    const all = parseGroups(text);
    if (all === null || all.length !== 8) return null;
    groups = all;
  }
  return groups.reduce((acc, g) => (acc << 16n) | g, 0n);
}

/** Parses an address as a program would name it; null when neither family accepts it. */
export function parseAddress(input: string): ParsedAddress | null {
  if (typeof input !== "string") return null;
  if (input.includes(":")) {
    const v6 = parseIpv6(input);
    return v6 === null ? null : { family: 6, value: v6 };
  }
  const v4 = parseIpv4Loose(input.trim());
  return v4 === null ? null : { family: 4, value: v4 };
}

export function formatIpv4(value: bigint): string {
  return [24n, 16n, 8n, 0n].map((s) => String((value >> s) & 0xffn)).join(".");
}

/** RFC 5952 canonical text: lowercase, longest run (>= 2) of zero groups compressed. */
export function formatIpv6(value: bigint): string {
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((value >> BigInt(16 * i)) & 0xffffn));
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestLen < 2) return hex.join(":");
  const head = hex.slice(0, bestStart).join(":");
  const tail = hex.slice(bestStart + bestLen).join(":");
  return `${head}::${tail}`;
}
