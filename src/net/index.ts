/**
 * Network egress for sandboxes, as one import for the engine's composition (src/compose/network.ts)
 * and the doctor (see docs/decisions/0004). The backends, the policy and the schema import the
 * files they use directly.
 */
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
