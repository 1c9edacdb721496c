/**
 * A host LAN on public address space, added to a built Topology: the uplink's link to the router
 * becomes one port of a bridge in the router namespace, and a neighbour namespace hangs off the
 * same bridge. The uplink ("the host") then has public on-link subnets with a neighbour and a
 * gateway in them, which the blocked ranges do not cover:
 *
 *   - 192.0.2.0/24 and 2001:db8:ffff::/64 (the uplink's own addresses' subnets), gateway
 *     192.0.2.1 / 2001:db8:ffff::1 (the router), neighbour .50 / ::50;
 *   - 203.0.113.128/25, on-link by a device route only (no address of the host in it),
 *     neighbour 203.0.113.200;
 *   - 203.0.113.64/27, which becomes on-link when a test adds LATE_UPLINK to the uplink
 *     (neighbour 203.0.113.70 already has its address).
 *
 * Echo servers run in the neighbour and router namespaces. Nothing touches the root namespace.
 */
import { inNetns, mustRun, runCommand } from "../../src/net/commands.js";
import type { Topology } from "./topology.js";

export const GATEWAY = "192.0.2.1";
export const GATEWAY6 = "2001:db8:ffff::1";
export const NEIGHBOUR = "192.0.2.50";
export const NEIGHBOUR6 = "2001:db8:ffff::50";
export const ROUTE_ONLY = "203.0.113.128/25";
export const ROUTE_NEIGHBOUR = "203.0.113.200";
export const LATE_UPLINK = "203.0.113.65/27";
export const LATE_NEIGHBOUR = "203.0.113.70";

const ip = (ns: string, ...args: string[]) => mustRun(inNetns(ns, "ip", args));

export class Lan {
  readonly ns: string;
  private echoes: Array<{ stop: () => Promise<void> }> = [];

  constructor(readonly topo: Topology) {
    this.ns = topo.hostNs("nb");
  }

  async build(): Promise<this> {
    const rt = this.topo.routerNs;
    // No multicast snooping: neighbour discovery is flooded from the first packet on.
    await ip(rt, "link", "add", "br-lan", "type", "bridge", "mcast_snooping", "0");
    await ip(rt, "addr", "flush", "dev", "rt-up");
    await ip(rt, "link", "set", "rt-up", "master", "br-lan");
    await ip(rt, "addr", "add", `${GATEWAY}/24`, "dev", "br-lan");
    await ip(rt, "-6", "addr", "add", `${GATEWAY6}/64`, "dev", "br-lan", "nodad");
    await mustRun(["/usr/sbin/ip", "netns", "add", this.ns]);
    await ip(this.ns, "link", "set", "lo", "up");
    for (const kv of [
      "net.ipv6.conf.all.accept_dad=0",
      "net.ipv6.conf.default.accept_dad=0",
      "net.ipv4.ping_group_range=0 2147483647",
    ])
      await mustRun(inNetns(this.ns, "sysctl", ["-qw", kv]));
    await ip(rt, "link", "add", "nb0", "type", "veth", "peer", "name", "eth0", "netns", this.ns);
    await ip(rt, "link", "set", "nb0", "master", "br-lan");
    for (const a of [`${NEIGHBOUR}/24`, "203.0.113.200/25", "203.0.113.70/27"])
      await ip(this.ns, "addr", "add", a, "dev", "eth0");
    await ip(this.ns, "-6", "addr", "add", `${NEIGHBOUR6}/64`, "dev", "eth0", "nodad");
    await ip(this.ns, "link", "set", "eth0", "up");
    await ip(rt, "link", "set", "nb0", "up");
    await ip(rt, "link", "set", "br-lan", "up");
    await ip(this.ns, "route", "add", "default", "via", GATEWAY);
    await ip(this.ns, "-6", "route", "add", "default", "via", GATEWAY6);
    // On-link for the host by a route alone: the kernel ARPs for it on up0.
    await ip(this.topo.uplinkNs, "route", "add", ROUTE_ONLY, "dev", "up0");
    for (const ns of [this.ns, rt]) {
      const echo = this.topo.startEchoIn(ns);
      this.echoes.push(echo);
      await echo.ready;
    }
    return this;
  }

  /** The LATE subnet becomes on-link for the host (while sandboxes are live). */
  async addLateSubnet(): Promise<void> {
    await ip(this.topo.uplinkNs, "addr", "add", LATE_UPLINK, "dev", "up0");
  }

  /** What the neighbour's echo server has logged. */
  log(): string {
    return this.topo.log(this.ns);
  }

  gatewayLog(): string {
    return this.topo.log(this.topo.routerNs);
  }

  async destroy(): Promise<void> {
    await Promise.all(this.echoes.map((e) => e.stop()));
    await runCommand(["/usr/sbin/ip", "netns", "del", this.ns]);
  }
}
