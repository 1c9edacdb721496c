/** Network egress for sandboxes: the public API the backends call (see docs/decisions/0004). */
export {
  BLOCKED_CIDRS,
  classifyAddress,
  isBlockedAddress,
  type AddressClass,
  type Cidr,
} from "./addresses.js";
export {
  renderEgressRuleset,
  parseCounters,
  type EgressCounters,
  type EgressPolicy,
} from "./nftables.js";
export {
  listSandboxNetworkResources,
  reapOrphanNetworks,
  type SandboxNetworkResources,
} from "./resources.js";
export {
  createSandboxNetwork,
  type CreateSandboxNetworkOptions,
  type SandboxAttach,
  type SandboxNetwork,
} from "./sandbox-net.js";
export { DEFAULT_UPLINK, resolvConf, uplinkConfig, type UplinkConfig } from "./uplink.js";
