/**
 * Sandbox networks made before the calls that need them (issue 57, docs/decisions/0019): a few
 * complete networks (namespace, link, addresses, egress rules) per shape kept ready, so that a
 * cold sandbox's call takes one instead of running the ~17 commands that make one; and their
 * removal queued, so that a call's end runs one command (its link down) instead of three.
 *
 * The work that is not a call's runs one step at a time, after the calls: a step starts only
 * once no network was taken for `quietMs` (a burst's calls use the CPU first), unless more than
 * `maxPending` networks wait for removal. A network is used once: a slot's addresses come back
 * only after its namespace, link and chains are gone, and its successor is a new namespace with
 * new chains and counters whose conntrack mark differs (nftables.ts connMark): nothing of the last sandbox on
 * those addresses is left to the next.
 */
import { randomBytes } from "node:crypto";
import { inNetns, mustRun } from "./commands.js";
import type { ProxyPorts } from "./nftables-proxy.js";
import {
  attachTap,
  createSandboxNetwork,
  type SandboxAttach,
  type SandboxNetwork,
} from "./sandbox-net.js";
import type { UplinkConfig } from "./uplink.js";

export interface ReadyNetworksOptions {
  uplink: UplinkConfig;
  /** Networks kept ready per shape once a network of that shape was asked for; 0: none. */
  depth: number;
  /** Quiet time after the last take before background work runs (default 250 ms). */
  quietMs?: number;
  /** Removals waiting past this many run even while calls take networks (default 16). */
  maxPending?: number;
  /** A background step that failed (what is left, reapOrphanNetworks removes at the next start). */
  onError?: (e: unknown) => void;
}

/** What a network is made as before its use: a process's or a VM's (its tap added at take). */
interface Shape {
  bridge: boolean;
  proxy: ProxyPorts | null;
}

const keyOf = (s: Shape): string =>
  `${s.bridge ? "bridge" : "process"}/${s.proxy ? "proxied" : "open"}`;
const samePorts = (a: ProxyPorts | null, b: ProxyPorts | null): boolean =>
  JSON.stringify(a) === JSON.stringify(b);

export class ReadyNetworks {
  private readonly ready = new Map<string, { shape: Shape; nets: SandboxNetwork[] }>();
  /** Used networks whose link is down, waiting for removal. */
  private readonly pending: SandboxNetwork[] = [];
  private lastTake = 0;
  private timer: NodeJS.Timeout | null = null;
  private working: Promise<void> | null = null;
  private closed = false;
  private drained = false;
  private removing = 0;
  private readonly quietMs: number;
  private readonly maxPending: number;
  /** Counts for the tests and the benchmark: takes served ready, made cold, removals done. */
  readonly stats = { readyTakes: 0, coldTakes: 0, made: 0, removed: 0 };

  constructor(private readonly options: ReadyNetworksOptions) {
    if (!Number.isInteger(options.depth) || options.depth < 0)
      throw new TypeError("ready networks: depth must be a whole number ≥ 0");
    this.quietMs = options.quietMs ?? 250;
    this.maxPending = options.maxPending ?? 16;
  }

  /** Networks ready now, of every shape. */
  get readyCount(): number {
    let n = 0;
    for (const r of this.ready.values()) n += r.nets.length;
    return n;
  }

  /** Used networks not yet removed (waiting, or being removed now). */
  get pendingCount(): number {
    return this.pending.length + this.removing;
  }

  /**
   * A network for one sandbox: a ready one of its shape, else one made now. Its teardown() takes
   * its link down (nothing passes from then on) and queues the rest of its removal.
   */
  async take(opts: { attach?: SandboxAttach; proxy?: ProxyPorts }): Promise<SandboxNetwork> {
    if (this.closed) throw new Error("ready networks are closed");
    this.lastTake = Date.now();
    const attach = opts.attach ?? { kind: "process" };
    const shape: Shape = { bridge: attach.kind !== "process", proxy: opts.proxy ?? null };
    const entry = this.entry(shape);
    const ready = entry?.nets.shift();
    this.schedule();
    if (ready) {
      this.stats.readyTakes++;
      try {
        const net = attach.kind === "tap" ? await attachTap(ready, attach) : ready;
        return this.once(net);
      } catch (e) {
        this.retire(ready);
        throw e;
      }
    }
    this.stats.coldTakes++;
    return this.once(await this.make(attach, opts.proxy));
  }

  /** Takes every ready network down and waits for every removal. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.working;
    for (const { nets } of this.ready.values()) this.pending.push(...nets.splice(0));
    this.drained = true;
    await Promise.all(this.pending.splice(0).map((n) => this.remove(n)));
  }

  /** The shape's ready list (made and kept from now on), replacing one for other proxy ports. */
  private entry(shape: Shape): { shape: Shape; nets: SandboxNetwork[] } | null {
    if (this.options.depth === 0) return null;
    const key = keyOf(shape);
    const old = this.ready.get(key);
    if (old && samePorts(old.shape.proxy, shape.proxy)) return old;
    // A restarted proxy listens on other ports: networks made for the old ones go.
    if (old) for (const n of old.nets.splice(0)) this.retire(n);
    const fresh = { shape, nets: [] as SandboxNetwork[] };
    this.ready.set(key, fresh);
    return fresh;
  }

  private make(attach: SandboxAttach, proxy: ProxyPorts | undefined): Promise<SandboxNetwork> {
    return createSandboxNetwork({
      id: `n${randomBytes(5).toString("hex")}`,
      uplink: this.options.uplink,
      attach,
      ...(proxy ? { proxy } : {}),
    });
  }

  /** The network as a call gets it: teardown cuts its link now and queues the rest, once. */
  private once(net: SandboxNetwork): SandboxNetwork {
    let done: Promise<void> | null = null;
    const teardown = (): Promise<void> =>
      (done ??= (async () => {
        try {
          await mustRun(
            inNetns(this.options.uplink.netns, "ip", ["link", "set", net.hostIfname, "down"]),
          );
        } catch (e) {
          // Not cut: remove it all now rather than leave a link up.
          await net.teardown();
          throw e;
        }
        this.retire(net);
      })());
    return { ...net, teardown };
  }

  private retire(net: SandboxNetwork): void {
    // After close() has drained the queue (a call's network torn down after the server's close).
    if (this.drained) {
      void this.remove(net);
      return;
    }
    this.pending.push(net);
    this.schedule();
  }

  private async remove(net: SandboxNetwork): Promise<void> {
    this.removing++;
    try {
      await net.teardown();
      this.stats.removed++;
    } catch (e) {
      this.options.onError?.(e);
    } finally {
      this.removing--;
    }
  }

  private schedule(delayMs = this.quietMs): void {
    if (this.closed || this.timer || this.working) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.working = this.work().finally(() => {
        this.working = null;
      });
    }, delayMs);
    this.timer.unref();
  }

  /** Background steps, one at a time, while there is work and no call has just taken a network. */
  private async work(): Promise<void> {
    while (!this.closed) {
      const quietFor = Date.now() - this.lastTake;
      if (quietFor < this.quietMs && this.pending.length <= this.maxPending) {
        this.working = null;
        this.schedule(this.quietMs - quietFor);
        return;
      }
      const dead = this.pending.shift();
      if (dead) {
        await this.remove(dead);
        continue;
      }
      const short = [...this.ready.values()].find((r) => r.nets.length < this.options.depth);
      if (!short) return;
      try {
        const { bridge, proxy } = short.shape;
        const net = await this.make(
          bridge ? { kind: "bridge" } : { kind: "process" },
          proxy ?? undefined,
        );
        this.stats.made++;
        if (this.closed || this.ready.get(keyOf(short.shape)) !== short) this.retire(net);
        else short.nets.push(net);
      } catch (e) {
        this.options.onError?.(e);
        // A host that cannot make one now: try again after a pause, not in a loop.
        this.working = null;
        this.schedule(5_000);
        return;
      }
    }
  }
}
