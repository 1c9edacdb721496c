/**
 * The host's neighbourhood (host-block.ts) for one uplink, read when a sandbox network is made
 * and kept current in the host sets every live sandbox's chains use (the uplink's shared table,
 * decision 0019): while sandboxes of the uplink exist, an
 * `ip monitor address route nexthop` in the uplink namespace reports changes, and each change
 * (debounced) re-reads the host's addresses and routes and, when the block set moved, refills
 * the shared table's host sets in one `nft -f`. Changes on the sandboxes' own
 * links are not the host's neighbourhood and are ignored.
 *
 * Cost on the path that makes a sandbox network: nothing while the watch has the set current
 * (nothing changed since it was read, the monitor listening throughout), else one `ip -batch` (it
 * replaced the `ip addr show` that read the host's addresses before).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { inNetns, mustRun, runCommand } from "./commands.js";
import {
  HOST_NETWORK_BATCH,
  hostBlockSet,
  parseHostNetwork,
  type HostBlockSet,
} from "./host-block.js";
import { renderHostSetUpdate, sharedTableName } from "./nftables.js";
import { liveNetworks, uplinkKey } from "./resources.js";
import type { UplinkConfig } from "./uplink.js";

/** Reads the uplink namespace's addresses and routes into its block set (one `ip` run). */
export async function readHostBlockSet(u: UplinkConfig): Promise<HostBlockSet> {
  // -force: an old kernel without nexthop objects fails that one command, not the batch.
  const res = await runCommand(
    inNetns(u.netns, "ip", ["-j", "-force", "-batch", "-"]),
    HOST_NETWORK_BATCH,
  );
  return hostBlockSet(parseHostNetwork(res.stdout), {
    ignoreLinkPrefix: `${u.prefix}h`,
    pools: [u.poolV4, ...(u.poolV6 ? [u.poolV6] : [])],
  });
}

/** How long a burst of changes is collected before the re-read. */
const DEBOUNCE_MS = 100;
/** A re-read this long after the monitor starts covers changes made before it subscribed. */
const SETTLE_MS = 250;

const same = (a: HostBlockSet | null, b: HostBlockSet) =>
  a !== null && JSON.stringify(a) === JSON.stringify(b);

export class HostWatch {
  /** Bumped on every change the monitor reports (before the re-read runs). */
  generation = 0;
  /** Refreshes that refilled the live tables (for tests and diagnostics). */
  refreshes = 0;
  private users = 0;
  private monitor: ChildProcess | null = null;
  private timer: NodeJS.Timeout | null = null;
  private settleTimer: NodeJS.Timeout | null = null;
  /** The last set read, and the generation it was read at. */
  private current: { set: HostBlockSet; generation: number } | null = null;
  /** The first re-read after the monitor started has run: from then on it misses nothing. */
  private settled = false;
  private refreshing: Promise<void> = Promise.resolve();
  /** Told the new set after every refill of the live tables (e.g. the egress proxy's guard). */
  private readonly listeners = new Set<(set: HostBlockSet) => Promise<void>>();

  constructor(private readonly u: UplinkConfig) {}

  /** A sandbox network of this uplink starts living: watch while any does. */
  acquire(): void {
    this.users += 1;
    if (this.users === 1) this.start();
  }

  release(): void {
    this.users = Math.max(0, this.users - 1);
    if (this.users === 0) this.stop();
  }

  /**
   * The set as last read, while nothing changed since and the monitor was listening the whole
   * time; otherwise null (read it). Spares a new sandbox the `ip` run in the steady state.
   */
  cached(): HostBlockSet | null {
    const c = this.current;
    if (!this.settled || !this.monitor || !c || c.generation !== this.generation) return null;
    return c.set;
  }

  /** What a new sandbox was given, read at `generation`. */
  noteRead(set: HostBlockSet, generation: number): void {
    if (!this.current || generation > this.current.generation) this.current = { set, generation };
  }

  /** Calls `listener` with the set whenever the live tables are refilled; returns the unsubscribe. */
  subscribe(listener: (set: HostBlockSet) => Promise<void>): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Re-reads and refills every live table when the set moved (or always, when `force`). */
  refresh(force = false): Promise<void> {
    this.refreshing = this.refreshing.then(async () => {
      const generation = this.generation;
      const set = await readHostBlockSet(this.u).catch(() => null);
      if (!set) return;
      const moved = !same(this.current?.set ?? null, set);
      this.current = { set, generation };
      if (!force && !moved) return;
      this.refreshes += 1;
      // The sandboxes' host sets are the shared table's, one refill for all (decision 0019).
      for (const table of liveNetworks(this.u).size > 0 ? [sharedTableName(this.u.prefix)] : []) {
        const script = renderHostSetUpdate(table, set.addresses, set.networks);
        // A table torn down meanwhile has nothing to update.
        await mustRun(inNetns(this.u.netns, "nft", ["-f", "-"]), script).catch(() => undefined);
      }
      for (const listener of this.listeners) await listener(set).catch(() => undefined);
    });
    return this.refreshing;
  }

  private start(): void {
    this.settled = false;
    // setpriv --pdeathsig: the monitor ends with the server, even one that is killed.
    const argv = [
      "/usr/bin/setpriv",
      "--pdeathsig",
      "TERM",
      ...inNetns(this.u.netns, "ip", ["monitor", "address", "route", "nexthop"]),
    ];
    const child = spawn(argv[0] as string, argv.slice(1), { stdio: ["ignore", "pipe", "ignore"] });
    this.monitor = child;
    // Never what keeps the server's process alive.
    child.unref();
    (child.stdout as unknown as { unref?: () => void } | null)?.unref?.();
    // A sandbox link's own events: "5: sr-h0    inet ...", "Deleted 5: sr-h0 ...", "... dev sr-h0 ...".
    const own = new RegExp(`(^(Deleted )?\\d+: |\\bdev )${this.u.prefix}h\\d+\\b`);
    let partial = "";
    child.stdout?.on("data", (d: Buffer) => {
      const lines = (partial + d.toString("utf8")).split("\n");
      partial = lines.pop() ?? "";
      // Continuation lines (indented) belong to the event above them.
      const events = lines.filter((l) => l !== "" && !/^\s/.test(l));
      if (events.some((l) => !own.test(l))) this.changed();
    });
    child.on("exit", () => {
      if (this.monitor !== child) return;
      this.monitor = null;
      this.settled = false;
      // Died while still needed: start again (its first re-read covers what it missed).
      if (this.users > 0)
        setTimeout(() => this.users > 0 && !this.monitor && this.start(), 1000).unref();
    });
    child.on("error", () => undefined);
    // Changes between a read and the subscription: one re-read once it surely listens.
    this.settleTimer = setTimeout(() => {
      void this.refresh().then(() => {
        if (this.monitor === child) this.settled = true;
      });
    }, SETTLE_MS);
    this.settleTimer.unref();
  }

  private changed(): void {
    this.generation += 1;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.refresh(), DEBOUNCE_MS);
    this.timer.unref();
  }

  private stop(): void {
    for (const t of [this.timer, this.settleTimer]) if (t) clearTimeout(t);
    this.timer = null;
    this.settleTimer = null;
    const m = this.monitor;
    this.monitor = null;
    this.current = null;
    this.settled = false;
    m?.kill("SIGTERM");
  }
}

const watches = new Map<string, HostWatch>();

/** The watch of one uplink (one per uplink and process). */
export function hostWatch(u: UplinkConfig): HostWatch {
  const key = uplinkKey(u);
  let w = watches.get(key);
  if (!w) {
    w = new HostWatch(u);
    watches.set(key, w);
  }
  return w;
}
