/**
 * Pieces of nft script text that both renderers write (the sandbox's tables, nftables.ts, and the
 * proxied rules, nftables-proxy.ts), kept apart so that neither renderer imports the other.
 */
import { parseStrict } from "./addresses.js";
import { formatIpv4, formatIpv6 } from "./parse-address.js";

/** A literal address in its one canonical text; throws naming `what` when it is not one. */
export function canonical(addr: string, family: 4 | 6 | null, what: string): string {
  const p = parseStrict(addr);
  if (!p || (family !== null && p.family !== family)) {
    throw new TypeError(`${what}: not a literal IPv${family ?? "4/6"} address: ${addr}`);
  }
  return p.family === 4 ? formatIpv4(p.value) : formatIpv6(p.value);
}

/** An nft interval set of addresses (prefixes merged). */
export function setBlock(name: string, type: string, elements: string[]): string[] {
  return [
    `\tset ${name} {`,
    `\t\ttype ${type}`,
    `\t\tflags interval`,
    `\t\tauto-merge`,
    ...(elements.length > 0 ? [`\t\telements = { ${elements.join(", ")} }`] : []),
    `\t}`,
  ];
}
