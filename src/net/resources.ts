/**
 * What sandbox networking leaves in the kernel, found by name prefix: namespaces `<prefix><id>`,
 * host links `<prefix>h<n>` in the uplink namespace, nft tables `<prefix><id>` there and a
 * sandbox's chains and counters `<prefix><id>.<name>` in the shared tables `<prefix>.rules`
 * (nftables.ts), each reported as its sandbox's tables ("inet <prefix><id>", "netdev …"), the
 * shared tables by their own name only when they hold no sandbox's. Used for leak checks in tests
 * and to reap what a crashed server left behind.
 */
import { inNetns, mustRun, runCommand } from "./commands.js";
import { GUARD_TABLE } from "./forward-guard.js";
import {
  renderEgressTeardown,
  renderSandboxRulesRemoval,
  renderSharedTeardown,
  sharedTableName,
  type SandboxObjects,
} from "./nftables.js";
import type { UplinkConfig } from "./uplink.js";

export interface SandboxNetworkResources {
  netns: string[];
  links: string[];
  /** "family name", e.g. "inet sr-abc". */
  tables: string[];
}

/** A sandbox's chains and counters found in the shared tables, by its name. */
type SharedFound = Map<
  string,
  { netdevChains: string[]; netdevCounters: string[]; inetChains: string[]; inetCounters: string[] }
>;

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

async function listTables(
  u: UplinkConfig,
): Promise<{ tables: string[]; shared: SharedFound; sharedFamilies: string[] }> {
  const out = await mustRun(inNetns(u.netns, "nft", ["-j", "list", "tables"]));
  const doc = JSON.parse(out) as {
    nftables?: Array<{ table?: { family?: string; name?: string } }>;
  };
  const sharedName = sharedTableName(u.prefix);
  const all = (doc.nftables ?? [])
    .flatMap((i) => (i.table ? [i.table] : []))
    // The forwarding guard is the host's, whatever prefix its name happens to start with.
    .filter((t) => (t.name ?? "").startsWith(u.prefix) && t.name !== GUARD_TABLE);
  const tables = all.filter((t) => t.name !== sharedName).map((t) => `${t.family} ${t.name}`);
  const shared: SharedFound = new Map();
  const sharedFamilies = all.filter((t) => t.name === sharedName).map((t) => t.family ?? "");
  for (const family of sharedFamilies) {
    const res = await runCommand(
      inNetns(u.netns, "nft", ["-j", "list", "table", family, sharedName]),
    );
    const items =
      (
        JSON.parse(res.stdout || "{}") as {
          nftables?: Array<Record<string, { name?: string; table?: string }>>;
        }
      ).nftables ?? [];
    for (const item of items) {
      for (const kind of ["chain", "counter"] as const) {
        const name = item[kind]?.name ?? "";
        const dot = name.indexOf(".");
        if (dot < 1) continue;
        const owner = name.slice(0, dot);
        const o = shared.get(owner) ?? {
          netdevChains: [],
          netdevCounters: [],
          inetChains: [],
          inetCounters: [],
        };
        shared.set(owner, o);
        const list =
          family === "netdev"
            ? kind === "chain"
              ? o.netdevChains
              : o.netdevCounters
            : kind === "chain"
              ? o.inetChains
              : o.inetCounters;
        list.push(name);
      }
    }
  }
  for (const [owner, o] of shared) {
    if (o.netdevChains.length + o.netdevCounters.length > 0) tables.push(`netdev ${owner}`);
    if (o.inetChains.length + o.inetCounters.length > 0) tables.push(`inet ${owner}`);
  }
  // Shared tables with no sandbox's rules in them: a leftover, reported by their own name.
  if (shared.size === 0) tables.push(...sharedFamilies.map((f) => `${f} ${sharedName}`));
  return { tables, shared, sharedFamilies };
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
  return { netns, links, tables: tables.tables };
}

/**
 * Removes every prefixed namespace, link and table that no live sandbox of this process owns: call
 * once at server start (one server per prefix per host). Returns what was removed.
 */
export async function reapOrphanNetworks(u: UplinkConfig): Promise<SandboxNetworkResources> {
  const mine = liveNetworks(u);
  const [netnsFound, links, scan] = await Promise.all([
    listNetns(u.prefix),
    listUplinkLinks(u),
    listTables(u),
  ]);
  const found = { netns: netnsFound, links, tables: scan.tables };
  const removed: SandboxNetworkResources = { netns: [], links: [], tables: [] };
  const liveTables = new Set([...mine].flatMap((n) => [`inet ${n}`, `netdev ${n}`]));
  const sharedName = sharedTableName(u.prefix);
  // No sandbox of this process has rules in the shared tables: whatever is in them is a dead
  // server's, removed with the tables in one transaction.
  const dropShared = mine.size === 0 && scan.sharedFamilies.length > 0;
  if (dropShared) {
    await mustRun(inNetns(u.netns, "nft", ["-f", "-"]), renderSharedTeardown(sharedName));
  }
  for (const t of found.tables) {
    if (liveTables.has(t)) continue;
    const [family, name = ""] = t.split(" ");
    const objects: SandboxObjects | undefined = scan.shared.get(name);
    if (name === sharedName || (objects && dropShared)) {
      // Removed above with the shared tables.
    } else if (objects) {
      // One family's objects at a time, as they are reported.
      const none: string[] = [];
      const only: SandboxObjects =
        family === "netdev"
          ? { ...objects, inetChains: none, inetCounters: none }
          : { ...objects, netdevChains: none, netdevCounters: none };
      await mustRun(
        inNetns(u.netns, "nft", ["-f", "-"]),
        renderSandboxRulesRemoval(sharedName, only),
      );
    } else {
      await mustRun(inNetns(u.netns, "nft", ["-f", "-"]), renderEgressTeardown(name));
    }
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
