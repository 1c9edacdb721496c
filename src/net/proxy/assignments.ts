/**
 * Which sandbox a connection or query to the egress proxy comes from, by its source address (each
 * sandbox has its own, from the pool; the netdev filter on its link drops any other source), and
 * that sandbox's allowlist and refusal record. The host assigns an entry when a sandbox network
 * is made or a call starts, and releases it before the address can go to another sandbox.
 */
import { parseStrict } from "../addresses.js";
import { allowlistOf, type DomainAllowlist } from "../allowlist.js";
import { formatIpv4, formatIpv6 } from "../parse-address.js";
import { RefusalLog } from "./decide.js";
import type { Broker } from "./broker.js";
import type net from "node:net";

export class Assignment {
  readonly log = new RefusalLog();
  /** Open sockets of this sandbox (both ends of each spliced connection), cut on release. */
  readonly conns = new Set<net.Socket>();
  /** Connections accepted from this sandbox and still open (admission.ts counts these). */
  accepted = 0;
  released = false;
  /** The call's brokered secrets (broker.ts), when it brought any. */
  broker: Broker | null = null;
  constructor(readonly allow: DomainAllowlist) {}
}

/** Canonical text of a socket's address; an IPv4-mapped IPv6 address becomes the IPv4 one. */
export function canonicalAddress(addr: string | undefined): string | null {
  if (addr === undefined) return null;
  const p = parseStrict(addr.startsWith("::ffff:") && addr.includes(".") ? addr.slice(7) : addr);
  if (!p) return null;
  return p.family === 4 ? formatIpv4(p.value) : formatIpv6(p.value);
}

export class Assignments {
  private readonly byAddress = new Map<string, Assignment>();

  /**
   * Gives `addrs` (one sandbox's v4 and v6 addresses) a fresh allowlist and empty record, and the
   * broker `makeBroker` makes for it (its call's secrets), if any.
   */
  assign(
    addrs: readonly string[],
    entries: readonly string[],
    makeBroker?: (a: Assignment) => Broker,
  ): void {
    const a = new Assignment(allowlistOf(entries));
    if (makeBroker) a.broker = makeBroker(a);
    for (const addr of addrs) {
      const key = canonicalAddress(addr);
      if (key === null) throw new TypeError(`not an address: ${addr}`);
      this.release([addr]);
      this.byAddress.set(key, a);
    }
  }

  get(addr: string | undefined): Assignment | undefined {
    const key = canonicalAddress(addr);
    return key === null ? undefined : this.byAddress.get(key);
  }

  /** Forgets `addrs` and cuts every connection their sandbox still has through the proxy. */
  release(addrs: readonly string[]): void {
    for (const addr of addrs) {
      const key = canonicalAddress(addr);
      const a = key === null ? undefined : this.byAddress.get(key);
      if (!a || key === null) continue;
      this.byAddress.delete(key);
      if ([...this.byAddress.values()].includes(a)) continue;
      a.released = true;
      for (const s of a.conns) s.destroy();
      a.broker?.close();
      a.broker = null;
    }
  }
}
