/**
 * Domain patterns of an API key's egress allowlist, checked when the key is created or updated
 * and again when its policy is read. The rules are the server's allowlist's
 * (src/net/allowlist.ts `parseAllowlistEntry`): `example.com` that name only, `*.example.com`
 * every name under it (not example.com itself: list both). Stored normalised. Pure.
 */
import { AllowlistError, MAX_ALLOWLIST_ENTRIES, parseAllowlistEntry } from "../net/allowlist.js";

/** At most this many entries per key (the egress proxy's bound). */
export const MAX_DOMAIN_PATTERNS = MAX_ALLOWLIST_ENTRIES;

export type PatternCheck = { ok: true; pattern: string } | { ok: false; error: string };

/** One pattern, normalised, or why it is not one. */
export function checkDomainPattern(raw: string): PatternCheck {
  try {
    return { ok: true, pattern: parseAllowlistEntry(raw) };
  } catch (e) {
    if (e instanceof AllowlistError) return { ok: false, error: e.message };
    throw e;
  }
}

/** A key's list: each pattern checked and normalised, duplicates dropped, at most 256. */
export function checkDomainPatterns(
  raw: readonly string[],
): { ok: true; patterns: string[] } | { ok: false; error: string } {
  if (raw.length === 0)
    return { ok: false, error: "names no domain (unset it for unrestricted egress)" };
  const out: string[] = [];
  for (const r of raw) {
    const c = checkDomainPattern(r);
    if (!c.ok) return c;
    if (!out.includes(c.pattern)) out.push(c.pattern);
  }
  if (out.length > MAX_DOMAIN_PATTERNS)
    return { ok: false, error: `${out.length} patterns; at most ${MAX_DOMAIN_PATTERNS}` };
  return { ok: true, patterns: out };
}
