/**
 * IP forwarding in the uplink namespace, as dockerd does it, run once when a server starts (and
 * again by a sandbox network that finds it turned off since): forwarding already on changes
 * nothing; off, the server loads the guard (forward-guard.ts) and only then turns it on, so no
 * moment exists where the host forwards for anyone; SCRATCHRUN_ENABLE_FORWARDING=0 leaves it off
 * and the calls get network "none", saying why. The guard and forwarding stay when the server
 * stops, as Docker's FORWARD policy does: other servers may be using them, and turning
 * forwarding off under them would cut their sandboxes off. A host whose own firewall drops
 * forwarded traffic by policy gets its Docker chain opened for the sandbox links, or is named.
 */
import { readFileSync } from "node:fs";
import { inNetns, mustRun, runCommand } from "./commands.js";
import {
  dockerUserChain,
  forwardChains,
  GUARD_TABLE,
  guardPrefixes,
  renderDockerUserRules,
  renderForwardGuard,
  type ForwardChain,
} from "./forward-guard.js";
import type { UplinkConfig } from "./uplink.js";

export interface ForwardingState {
  /** "on": it was on and nothing changed; "turned-on": this server turned it on, guard first. */
  forwarding: "on" | "turned-on" | "off";
  /** The DOCKER-USER chains this server opened for its links ("ip", "ip6"). */
  dockerUser: ("ip" | "ip6")[];
  /** Other forward chains whose policy drops (the host's firewall), not opened by us. */
  dropping: ForwardChain[];
}

/** The forwarding sysctls the uplink needs: IPv4's, and IPv6's with an IPv6 pool. */
export function forwardingKeys(u: UplinkConfig): string[] {
  return ["net.ipv4.ip_forward", ...(u.poolV6 ? ["net.ipv6.conf.all.forwarding"] : [])];
}

/** A sysctl of the uplink namespace (the host's own: read from /proc, no process). */
export async function readSysctl(ns: string | null, key: string): Promise<string> {
  if (ns === null) return readFileSync(`/proc/sys/${key.replace(/\./g, "/")}`, "utf8").trim();
  return (await mustRun(inNetns(ns, "sysctl", ["-n", key]))).trim();
}

const nftJson = async (ns: string | null, args: string[]): Promise<string> => {
  const r = await runCommand(inNetns(ns, "nft", ["-j", ...args]));
  return r.code === 0 ? r.stdout : "";
};

/**
 * Makes forwarding what the uplink config asks, once at a server's start: see the file's comment.
 * With forwarding off and `enableForwarding` false it changes nothing and says "off".
 */
export async function prepareForwarding(u: UplinkConfig): Promise<ForwardingState> {
  const keys = forwardingKeys(u);
  const off: string[] = [];
  for (const key of keys) if ((await readSysctl(u.netns, key)) !== "1") off.push(key);
  if (off.length > 0 && !u.enableForwarding)
    return { forwarding: "off", dockerUser: [], dropping: [] };
  // A guard (this server's from an earlier start, or another prefix's) must let this prefix's
  // links through, or it would drop them.
  const guard = guardPrefixes(await nftJson(u.netns, ["list", "table", "inet", GUARD_TABLE]));
  if (off.length > 0 || (guard.length > 0 && !guard.includes(u.prefix)))
    await mustRun(inNetns(u.netns, "nft", ["-f", "-"]), renderForwardGuard([...guard, u.prefix]));
  for (const key of off) await mustRun(inNetns(u.netns, "sysctl", ["-qw", `${key}=1`]));
  const dockerUser = u.enableForwarding ? await openDockerUser(u) : [];
  const chains = await nftJson(u.netns, ["list", "chains"]);
  const dropping = forwardChains(chains, (t) => t.startsWith(u.prefix)).filter(
    (c) =>
      c.policy === "drop" &&
      !(c.table === "filter" && dockerUser.includes(c.family as "ip" | "ip6")),
  );
  return { forwarding: off.length > 0 ? "turned-on" : "on", dockerUser, dropping };
}

/**
 * Docker's FORWARD policy drops what it did not set up; its DOCKER-USER chain, jumped to first,
 * is where others' rules go. The sandbox links' accept rules are inserted there once.
 */
async function openDockerUser(u: UplinkConfig): Promise<("ip" | "ip6")[]> {
  const chains = await nftJson(u.netns, ["list", "chains"]);
  const opened: ("ip" | "ip6")[] = [];
  for (const family of u.poolV6 ? (["ip", "ip6"] as const) : (["ip"] as const)) {
    if (!dockerUserChain(chains, family)) continue;
    const present = await nftJson(u.netns, ["list", "chain", family, "filter", "DOCKER-USER"]);
    const script = renderDockerUserRules(family, u.prefix, present);
    if (script) await mustRun(inNetns(u.netns, "nft", ["-f", "-"]), script);
    opened.push(family);
  }
  return opened;
}
