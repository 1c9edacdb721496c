/**
 * What sandbox networking leaves in the kernel, found by name prefix: namespaces `<prefix><id>`,
 * host links `<prefix>h<n>` in the uplink namespace, nft tables `<prefix><id>` there. Used for leak
 * checks in tests and to reap what a crashed server left behind.
 */
import { inNetns, mustRun, runCommand } from "./commands.js";
import { GUARD_TABLE } from "./forward-guard.js";
import { renderEgressTeardown } from "./nftables.js";
import type { UplinkConfig } from "./uplink.js";

export interface SandboxNetworkResources {
  netns: string[];
  links: string[];
  /** "family name", e.g. "inet sr-abc". */
  tables: string[];
}

export function uplinkKey(u: UplinkConfig): string {
  return `${u.netns ?? ""}\u0000${u.prefix}`;
}

export function hostLinkName(u: UplinkConfig, slot: number): string {
  return `${u.prefix}h${slot}`;
}

/** Namespaces of sandboxes this process created and has not torn down, per uplink. */
const live = new Map<string, Set<string>>();

export function liveNetworks(u: UplinkConfig): Set<string> {
  const key = uplinkKey(u);
  const set = live.get(key) ?? new Set<string>();
  live.set(key, set);
  return set;
}

export async function listUplinkLinks(u: UplinkConfig): Promise<string[]> {
  const out = await mustRun(inNetns(u.netns, "ip", ["-j", "link", "show"]));
  const links = JSON.parse(out) as Array<{ ifname?: string }>;
  return links.map((l) => l.ifname ?? "").filter((n) => n.startsWith(`${u.prefix}h`));
}

async function listNetns(prefix: string): Promise<string[]> {
  const res = await runCommand(inNetns(null, "ip", ["-j", "netns", "list"]));
  if (res.code !== 0 || res.stdout.trim() === "") return [];
  const list = JSON.parse(res.stdout) as Array<{ name?: string }>;
  return list.map((n) => n.name ?? "").filter((n) => n.startsWith(prefix));
}

async function listTables(u: UplinkConfig): Promise<string[]> {
  const out = await mustRun(inNetns(u.netns, "nft", ["-j", "list", "tables"]));
  const doc = JSON.parse(out) as {
    nftables?: Array<{ table?: { family?: string; name?: string } }>;
  };
  return (
    (doc.nftables ?? [])
      .flatMap((i) => (i.table ? [i.table] : []))
      // The forwarding guard is the host's, whatever prefix its name happens to start with.
      .filter((t) => (t.name ?? "").startsWith(u.prefix) && t.name !== GUARD_TABLE)
      .map((t) => `${t.family} ${t.name}`)
  );
}

/** Everything with this uplink's prefix that exists now, live sandboxes included. */
export async function listSandboxNetworkResources(
  u: UplinkConfig,
): Promise<SandboxNetworkResources> {
  const [netns, links, tables] = await Promise.all([
    listNetns(u.prefix),
    listUplinkLinks(u),
    listTables(u),
  ]);
  return { netns, links, tables };
}

/**
 * Removes every prefixed namespace, link and table that no live sandbox of this process owns: call
 * once at server start (one server per prefix per host). Returns what was removed.
 */
export async function reapOrphanNetworks(u: UplinkConfig): Promise<SandboxNetworkResources> {
  const mine = liveNetworks(u);
  const found = await listSandboxNetworkResources(u);
  const removed: SandboxNetworkResources = { netns: [], links: [], tables: [] };
  const liveTables = new Set([...mine].flatMap((n) => [`inet ${n}`, `netdev ${n}`]));
  for (const t of found.tables) {
    if (liveTables.has(t)) continue;
    const name = t.split(" ")[1] ?? "";
    await mustRun(inNetns(u.netns, "nft", ["-f", "-"]), renderEgressTeardown(name));
    removed.tables.push(t);
  }
  for (const l of found.links) {
    if (isLiveSlot(u, l)) continue;
    const res = await runCommand(inNetns(u.netns, "ip", ["link", "del", l]));
    if (res.code === 0) removed.links.push(l);
  }
  for (const ns of found.netns) {
    if (mine.has(ns)) continue;
    const res = await runCommand(inNetns(null, "ip", ["netns", "del", ns]));
    if (res.code === 0) removed.netns.push(ns);
  }
  return removed;
}

/** Host links of live sandboxes, registered by sandbox-net so reaping never cuts one. */
const liveLinkNames = new Map<string, Set<string>>();

export function markLiveLink(u: UplinkConfig, name: string, alive: boolean): void {
  const key = uplinkKey(u);
  const set = liveLinkNames.get(key) ?? new Set<string>();
  liveLinkNames.set(key, set);
  if (alive) set.add(name);
  else set.delete(name);
}

function isLiveSlot(u: UplinkConfig, link: string): boolean {
  return liveLinkNames.get(uplinkKey(u))?.has(link) ?? false;
}
