import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { VmNetworkProvider } from "../backends/microvm/guest-net.js";
import type { NetworkProvider } from "../backends/namespace/backend.js";
import { ScratchRunError } from "../errors.js";
import {
  createSandboxNetwork,
  reapOrphanNetworks,
  resolvConf,
  uplinkConfig,
  type UplinkConfig,
} from "../net/index.js";

export type NetworkSetting = "auto" | "public" | "none";

export interface NetworkPlan {
  /** null: every call runs with network "none". */
  provider: (NetworkProvider & VmNetworkProvider & { close(): Promise<void> }) | null;
  /** What calls get, in words for a model (the tool description). */
  summary: string;
  /** Why, with the operator's fix, for doctor and the startup log. */
  reason: string;
}

const NONE_SUMMARY = 'none on this server (every call runs with network "none")';
const PUBLIC_SUMMARY =
  '"public" reaches the internet; private ranges, cloud metadata and the host are always blocked';

/**
 * Server-wide network setting. SCRATCHRUN_NETWORK=public requires egress and refuses to start
 * without it; =none forces "none" on every call; =auto (default) gives public egress when the host
 * can (nftables present, IP forwarding on in the uplink namespace) and says otherwise.
 * SCRATCHRUN_UPLINK_NETNS, SCRATCHRUN_DNS (comma list), SCRATCHRUN_NET_PREFIX,
 * SCRATCHRUN_NET_POOL_V6 and SCRATCHRUN_ENABLE_FORWARDING=1 configure the uplink.
 */
export async function networkFromEnv(env: NodeJS.ProcessEnv = process.env): Promise<NetworkPlan> {
  const setting = (env.SCRATCHRUN_NETWORK ?? "auto") as NetworkSetting;
  if (!["auto", "public", "none"].includes(setting))
    throw new ScratchRunError(
      "NOT_READY",
      `SCRATCHRUN_NETWORK=${JSON.stringify(setting)} is not valid`,
      {
        fix: 'Use "auto", "public" or "none"',
      },
    );
  if (setting === "none")
    return { provider: null, summary: NONE_SUMMARY, reason: "disabled by SCRATCHRUN_NETWORK=none" };

  let uplink: UplinkConfig;
  try {
    uplink = uplinkConfig({
      netns: env.SCRATCHRUN_UPLINK_NETNS ?? null,
      ...(env.SCRATCHRUN_DNS ? { dnsResolvers: env.SCRATCHRUN_DNS.split(",") } : {}),
      ...(env.SCRATCHRUN_NET_PREFIX ? { prefix: env.SCRATCHRUN_NET_PREFIX } : {}),
      ...(env.SCRATCHRUN_NET_POOL_V6 ? { poolV6: env.SCRATCHRUN_NET_POOL_V6 } : {}),
      enableForwarding: env.SCRATCHRUN_ENABLE_FORWARDING === "1",
    });
  } catch (e) {
    throw new ScratchRunError("NOT_READY", `network configuration: ${(e as Error).message}`);
  }
  const missing = egressBlocker(uplink);
  if (missing) {
    if (setting === "public")
      throw new ScratchRunError("NOT_READY", missing.problem, { fix: missing.fix });
    return { provider: null, summary: NONE_SUMMARY, reason: `${missing.problem}; ${missing.fix}` };
  }

  await reapOrphanNetworks(uplink);
  const dir = mkdtempSync(join(tmpdir(), "scratchrun-net-"));
  chmodSync(dir, 0o755);
  const resolvPath = join(dir, "resolv.conf");
  writeFileSync(resolvPath, resolvConf(uplink), { mode: 0o644 });
  return {
    summary: PUBLIC_SUMMARY,
    reason: "public egress through the nftables filter",
    provider: {
      async create(id: string) {
        const net = await createSandboxNetwork({ id, uplink });
        return {
          netnsPath: net.netnsPath,
          resolvConf: resolvPath,
          blockedCount: () => net.blockedCount(),
          teardown: () => net.teardown(),
        };
      },
      // The microVM backend: the sandbox side is a tap QEMU (uid) opens inside the namespace.
      async createTap(id: string, tap: { name: string; uid: number }) {
        const net = await createSandboxNetwork({ id, uplink, attach: { kind: "tap", ...tap } });
        return {
          netnsPath: net.netnsPath,
          tapName: net.sandboxIfname,
          sandboxV4: net.addresses.sandboxV4,
          prefixV4: net.addresses.prefixV4,
          gatewayV4: net.addresses.gatewayV4,
          resolvConf: net.resolvConf,
          blockedCount: () => net.blockedCount(),
          teardown: () => net.teardown(),
        };
      },
      async close() {
        rmSync(dir, { recursive: true, force: true });
      },
    },
  };
}

/** What stops public egress on this host, if anything, and the fix. */
export function egressBlocker(uplink: UplinkConfig): { problem: string; fix: string } | null {
  if (!existsSync("/usr/sbin/nft"))
    return { problem: "nftables is not installed", fix: "apt-get install -y nftables" };
  if (uplink.netns === null && !uplink.enableForwarding) {
    const forward = readFileSync("/proc/sys/net/ipv4/ip_forward", "utf8").trim();
    if (forward !== "1")
      return {
        problem: "IPv4 forwarding is off on this host (net.ipv4.ip_forward=0)",
        fix: "enable it (sysctl -w net.ipv4.ip_forward=1) or set SCRATCHRUN_ENABLE_FORWARDING=1, or SCRATCHRUN_NETWORK=none",
      };
  }
  return null;
}
