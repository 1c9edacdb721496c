import { createHash } from "node:crypto";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";
import type { VmNetworkProvider } from "../backends/microvm/guest-net.js";
import type { NetworkProvider } from "../backends/namespace/backend.js";
import type { NetworkEgress } from "../backends/types.js";
import { ScratchRunError } from "../errors.js";
import { UidPool } from "../jail/uids.js";
import { AllowlistError, parseAllowlist, type DomainAllowlist } from "../net/allowlist.js";
import {
  reapOrphanNetworks,
  resolvConf,
  uplinkConfig,
  type SandboxNetwork,
  type UplinkConfig,
} from "../net/index.js";
import { prepareForwarding, type ForwardingState } from "../net/forwarding.js";
import { claimUplink, type UplinkClaim } from "../net/uplink-owner.js";
import { ReadyNetworks } from "../net/ready.js";
import { EgressProxy, PROXY_UID_BASE, PROXY_UID_COUNT } from "../net/proxy/supervisor.js";
import type { BrokerSpec } from "../net/proxy/control.js";
import { setting, settingOn } from "../schema/settings/read.js";
import { DEFAULT_READY_NETWORKS } from "../net/uplink.js";

export type NetworkSetting = "auto" | "public" | "none";

export interface NetworkPlan {
  /** null: every call runs with network "none". */
  provider: (NetworkProvider & VmNetworkProvider & { close(): Promise<void> }) | null;
  /** The server's egress allowlist (SCRATCHRUN_EGRESS_ALLOW), null: every public destination. */
  allowlist: DomainAllowlist | null;
  /** What calls get, in words for a model (the tool description). */
  summary: string;
  /** Why, with the operator's fix, for doctor and the startup log. */
  reason: string;
  /**
   * Set when this host keeps `public` from the calls though the operator did not turn it off
   * (SCRATCHRUN_NETWORK=none is a choice the tool description states): each such call's result
   * says why, with the operator's fix.
   */
  unavailable?: string;
}

const NONE_SUMMARY = 'none on this server (every call runs with network "none")';
const PUBLIC_SUMMARY =
  '"public" reaches the internet; private ranges, cloud metadata and the host are always blocked';
/** How many allowlist entries the tool description names. */
const SUMMARY_ENTRIES = 20;

function allowlistSummary(allow: DomainAllowlist): string {
  const shown = allow.entries.slice(0, SUMMARY_ENTRIES).join(", ");
  const more = allow.entries.length - SUMMARY_ENTRIES;
  return (
    `"public" reaches only these names, over HTTP (port 80) and HTTPS (443): ${shown}` +
    `${more > 0 ? ` and ${more} more` : ""}; every other name, IP address, port and protocol ` +
    "is refused at once and listed in the result's network_refused; private ranges, cloud " +
    "metadata and the host are always blocked"
  );
}

/** Where the sandboxes' resolv.conf files live: tmpfs, one file per content, shared by servers. */
export const RESOLV_DIR = "/run/scratchrun/net";

/**
 * Every jail's uid opens its resolv.conf by path: RESOLV_DIR readable and its parent traversable
 * by others. A host whose /run/scratchrun an older build made 0700 (its uid locks' mkdir -p) gets
 * the parent's others-execute bit added: its own folders keep their modes.
 */
function openToJails(): void {
  mkdirSync(RESOLV_DIR, { recursive: true, mode: 0o755 });
  const parent = dirname(RESOLV_DIR);
  const mode = statSync(parent).mode & 0o7777;
  if ((mode & 0o001) === 0) chmodSync(parent, mode | 0o011);
  if ((statSync(RESOLV_DIR).mode & 0o005) !== 0o005) chmodSync(RESOLV_DIR, 0o755);
}

/**
 * The path of a file holding `content` (a sandbox's resolv.conf, bound into every jail), named by
 * its digest and written once (atomically): servers with the same resolvers share it, and one
 * killed outright leaves nothing to clean up (a temporary directory per server did, to every
 * later leak check).
 */
function sharedResolvConf(content: string): string {
  openToJails();
  const path = join(
    RESOLV_DIR,
    `resolv-${createHash("sha256").update(content).digest("hex").slice(0, 16)}.conf`,
  );
  if (existsSync(path) && readFileSync(path, "utf8") === content) return path;
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, content, { mode: 0o644 });
  renameSync(tmp, path);
  return path;
}

/**
 * The server's egress allowlist from SCRATCHRUN_EGRESS_ALLOW (names and `*.` wildcards, separated
 * by commas or spaces), or null when unset. A bad entry stops the server, naming it.
 */
export function egressAllowlistFromEnv(
  env: NodeJS.ProcessEnv = process.env,
): DomainAllowlist | null {
  return allowlistSetting("SCRATCHRUN_EGRESS_ALLOW", env);
}

function allowlistSetting(
  name: "SCRATCHRUN_EGRESS_ALLOW" | "SCRATCHRUN_SECRETS_PLAIN_HTTP",
  env: NodeJS.ProcessEnv,
): DomainAllowlist | null {
  const spec = setting(name, env);
  if (spec === undefined) return null;
  try {
    return parseAllowlist(spec);
  } catch (e) {
    if (!(e instanceof AllowlistError)) throw e;
    throw new ScratchRunError("NOT_READY", `${name}: ${e.message}`, {
      fix: 'Give domain names and "*." wildcards separated by commas, e.g. "pypi.org,*.github.com"',
    });
  }
}

/**
 * A sandbox network's egress side: unrestricted, or (allow given) through `proxy`, which is told
 * the sandbox's addresses and allowlist now and whenever a call brings another allowlist, and is
 * told to forget them before the network (and its addresses) goes.
 */
export async function egressOf(
  net: SandboxNetwork,
  proxy: EgressProxy | null,
  allow: DomainAllowlist | null,
): Promise<NetworkEgress & { teardown(): Promise<void> }> {
  const a = net.addresses;
  const addrs = [a.sandboxV4, ...(a.sandboxV6 ? [a.sandboxV6] : [])];
  let current = allow;
  if (proxy && allow) await proxy.assign(addrs, allow);
  return {
    allowlist: allow,
    async useAllowlist(next: DomainAllowlist, broker?: BrokerSpec | null) {
      if (!proxy || !current || (next === current && !broker)) return;
      current = next;
      await proxy.assign(addrs, next, broker);
    },
    async report() {
      const c = await net.counters();
      const r = proxy && current ? await proxy.collect(addrs) : null;
      const hostDropped = c.forwarded - c.passed;
      return {
        blockedPackets: c.blocked + c.refused,
        ...(r ? { refused: r.refused, refusedDropped: r.dropped } : {}),
        ...(hostDropped > 0 ? { hostDropped } : {}),
      };
    },
    async teardown() {
      if (proxy && current) await proxy.release(addrs);
      await net.teardown();
    },
  };
}
/**
 * Server-wide network setting. SCRATCHRUN_NETWORK=public requires egress and refuses to start
 * without it; =none forces "none" on every call; =auto (default) gives public egress when the host
 * can (nftables present; IP forwarding on in the uplink namespace, or turned on here as dockerd
 * does unless SCRATCHRUN_ENABLE_FORWARDING=0: src/net/forwarding.ts) and says otherwise, in
 * every call's result too. SCRATCHRUN_UPLINK_NETNS, SCRATCHRUN_DNS (comma list),
 * SCRATCHRUN_NET_PREFIX and SCRATCHRUN_NET_POOL_V6 configure the uplink.
 */
export async function networkFromEnv(env: NodeJS.ProcessEnv = process.env): Promise<NetworkPlan> {
  const allowlist = egressAllowlistFromEnv(env);
  const depth = readyDepth(env);
  const secretsPlainHttp = allowlistSetting("SCRATCHRUN_SECRETS_PLAIN_HTTP", env)?.entries ?? [];
  const mode = setting("SCRATCHRUN_NETWORK", env) as NetworkSetting;
  if (!["auto", "public", "none"].includes(mode))
    throw new ScratchRunError(
      "NOT_READY",
      `SCRATCHRUN_NETWORK=${JSON.stringify(mode)} is not valid`,
      {
        fix: 'Use "auto", "public" or "none"',
      },
    );
  if (mode === "none")
    return {
      provider: null,
      allowlist,
      summary: NONE_SUMMARY,
      reason: "disabled by SCRATCHRUN_NETWORK=none",
    };

  const dns = setting("SCRATCHRUN_DNS", env);
  const prefix = setting("SCRATCHRUN_NET_PREFIX", env);
  const poolV6 = setting("SCRATCHRUN_NET_POOL_V6", env);
  let uplink: UplinkConfig;
  try {
    uplink = uplinkConfig({
      netns: setting("SCRATCHRUN_UPLINK_NETNS", env) ?? null,
      ...(dns ? { dnsResolvers: dns.split(",") } : {}),
      ...(prefix ? { prefix } : {}),
      ...(poolV6 ? { poolV6 } : {}),
      enableForwarding: settingOn("SCRATCHRUN_ENABLE_FORWARDING", env),
    });
  } catch (e) {
    throw new ScratchRunError("NOT_READY", `network configuration: ${(e as Error).message}`);
  }
  const missing = egressBlocker(uplink);
  if (missing) {
    return withoutNetwork(mode, allowlist, missing);
  }
  // Forwarding on (turned on here, guard first, where it was off), Docker's chain opened.
  const forwarding = await prepareForwarding(uplink).catch((e: unknown) => {
    throw new ScratchRunError("NOT_READY", `IP forwarding could not be set up: ${String(e)}`, {
      fix: "check that nftables and sysctl work (scratchrun doctor), or SCRATCHRUN_NETWORK=none",
    });
  });
  if (forwarding.forwarding === "off") {
    return withoutNetwork(mode, allowlist, forwardingOff(uplink));
  }

  // One server per uplink and prefix on a host: a second one's start would reap the first's
  // networks and reuse its addresses (net/uplink-owner.ts). It runs without network instead.
  const claim = await claimUplink(uplink);
  if ("what" in claim) {
    const problem =
      `another ScratchRun server${claim.pid === null ? "" : ` (pid ${claim.pid})`} on this ` +
      `host runs public networking on ${claim.what}`;
    const fix =
      "let your clients share that server (scratchrun setup installs one local service that " +
      "every stdio client forwards to), stop it, or start this one with SCRATCHRUN_NETWORK=none";
    return withoutNetwork(mode, allowlist, { problem, fix });
  }
  try {
    await reapOrphanNetworks(uplink);
  } catch (e) {
    claim.release();
    throw e;
  }
  // The egress proxy: started now for a server-wide allowlist (a failure stops the server), else
  // on the first network that needs one (a call whose policy brings an allowlist).
  const uids = new UidPool(PROXY_UID_BASE, PROXY_UID_COUNT);
  let proxyUid: number | null = null;
  let proxy: Promise<EgressProxy> | null = null;
  const startProxy = (): Promise<EgressProxy> => {
    if (!proxy) {
      proxyUid = uids.acquire();
      proxy = EgressProxy.start(uplink, proxyUid, {
        upstreamCaFile: setting("SCRATCHRUN_EGRESS_UPSTREAM_CA", env) ?? null,
        secretsPlainHttp,
      });
      proxy.catch(() => {
        proxy = null;
        if (proxyUid !== null) uids.release(proxyUid);
        proxyUid = null;
      });
    }
    return proxy;
  };
  if (allowlist) {
    try {
      await startProxy();
    } catch (e) {
      claim.release();
      throw new ScratchRunError("NOT_READY", `the egress proxy did not start: ${String(e)}`, {
        fix: "check that nftables and iproute2 work (scratchrun doctor), or unset SCRATCHRUN_EGRESS_ALLOW",
      });
    }
  }
  const resolvPath = sharedResolvConf(resolvConf(uplink));
  const ready = new ReadyNetworks({
    uplink,
    depth,
    onError: (e) => process.stderr.write(`scratchrun: ready networks: ${String(e)}\n`),
  });
  // The backends name each sandbox; a network made ahead has its own name, made when it was.
  const open = async (
    _id: string,
    allow: DomainAllowlist | null,
    attach?: { kind: "tap"; name: string; uid: number },
  ) => {
    const px = allow ? await startProxy() : null;
    const net = await ready.take({
      ...(attach ? { attach } : {}),
      ...(px ? { proxy: px.ports } : {}),
    });
    try {
      return { net, egress: await egressOf(net, px, allow) };
    } catch (e) {
      await net.teardown().catch(() => undefined);
      throw e;
    }
  };
  return {
    allowlist,
    summary: allowlist ? allowlistSummary(allowlist) : PUBLIC_SUMMARY,
    reason:
      (allowlist
        ? `public egress through the nftables filter, limited to ${allowlist.entries.length} allowlisted names by the egress proxy`
        : "public egress through the nftables filter") +
      forwardingNote(forwarding) +
      squatNote(claim.squatted),
    provider: {
      defaultAllowlist: allowlist,
      async create(id: string, allow: DomainAllowlist | null) {
        const { net, egress } = await open(id, allow);
        return { ...egress, netnsPath: net.netnsPath, resolvConf: resolvPath };
      },
      // The microVM backend: the sandbox side is a tap QEMU (uid) opens inside the namespace.
      async createTap(
        id: string,
        tap: { name: string; uid: number },
        allow: DomainAllowlist | null,
      ) {
        const { net, egress } = await open(id, allow, { kind: "tap", ...tap });
        return {
          ...egress,
          netnsPath: net.netnsPath,
          tapName: net.sandboxIfname,
          sandboxV4: net.addresses.sandboxV4,
          prefixV4: net.addresses.prefixV4,
          gatewayV4: net.addresses.gatewayV4,
          resolvConf: net.resolvConf,
        };
      },
      async close() {
        await ready.close();
        const p = proxy;
        proxy = null;
        if (p) await (await p.catch(() => null))?.close();
        if (proxyUid !== null) uids.release(proxyUid);
        proxyUid = null;
        claim.release();
      },
    },
  };
}

/**
 * This host keeps "public" from the calls though the operator did not turn it off: asked for
 * "public" outright, the server does not start; on "auto", every call runs with "none" and says why.
 */
function withoutNetwork(
  mode: NetworkSetting,
  allowlist: DomainAllowlist | null,
  why: { problem: string; fix: string },
): NetworkPlan {
  if (mode === "public") throw new ScratchRunError("NOT_READY", why.problem, { fix: why.fix });
  const said = `${why.problem}; ${why.fix}`;
  return { provider: null, allowlist, summary: NONE_SUMMARY, reason: said, unavailable: said };
}

/** What the startup line says of a claim's name another user's process holds (uplink-owner.ts). */
function squatNote(squatted: UplinkClaim["squatted"]): string {
  return squatted
    .map(
      (s) =>
        `; warning: ${s.what} is held by pid ${s.pid} (uid ${s.uid}: ${s.command}), not a ScratchRun server: the one-server check is off for it until that process ends`,
    )
    .join("");
}

/** SCRATCHRUN_NET_READY: a whole number of networks, 0 to 256. */
export function readyDepth(env: NodeJS.ProcessEnv): number {
  const raw = setting("SCRATCHRUN_NET_READY", env) ?? String(DEFAULT_READY_NETWORKS);
  const n = Number(raw);
  if (!/^\d+$/.test(raw.trim()) || n > 256)
    throw new ScratchRunError(
      "NOT_READY",
      `SCRATCHRUN_NET_READY=${JSON.stringify(raw)} is not valid`,
      {
        fix: "Give a whole number from 0 (each network made in its call) to 256",
      },
    );
  return n;
}

/** What the startup line adds about forwarding: what this start changed, what may drop. */
export function forwardingNote(f: ForwardingState): string {
  const notes: string[] = [];
  if (f.forwarding === "turned-on")
    notes.push(
      "IP forwarding was off: turned on, with forwarded traffic that is not a sandbox's dropped (table inet scratchrun_forward)",
    );
  if (f.dockerUser.length > 0)
    notes.push(
      `the sandbox links let through Docker's DOCKER-USER chain (${f.dockerUser.join(", ")})`,
    );
  for (const c of f.dropping)
    notes.push(
      `warning: the forward chain ${c.family} ${c.table} ${c.name} drops by policy: sandbox packets it drops are reported in each call's network_reason`,
    );
  return notes.length ? `; ${notes.join("; ")}` : "";
}

/** What stops public egress on this host, if anything, and the fix. */
export function egressBlocker(uplink: UplinkConfig): { problem: string; fix: string } | null {
  if (!existsSync("/usr/sbin/nft"))
    return { problem: "nftables is not installed", fix: "apt-get install -y nftables" };
  if (uplink.netns === null && !uplink.enableForwarding) {
    const forward = readFileSync("/proc/sys/net/ipv4/ip_forward", "utf8").trim();
    if (forward !== "1") return forwardingOff(uplink);
  }
  return null;
}

/** Forwarding is off and SCRATCHRUN_ENABLE_FORWARDING=0 keeps it so: the problem and the fix. */
function forwardingOff(uplink: UplinkConfig): { problem: string; fix: string } {
  const where = uplink.netns === null ? "this host" : `the uplink namespace ${uplink.netns}`;
  return {
    problem: `IP forwarding is off on ${where} (net.ipv4.ip_forward=0) and SCRATCHRUN_ENABLE_FORWARDING=0 keeps the server from turning it on`,
    fix: "the operator can turn it on (sysctl -w net.ipv4.ip_forward=1) or unset SCRATCHRUN_ENABLE_FORWARDING",
  };
}
