/**
 * Name resolution for the egress proxy: its own resolvers (never the sandbox's choice), A and
 * AAAA, cached for the records' TTL (bounded), so the lookup a sandbox's DNS query caused is the
 * one its connection then uses.
 */
import { Resolver } from "node:dns/promises";

export interface Resolved {
  /** Both families, IPv4 first, as the resolvers answered (not yet filtered). */
  addresses: string[];
  /** The name does not exist (NXDOMAIN) as opposed to a failed lookup. */
  nxdomain: boolean;
  /** Every lookup failed (timeout, SERVFAIL): nothing is known. */
  failed: boolean;
  ttl: number;
}

const MIN_TTL = 5;
const MAX_TTL = 300;
const NEGATIVE_TTL = 5;
const MAX_CACHE = 4096;

interface Entry {
  value: Promise<Resolved>;
  expires: number;
}

export class NameResolver {
  private readonly resolver: Resolver;
  private readonly cache = new Map<string, Entry>();

  constructor(servers: readonly string[], timeoutMs = 2000) {
    this.resolver = new Resolver({ timeout: timeoutMs, tries: 2 });
    this.resolver.setServers([...servers]);
  }

  /** A and AAAA of a normalised name, from the cache while its TTL lasts. */
  resolve(name: string, now = Date.now()): Promise<Resolved> {
    const hit = this.cache.get(name);
    if (hit && hit.expires > now) return hit.value;
    const value = this.lookup(name);
    const entry: Entry = { value, expires: now + 60_000 };
    if (this.cache.size >= MAX_CACHE) this.cache.delete(this.cache.keys().next().value as string);
    this.cache.set(name, entry);
    void value.then((r) => {
      entry.expires =
        Date.now() + 1000 * (r.failed || r.addresses.length === 0 ? NEGATIVE_TTL : r.ttl);
    });
    return value;
  }

  private async lookup(name: string): Promise<Resolved> {
    const [v4, v6] = await Promise.allSettled([
      this.resolver.resolve4(name, { ttl: true }),
      this.resolver.resolve6(name, { ttl: true }),
    ]);
    const records = [v4, v6].flatMap((r) => (r.status === "fulfilled" ? r.value : []));
    const codes = [v4, v6].map((r) =>
      r.status === "rejected" ? String((r.reason as { code?: string }).code ?? "") : "OK",
    );
    const nx = codes.includes("ENOTFOUND");
    const failed = codes.every((c) => c !== "OK" && c !== "ENOTFOUND" && c !== "ENODATA");
    const ttl = records.length
      ? Math.min(MAX_TTL, Math.max(MIN_TTL, Math.min(...records.map((r) => r.ttl))))
      : NEGATIVE_TTL;
    return {
      addresses: records.map((r) => r.address),
      nxdomain: nx && records.length === 0,
      failed,
      ttl,
    };
  }
}
