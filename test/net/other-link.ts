/**
 * A link of the test host (a Topology's uplink namespace) that is not a sandbox's: a namespace
 * behind `ot0` on 198.18.99.0/24 (benchmarking space: no test host or sandbox pool uses it),
 * standing in for a VM bridge or a LAN the host routes. The router knows the way back, so its
 * traffic to a public test host is forwarded exactly when the uplink forwards it.
 */
import { inNetns, mustRun, runCommand } from "../../src/net/commands.js";
import { probe, PUBLIC, type Topology } from "./topology.js";

/** Docker's ruleset as iptables-nft writes it: FORWARD drops by policy, DOCKER-USER first. */
export const DOCKER = `table ip filter {
	chain DOCKER-USER {
		return
	}
	chain FORWARD {
		type filter hook forward priority filter; policy drop;
		jump DOCKER-USER
	}
}
`;
/** A host firewall ScratchRun does not open: a forward chain of its own that drops by policy. */
export const HOST_FIREWALL = `table inet hostfw {
	chain forward {
		type filter hook forward priority filter; policy drop;
	}
}
`;

const UPLINK_SIDE = "198.18.99.1";
export const OTHER_HOST = "198.18.99.2";

export class OtherLink {
  readonly ns: string;

  constructor(private readonly topo: Topology) {
    this.ns = topo.hostNs("ot");
  }

  async build(): Promise<this> {
    const ip = (ns: string, ...a: string[]) => mustRun(inNetns(ns, "ip", a));
    const up = this.topo.uplinkNs;
    await mustRun(["/usr/sbin/ip", "netns", "add", this.ns]);
    await ip(this.ns, "link", "set", "lo", "up");
    await ip(up, "link", "add", "ot0", "type", "veth", "peer", "name", "eth0", "netns", this.ns);
    await ip(up, "addr", "add", `${UPLINK_SIDE}/24`, "dev", "ot0");
    await ip(this.ns, "addr", "add", `${OTHER_HOST}/24`, "dev", "eth0");
    await ip(up, "link", "set", "ot0", "up");
    await ip(this.ns, "link", "set", "eth0", "up");
    await ip(this.ns, "route", "add", "default", "via", UPLINK_SIDE);
    await ip(this.topo.routerNs, "route", "add", "198.18.99.0/24", "via", "192.0.2.2");
    return this;
  }

  /** Whether a TCP connection from the other link to the public test host succeeds. */
  async reachesPublic(): Promise<{ ok: boolean; detail: string }> {
    const r = await probe(this.ns, [{ label: "tcp", kind: "tcp", host: PUBLIC }], {
      bwrap: false,
    });
    return r.tcp!;
  }

  async destroy(): Promise<void> {
    await runCommand(["/usr/sbin/ip", "netns", "del", this.ns]);
  }
}
