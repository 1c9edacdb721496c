/**
 * One sandbox's network, as an ordered recipe: namespace, veth pair (host end in the uplink
 * namespace), addresses from the pool, default route, egress rules; and its exact reverse.
 *
 * The sandbox side is either the sandbox process itself (`attach: { kind: "process" }`: run it in
 * `netnsPath`, e.g. `ip netns exec` or setns, then bwrap --share-net) or a tap device for a VM
 * (`attach: { kind: "tap", name }`: the tap is bridged to the veth inside the namespace; the guest
 * configures `addresses.sandboxV4` itself and QEMU opens the tap from inside the namespace).
 *
 * `network: "none"` needs none of this: bwrap --unshare-net (or a VM without a NIC) is loopback only.
 */
import { randomBytes } from "node:crypto";
import { ScratchRunError } from "../errors.js";
import { BLOCKED_CIDRS } from "./addresses.js";
import { CommandError, inNetns, mustRun, runCommand } from "./commands.js";
import {
  parseCounters,
  renderSandboxRules,
  renderSandboxRulesRemoval,
  renderSharedTables,
  renderSharedTeardown,
  sandboxObjects,
  sharedTableName,
  type EgressCounters,
} from "./nftables.js";
import type { ProxyPorts } from "./nftables-proxy.js";
import { forwardingKeys, prepareForwarding, readSysctl } from "./forwarding.js";
import { hostWatch, readHostBlockSet } from "./host-watch.js";
import {
  hostLinkName,
  liveNetworks,
  listUplinkLinks,
  markLiveLink,
  uplinkKey,
} from "./resources.js";
import {
  poolSize,
  resolvConf,
  slotAddresses,
  validateUplink,
  type SlotAddresses,
  type UplinkConfig,
} from "./uplink.js";

export type SandboxAttach =
  | { kind: "process" }
  /** A persistent tap `name` in the sandbox namespace, bridged to the uplink link; uid may open it. */
  | { kind: "tap"; name: string; uid?: number }
  /**
   * The bridge a tap will join, without the tap: a network made before the VM that will use it
   * (ready.ts), whose tap attachTap() adds once the VM's uid is known.
   */
  | { kind: "bridge" };

export interface SandboxNetwork {
  readonly id: string;
  readonly mode: "public";
  /** Name under /run/netns (what `ip netns exec` takes). */
  readonly netns: string;
  readonly netnsPath: string;
  readonly attach: SandboxAttach;
  /** Host end of the link, in the uplink namespace. */
  readonly hostIfname: string;
  /** The sandbox side's interface: "eth0" for a process, the tap name for a VM (br0: none yet). */
  readonly sandboxIfname: string;
  readonly addresses: SlotAddresses;
  /** Content for the sandbox's /etc/resolv.conf. */
  readonly resolvConf: string;
  /** Packets the egress filter dropped for this sandbox, by kind. */
  counters(): Promise<EgressCounters>;
  /** Packets dropped for their destination (blocked ranges, host, inbound): the reported number. */
  blockedCount(): Promise<number>;
  /** The proxy ports its rules redirect to, when its egress goes through the proxy. */
  readonly proxy: ProxyPorts | null;
  /** Removes link, rules and namespace. Idempotent; safe to call concurrently. */
  teardown(): Promise<void>;
}

export interface CreateSandboxNetworkOptions {
  /** Unique per live sandbox; [A-Za-z0-9_-], 1..40 characters. */
  id: string;
  uplink: UplinkConfig;
  /** Default: the sandbox process runs inside the namespace. */
  attach?: SandboxAttach;
  /**
   * Egress through the allowlist proxy listening on these ports in the uplink namespace: DNS and
   * TCP 80/443 are redirected to it, everything else refused (decision 0008). Absent: open.
   */
  proxy?: ProxyPorts;
}

const ID = /^[A-Za-z0-9_-]{1,40}$/;

function checkTapName(name: string): void {
  if (!IFNAME.test(name) || name === "eth0" || name === "br0") {
    throw new TypeError(`tap name must match ${IFNAME} and be neither eth0 nor br0`);
  }
}

/** The tap, on the bridge, up: one `ip -batch` in the sandbox namespace. */
async function addTap(netns: string, tap: { name: string; uid?: number }): Promise<void> {
  const user = tap.uid === undefined ? "" : ` user ${tap.uid}`;
  await mustRun(
    inNetns(netns, "ip", ["-batch", "-"]),
    [
      `tuntap add dev ${tap.name} mode tap${user}`,
      `link set ${tap.name} master br0`,
      `link set ${tap.name} up`,
      "",
    ].join("\n"),
  );
}

/**
 * Gives a network made with attach "bridge" its tap (a VM's, whose uid was not known when the
 * network was made): the same network, attached as a tap. Throws if it was made otherwise.
 */
export async function attachTap(
  net: SandboxNetwork,
  tap: { name: string; uid?: number },
): Promise<SandboxNetwork> {
  if (net.attach.kind !== "bridge") throw new TypeError(`${net.netns} has no bridge for a tap`);
  checkTapName(tap.name);
  await addTap(net.netns, tap);
  return { ...net, attach: { kind: "tap", ...tap }, sandboxIfname: tap.name };
}
const IFNAME = /^[A-Za-z0-9_.-]{1,15}$/;

/** Slots reserved by this process per uplink, so concurrent creations never share one. */
const reserved = new Map<string, Set<number>>();

async function reserveSlot(u: UplinkConfig): Promise<number> {
  const key = uplinkKey(u);
  const mine = reserved.get(key) ?? new Set<number>();
  reserved.set(key, mine);
  const taken = new Set<number>(mine);
  const linkPrefix = `${u.prefix}h`;
  for (const name of await listUplinkLinks(u)) {
    const n = Number(name.slice(linkPrefix.length));
    if (name.startsWith(linkPrefix) && Number.isInteger(n)) taken.add(n);
  }
  const size = poolSize(u);
  for (let i = 0; i < size; i++) {
    if (!taken.has(i) && !mine.has(i)) {
      mine.add(i);
      return i;
    }
  }
  throw new ScratchRunError("BUSY", `all ${size} sandbox network slots are in use`, {
    fix: "raise uplink.poolV4 or run fewer concurrent public-network sandboxes",
  });
}

/**
 * Per uplink, its shared tables (nftables.ts, decision 0019): whether this process made them, how
 * many sandboxes' rules are in them, and the queue every change of them takes, so that the last
 * sandbox's removal (which removes the tables) and the next one's load (which makes them again)
 * never cross. Each change is one `nft -f` of a few ms.
 */
interface SharedTables {
  exists: boolean;
  users: number;
  queue: Promise<unknown>;
}
const sharedTables = new Map<string, SharedTables>();

function sharedOf(u: UplinkConfig): SharedTables {
  const key = uplinkKey(u);
  let s = sharedTables.get(key);
  if (!s) {
    s = { exists: false, users: 0, queue: Promise.resolve() };
    sharedTables.set(key, s);
  }
  return s;
}

function queued<T>(s: SharedTables, f: () => Promise<T>): Promise<T> {
  const run = s.queue.then(f, f);
  s.queue = run.catch(() => undefined);
  return run;
}

/**
 * Per uplink, its networks' counter reads, shared: `nft -j list counters` reads every counter of
 * the namespace whatever it is asked (one counter by name costs as much), ~60 ms with 128
 * networks present and more under load (decision 0019), so calls ending together paid one each.
 * One read runs at a time; a call asking while one runs gets the next, which starts after it
 * asked (so it counts every packet of that call's stopped sandbox), with every call asking
 * meanwhile: one read per read's time however many calls end.
 */
interface CounterReads {
  /** The read running now (settled: none). */
  running: Promise<unknown>;
  /** The read queued behind it, not yet started: the one a call asking now joins. */
  waiting: Promise<string> | null;
}
const counterReads = new Map<string, CounterReads>();

function readCounters(u: UplinkConfig): Promise<string> {
  const key = uplinkKey(u);
  let s = counterReads.get(key);
  if (!s) {
    s = { running: Promise.resolve(), waiting: null };
    counterReads.set(key, s);
  }
  const reads = s;
  if (reads.waiting) return reads.waiting;
  const read = reads.running.then(async () => {
    // Started: a call asking from now on may have stopped after this read began.
    reads.waiting = null;
    return (await runCommand(inNetns(u.netns, "nft", ["-j", "list", "counters"]))).stdout;
  });
  reads.waiting = read;
  reads.running = read.catch(() => undefined);
  return read;
}

/** Several sysctls of one namespace in one command (each a key of ours, each value too). */
function sysctls(
  ns: string | null,
  pairs: ReadonlyArray<readonly [string, string]>,
): Promise<string> {
  return mustRun(inNetns(ns, "sysctl", ["-qw", ...pairs.map(([k, v]) => `${k}=${v}`)]));
}

/**
 * ip commands in one namespace, in order, in one `ip -batch` (which stops at the first that
 * fails): a command each costs a process, most of a network's making when it had one each.
 * Every word is ours (names checked above, addresses computed), none the caller's.
 */
function ipBatch(ns: string | null, lines: readonly string[]): Promise<string> {
  return mustRun(inNetns(ns, "ip", ["-batch", "-"]), `${lines.join("\n")}\n`);
}

/**
 * Forwarding is on in the uplink namespace: a server turned it on at start (forwarding.ts), and
 * one that finds it turned off since turns it on again the same way, guard first, unless the
 * operator keeps forwarding (SCRATCHRUN_ENABLE_FORWARDING=0).
 */
async function ensureForwarding(u: UplinkConfig): Promise<void> {
  for (const key of forwardingKeys(u)) {
    if ((await readSysctl(u.netns, key)) === "1") continue;
    if (u.enableForwarding && (await prepareForwarding(u)).forwarding !== "off") return;
    throw new ScratchRunError("NOT_READY", `${key} is 0, so sandboxes cannot reach the network`, {
      fix: `set ${key}=1 on the host (or network: "none"), or unset SCRATCHRUN_ENABLE_FORWARDING=0`,
    });
  }
}

function ignoreMissing(e: unknown): void {
  const text = e instanceof CommandError ? e.result.stderr : "";
  if (/Cannot find device|No such file|does not exist|not found/i.test(text)) return;
  throw e;
}

/** Creates the network of one "public" sandbox. On failure nothing is left behind. */
export async function createSandboxNetwork(
  opts: CreateSandboxNetworkOptions,
): Promise<SandboxNetwork> {
  const u = opts.uplink;
  validateUplink(u);
  const attach = opts.attach ?? { kind: "process" };
  if (!ID.test(opts.id)) throw new TypeError(`sandbox network id must match ${ID}`);
  if (attach.kind === "tap") checkTapName(attach.name);
  const netns = `${u.prefix}${opts.id}`;
  // Its chains and counters in the shared tables are named `<table>.<name>`.
  const table = netns;
  const shared = sharedTableName(u.prefix);
  const tables = sharedOf(u);
  let objects: ReturnType<typeof sandboxObjects> | null = null;
  const slot = await reserveSlot(u);
  const hostIf = hostLinkName(u, slot);
  const addr = slotAddresses(u, slot);
  const key = uplinkKey(u);
  const live = liveNetworks(u);
  live.add(netns);
  markLiveLink(u, hostIf, true);
  // Watching the host's addresses and routes from before the first read of them.
  const watch = hostWatch(u);
  watch.acquire();
  const up = u.netns;
  const sbIf = attach.kind === "tap" ? attach.name : "eth0";
  // Marks this network's connections in the uplink's conntrack: replies pass to the sandbox only
  // on a connection it opened, never on one a previous network of this slot (its addresses) left.
  const connMark = (randomBytes(4).readUInt32BE(0) | 1) >>> 0;

  let done: Promise<void> | null = null;
  const teardown = (): Promise<void> => {
    done ??= (async () => {
      const errors: unknown[] = [];
      const step = async (f: () => Promise<unknown>): Promise<void> => {
        try {
          await f();
        } catch (e) {
          try {
            ignoreMissing(e);
          } catch (real) {
            errors.push(real);
          }
        }
      };
      await step(() => mustRun(inNetns(up, "ip", ["link", "del", hostIf])));
      const mine = objects;
      objects = null;
      if (mine) {
        await step(() =>
          queued(tables, async () => {
            tables.users -= 1;
            // The last sandbox's rules go with the tables: nothing of this uplink's is left.
            if (tables.users === 0) tables.exists = false;
            const script =
              tables.users === 0
                ? renderSharedTeardown(shared)
                : renderSandboxRulesRemoval(shared, mine);
            await mustRun(inNetns(up, "nft", ["-f", "-"]), script);
          }),
        );
      }
      await step(() => mustRun(inNetns(null, "ip", ["netns", "del", netns])));
      reserved.get(key)?.delete(slot);
      live.delete(netns);
      markLiveLink(u, hostIf, false);
      watch.release();
      if (errors.length > 0) {
        throw new ScratchRunError("SANDBOX_FAILED", `teardown of ${netns} incomplete`, {
          cause: errors[0],
          fix: "reapOrphanNetworks() removes what is left",
        });
      }
    })();
    return done;
  };

  try {
    await ensureForwarding(u);
    await mustRun(inNetns(null, "ip", ["netns", "add", netns]));
    // Before any link exists: no IPv6 chatter (router solicits, MLD) unless IPv6 is in use;
    // unprivileged ICMP echo sockets (ping without CAP_NET_RAW) for any group inside the jail.
    const v6 = addr.sandboxV6 !== null && attach.kind === "process" ? "0" : "1";
    await sysctls(netns, [
      ["net.ipv6.conf.all.disable_ipv6", v6],
      ["net.ipv6.conf.default.disable_ipv6", v6],
      ["net.ipv6.conf.default.accept_dad", "0"],
      ["net.ipv4.ping_group_range", "0 2147483647"],
    ]);
    await mustRun(
      inNetns(up, "ip", [
        "link",
        "add",
        hostIf,
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        netns,
      ]),
    );
    await sysctls(up, [
      // Usable at once (no DAD wait): the link has exactly two ends and we chose both addresses.
      ...(addr.gatewayV6
        ? ([
            [`net.ipv6.conf.${hostIf}.accept_dad`, "0"],
            [`net.ipv6.conf.${hostIf}.accept_ra`, "0"],
          ] as const)
        : []),
      [`net.ipv4.conf.${hostIf}.rp_filter`, "1"],
    ]);
    await ipBatch(up, [
      `addr add ${addr.gatewayV4}/30 dev ${hostIf}`,
      // An IPv6 address names its family: ip -batch takes no -6 before a command.
      ...(addr.gatewayV6 ? [`addr add ${addr.gatewayV6}/64 dev ${hostIf} nodad`] : []),
    ]);
    // The host's neighbourhood: as the watch knows it when nothing changed, else read now.
    const generation = watch.generation;
    const host = watch.cached() ?? (await readHostBlockSet(u));
    watch.noteRead(host, generation);
    const policy = {
      table,
      hostIfname: hostIf,
      sandboxV4: addr.sandboxV4,
      gatewayV4: addr.gatewayV4,
      sandboxV6: addr.sandboxV6,
      hostAddresses: host.addresses,
      hostNetworks: host.networks,
      dnsResolvers: u.dnsResolvers,
      blocked: BLOCKED_CIDRS,
      connMark,
      ...(opts.proxy ? { proxy: opts.proxy } : {}),
    };
    const rules = renderSandboxRules(policy, shared);
    // Rules before the link comes up: no frame passes unfiltered. The shared tables are made
    // with the first sandbox's rules, in the same transaction.
    await queued(tables, async () => {
      const head = tables.exists
        ? ""
        : renderSharedTables(shared, host.addresses, host.networks, BLOCKED_CIDRS);
      await mustRun(inNetns(up, "nft", ["-f", "-"]), head + rules);
      tables.exists = true;
      tables.users += 1;
      objects = sandboxObjects(policy);
    });
    // The host's network changed while these rules were made: refill them with what it is now.
    if (watch.generation !== generation) await watch.refresh(true);
    await mustRun(inNetns(up, "ip", ["link", "set", hostIf, "up"]));
    if (attach.kind === "process") {
      const v6 = addr.sandboxV6 && addr.gatewayV6;
      await ipBatch(netns, [
        "link set lo up",
        `addr add ${addr.sandboxV4}/30 dev eth0`,
        "link set eth0 up",
        `route add default via ${addr.gatewayV4}`,
        ...(v6
          ? [`addr add ${addr.sandboxV6}/64 dev eth0 nodad`, `route add ::/0 via ${addr.gatewayV6}`]
          : []),
      ]);
    } else {
      await ipBatch(netns, [
        "link set lo up",
        "link add br0 type bridge",
        "link set eth0 master br0",
        "link set eth0 up",
        "link set br0 up",
      ]);
      if (attach.kind === "tap") await addTap(netns, attach);
    }
  } catch (e) {
    await teardown().catch(() => undefined);
    if (e instanceof ScratchRunError) throw e;
    throw new ScratchRunError("SANDBOX_FAILED", `could not set up the network of ${netns}`, {
      cause: e,
      fix: "check that iproute2 and nftables are installed and the server runs as root",
    });
  }

  // This network's counters, `<table>.<name>` in the shared tables, from a `nft list counters`
  // shared with the other calls asking at the same time (readCounters).
  const counters = async (): Promise<EgressCounters> =>
    parseCounters(await readCounters(u), shared, `${table}.`);
  return {
    id: opts.id,
    mode: "public",
    netns,
    netnsPath: `/run/netns/${netns}`,
    attach,
    hostIfname: hostIf,
    sandboxIfname: attach.kind === "bridge" ? "br0" : sbIf,
    addresses: addr,
    resolvConf: resolvConf(u),
    counters,
    blockedCount: async () => (await counters()).blocked,
    proxy: opts.proxy ?? null,
    teardown,
  };
}
