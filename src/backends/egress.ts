/**
 * Where a sandbox's network goes, as one value the backends share: nowhere; any public
 * destination (the egress filter's); or only an allowlist's names, through the egress proxy.
 */
import type { DomainAllowlist } from "../net/allowlist.js";
import type { NetworkMode } from "../schema/names.js";
import type { BrokerSpec } from "../net/proxy/control.js";

export type Egress =
  | { readonly kind: "none" }
  | { readonly kind: "public" }
  | {
      readonly kind: "allowlist";
      readonly names: DomainAllowlist;
      /** The call's brokered secrets, for the proxy (docs/decisions/0015-brokered-secrets.md). */
      readonly broker?: BrokerSpec;
    };

export const NO_EGRESS: Egress = { kind: "none" };

/** A call's egress: its network mode under an allowlist (null or absent: unrestricted). */
export function egressFor(
  network: NetworkMode,
  allowlist?: DomainAllowlist | null,
  broker?: BrokerSpec | null,
): Egress {
  if (network === "none") return NO_EGRESS;
  if (!allowlist) return { kind: "public" };
  return { kind: "allowlist", names: allowlist, ...(broker ? { broker } : {}) };
}

/** The brokered secrets a call's egress carries, if any. */
export const egressBroker = (e: Egress): BrokerSpec | null =>
  e.kind === "allowlist" ? (e.broker ?? null) : null;

/** The network mode an egress asks for (an allowlist's is a public network, proxied). */
export const networkModeOf = (e: Egress): NetworkMode => (e.kind === "none" ? "none" : "public");

/** The allowlist a public network is made for: null when unrestricted or there is no network. */
export const egressAllowlist = (e: Egress): DomainAllowlist | null =>
  e.kind === "allowlist" ? e.names : null;

/**
 * Whether a pooled sandbox may serve a call of egress `e`. Pooled networks are made for the
 * server's allowlist (`pooled`; null: unrestricted), so whether they are proxied is fixed when
 * they start; the call's own allowlist is set on a proxied one before its code runs.
 */
export const poolServes = (e: Egress, pooled: DomainAllowlist | null): boolean =>
  e.kind === "none" || (e.kind === "allowlist") === (pooled !== null);
