/**
 * A private internet in network namespaces, built per test: an "uplink" namespace standing in for
 * the host (its only link goes to the router, so it has no route to the machine's real
 * interfaces), a router namespace, and one namespace per test host, each running the echo server.
 * Nothing is configured in the root namespace; destroy() removes every namespace and process.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { inNetns, mustRun, runCommand } from "../../src/net/commands.js";
import { uplinkConfig, type UplinkConfig } from "../../src/net/uplink.js";

import { listSandboxNetworkResources } from "../../src/net/resources.js";

export const REPO = fileURLToPath(new URL("../../../", import.meta.url));
const ECHO = fileURLToPath(new URL("./fixtures/echo-server.js", import.meta.url));
export const PROBE = `${REPO}test/net/fixtures/probe.py`;
export const RAW_FRAMES = `${REPO}test/net/fixtures/raw-frames.py`;

interface HostSpec {
  name: string;
  /** [host address/len, router address/len] pairs, one per subnet ("" router: extra address). */
  nets: Array<[string, string]>;
  dns?: Record<string, string>;
}

export const PUBLIC = "198.51.100.10";
export const PUBLIC2 = "203.0.113.10";
export const PUBLIC6 = "2001:db8:1::10";
export const RESOLVER = "198.51.100.53";
export const UPLINK_ADDR = "192.0.2.2";
export const UPLINK_ADDR6 = "2001:db8:ffff::2";
/** Test hosts on blocked addresses, all reachable from the uplink namespace itself (control). */
export const BLOCKED_HOSTS: Record<string, string> = {
  private10: "10.1.0.10",
  private172: "172.16.0.10",
  private192: "192.168.0.10",
  metadata: "169.254.169.254",
  cgnat: "100.64.0.10",
  ula: "fd00:10::10",
};
export const DNS_TABLE = {
  "public.test": PUBLIC,
  "private.test": "10.1.0.10",
  // The egress allowlist's tests (web.ts): names on and off a test allowlist.
  "allowed.test": PUBLIC,
  "refused.test": PUBLIC2,
  "inward.test": "10.1.0.10",
  "uplink.test": UPLINK_ADDR,
  "a.wild.test": PUBLIC,
  "deep.b.wild.test": PUBLIC,
  "wild.test": PUBLIC2,
  // The egress proxy's bypass tests (test/security/egress-bypass.test.ts): an allowed name on the
  // metadata address, and one that rebinds between a public and a private address (TTL 0).
  "meta.test": "169.254.169.254",
  "rebind.test": `${PUBLIC}|10.1.0.10`,
};

const HOSTS: HostSpec[] = [
  {
    name: "pub",
    nets: [
      ["198.51.100.10/24", "198.51.100.1/24"],
      ["198.51.100.53/24", ""], // the DNS resolver, a second address on the same subnet
      ["2001:db8:1::10/64", "2001:db8:1::1/64"],
    ],
    dns: DNS_TABLE,
  },
  { name: "pub2", nets: [["203.0.113.10/24", "203.0.113.1/24"]] },
  { name: "p10", nets: [["10.1.0.10/24", "10.1.0.1/24"]] },
  { name: "p172", nets: [["172.16.0.10/24", "172.16.0.1/24"]] },
  { name: "p192", nets: [["192.168.0.10/24", "192.168.0.1/24"]] },
  { name: "meta", nets: [["169.254.169.254/24", "169.254.169.1/24"]] },
  { name: "cgnat", nets: [["100.64.0.10/24", "100.64.0.1/24"]] },
  { name: "ula", nets: [["fd00:10::10/64", "fd00:10::1/64"]] },
];

const ip = (ns: string, ...args: string[]): Promise<string> => mustRun(inNetns(ns, "ip", args));
const sysctl = (ns: string, kv: string): Promise<string> =>
  mustRun(inNetns(ns, "sysctl", ["-qw", kv]));

function addrArgs(cidr: string, dev: string): string[] {
  return cidr.includes(":")
    ? ["-6", "addr", "add", cidr, "dev", dev, "nodad"]
    : ["addr", "add", cidr, "dev", dev];
}

export class Topology {
  readonly tag = randomBytes(2).toString("hex");
  readonly uplinkNs = `srt${this.tag}-up`;
  readonly routerNs = `srt${this.tag}-rt`;
  readonly uplink: UplinkConfig;
  private readonly namespaces: string[] = [];
  private readonly children: ChildProcess[] = [];
  private readonly logs = new Map<string, string>();

  constructor() {
    this.uplink = uplinkConfig({
      netns: this.uplinkNs,
      prefix: `s${this.tag}-`,
      poolV6: "fd5c:5252:aaaa::/48",
      dnsResolvers: [RESOLVER],
      enableForwarding: true,
    });
  }

  hostNs(name: string): string {
    return `srt${this.tag}-${name}`;
  }

  /** Everything the echo server of `name` ("uplink" or a host name) has logged so far. */
  log(name: string): string {
    return this.logs.get(name) ?? "";
  }

  private async addNs(name: string): Promise<void> {
    await mustRun(["/usr/sbin/ip", "netns", "add", name]);
    this.namespaces.push(name);
    await ip(name, "link", "set", "lo", "up");
    // No duplicate address detection: addresses are usable at once, so the first probe is not lost.
    await sysctl(name, "net.ipv6.conf.all.accept_dad=0");
    await sysctl(name, "net.ipv6.conf.default.accept_dad=0");
    await sysctl(name, "net.ipv4.ping_group_range=0 2147483647");
  }

  async build(): Promise<this> {
    await this.addNs(this.uplinkNs);
    await this.addNs(this.routerNs);
    await sysctl(this.routerNs, "net.ipv4.ip_forward=1");
    await sysctl(this.routerNs, "net.ipv6.conf.all.forwarding=1");
    await ip(
      this.uplinkNs,
      "link",
      "add",
      "up0",
      "type",
      "veth",
      "peer",
      "name",
      "rt-up",
      "netns",
      this.routerNs,
    );
    await ip(this.uplinkNs, ...addrArgs(`${UPLINK_ADDR}/24`, "up0"));
    await ip(this.uplinkNs, ...addrArgs(`${UPLINK_ADDR6}/64`, "up0"));
    await ip(this.routerNs, ...addrArgs("192.0.2.1/24", "rt-up"));
    await ip(this.routerNs, ...addrArgs("2001:db8:ffff::1/64", "rt-up"));
    await ip(this.uplinkNs, "link", "set", "up0", "up");
    await ip(this.routerNs, "link", "set", "rt-up", "up");
    await ip(this.uplinkNs, "route", "add", "default", "via", "192.0.2.1");
    await ip(this.uplinkNs, "-6", "route", "add", "default", "via", "2001:db8:ffff::1");
    for (const [i, h] of HOSTS.entries()) {
      const ns = this.hostNs(h.name);
      await this.addNs(ns);
      await ip(
        this.routerNs,
        "link",
        "add",
        `h${i}`,
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        ns,
      );
      for (const [hostAddr, routerAddr] of h.nets) {
        await ip(ns, ...addrArgs(hostAddr, "eth0"));
        if (routerAddr) await ip(this.routerNs, ...addrArgs(routerAddr, `h${i}`));
      }
      await ip(ns, "link", "set", "eth0", "up");
      await ip(this.routerNs, "link", "set", `h${i}`, "up");
      for (const [, routerAddr] of h.nets) {
        if (!routerAddr) continue;
        const gw = routerAddr.split("/")[0] as string;
        await ip(ns, ...(gw.includes(":") ? ["-6"] : []), "route", "add", "default", "via", gw);
      }
      await this.startEcho(h.name, ns, h.dns);
    }
    await this.startEcho("uplink", this.uplinkNs);
    await this.settle();
    return this;
  }

  /**
   * Waits until every host answers a ping from the uplink. A veth's carrier reaches IPv6 through
   * the kernel's link watch (up to a second later), and until then a host has not joined its
   * solicited-node group: the router's first neighbour solicitation is lost and the next comes a
   * second later, after a 1 s probe has given up. Nothing is asserted here: the tests' own
   * controls do that on a settled topology.
   */
  private async settle(): Promise<void> {
    const hosts = HOSTS.flatMap((h) =>
      h.nets.map(([hostAddr]) => hostAddr.split("/")[0] as string),
    );
    const checks: Check[] = hosts.map((host) => ({ label: host, kind: "icmp", host }));
    for (let i = 0; i < 10; i++) {
      const res = await probe(this.uplinkNs, checks, { bwrap: false });
      if (Object.values(res).every((r) => r.ok)) return;
    }
  }

  private async startEcho(name: string, ns: string, dns?: Record<string, string>): Promise<void> {
    await this.spawnEcho(name, ns, dns).ready;
  }

  /** An extra echo server in any namespace (e.g. a sandbox's), stopped by the caller. */
  startEchoIn(ns: string): { ready: Promise<void>; stop: () => Promise<void> } {
    return this.spawnEcho(ns, ns);
  }

  private spawnEcho(
    name: string,
    ns: string,
    dns?: Record<string, string>,
  ): { ready: Promise<void>; stop: () => Promise<void> } {
    const args = [
      "netns",
      "exec",
      ns,
      process.execPath,
      ECHO,
      ...(dns ? [JSON.stringify(dns), RESOLVER] : []),
    ];
    const child = spawn("/usr/sbin/ip", args, { stdio: ["ignore", "pipe", "inherit"] });
    this.children.push(child);
    this.logs.set(name, "");
    const ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`echo server ${name} not ready`)), 10_000);
      child.stdout?.on("data", (d: Buffer) => {
        this.logs.set(name, this.log(name) + d.toString("utf8"));
        if (this.log(name).includes("ready\n")) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.on("exit", () => {
        clearTimeout(timer);
        reject(new Error(`echo server ${name} exited`));
      });
    });
    ready.catch(() => undefined);
    return { ready, stop: () => stopChild(child) };
  }

  /** Log lengths now, to look only at what arrives after. */
  mark(): Map<string, number> {
    return new Map([...this.logs].map(([k, v]) => [k, v.length]));
  }

  logSince(mark: Map<string, number>, name: string): string {
    return this.log(name).slice(mark.get(name) ?? 0);
  }

  /** Waits (bounded) until the echo server of `name` logged `text`; throws if it never does. */
  async waitForLog(name: string, text: string, timeoutMs = 5000): Promise<void> {
    for (let waited = 0; !this.log(name).includes(text); waited += 50) {
      if (waited >= timeoutMs) throw new Error(`${name} never logged ${text}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** What a server needs to take this topology's uplink for network "public". */
  serverEnv(): Record<string, string> {
    return {
      SCRATCHRUN_UPLINK_NETNS: this.uplinkNs,
      SCRATCHRUN_NET_PREFIX: this.uplink.prefix,
      SCRATCHRUN_DNS: RESOLVER,
      SCRATCHRUN_ENABLE_FORWARDING: "1",
    };
  }

  /** The sandbox networks still on this uplink once they had up to 10 s to go. */
  async networksLeft(): Promise<Awaited<ReturnType<typeof listSandboxNetworkResources>>> {
    let left = await listSandboxNetworkResources(this.uplink);
    for (
      let i = 0;
      i < 100 && (left.netns.length || left.links.length || left.tables.length);
      i++
    ) {
      await new Promise((r) => setTimeout(r, 100));
      left = await listSandboxNetworkResources(this.uplink);
    }
    return left;
  }

  async destroy(): Promise<void> {
    await Promise.all(this.children.map(stopChild));
    for (const ns of this.namespaces.reverse()) {
      await runCommand(["/usr/sbin/ip", "netns", "del", ns]);
    }
  }

  /** Namespaces of this topology still present (for the leak check). */
  async leftovers(): Promise<string[]> {
    const out = await runCommand(["/usr/sbin/ip", "netns", "list"]);
    return out.stdout
      .split("\n")
      .map((l) => l.split(" ")[0] ?? "")
      .filter((n) => n.startsWith(`srt${this.tag}-`) || n.startsWith(this.uplink.prefix));
  }
}

function stopChild(c: ChildProcess): Promise<void> {
  return new Promise<void>((resolve) => {
    if (c.exitCode !== null || c.signalCode !== null) return resolve();
    c.once("exit", () => resolve());
    c.kill("SIGTERM");
  });
}

export type Check =
  | { label: string; kind: "tcp" | "icmp" | "resolve"; host: string; port?: number }
  /** connect: a connected UDP socket, which is told of an ICMP refusal (unconnected: a timeout). */
  | { label: string; kind: "udp"; host: string; port?: number; connect?: boolean }
  /** probe.py's web checks (the egress allowlist): see its docstring. */
  | {
      label: string;
      kind: "https";
      host: string;
      port?: number;
      sni?: string | null;
      hostHeader?: string;
    }
  | { label: string; kind: "http"; host: string; port?: number; hostHeader?: string }
  | { label: string; kind: "dnsq"; server: string; name: string; tcp?: boolean }
  | {
      label: string;
      kind: "raw";
      host: string;
      port: number;
      hex: string;
      /** Sent as separate TCP segments gap_ms apart instead of hex. */
      parts?: string[];
      gap_ms?: number;
      /** The reply as text (after the head, for HTTP) instead of hex. */
      text?: boolean;
    };

export type ProbeResult = Record<string, { ok: boolean; detail: string }>;

/** Runs probe.py in `ns` under bwrap (--share-net unless network "none"), bounded. */
export async function probe(
  ns: string,
  checks: Check[],
  opts: { shareNet?: boolean; resolvConfPath?: string; bwrap?: boolean } = {},
): Promise<ProbeResult> {
  const jail =
    opts.bwrap === false
      ? []
      : [
          "/usr/bin/bwrap",
          "--unshare-all",
          ...(opts.shareNet === false ? [] : ["--share-net"]),
          "--die-with-parent",
          "--ro-bind",
          "/",
          "/",
          "--proc",
          "/proc",
          "--dev",
          "/dev",
          "--tmpfs",
          "/tmp",
          // The checkout may itself live under /tmp: keep the probe scripts visible.
          "--ro-bind",
          dirname(PROBE),
          dirname(PROBE),
          ...(opts.resolvConfPath ? ["--ro-bind", opts.resolvConfPath, "/etc/resolv.conf"] : []),
        ];
  const argv = [
    "/usr/sbin/ip",
    "netns",
    "exec",
    ns,
    ...jail,
    "/usr/bin/python3.11",
    PROBE,
    JSON.stringify(checks),
  ];
  const res = await runCommand(argv, undefined, 20_000);
  if (res.code !== 0) throw new Error(`probe failed (${res.code}): ${res.stderr}`);
  return JSON.parse(res.stdout) as ProbeResult;
}

/**
 * probe.py as one program the tool can run (`code`), with its checks built in; `timeoutS` per
 * check instead of 1 s (a TLS handshake in a guest under TCG takes longer).
 */
export function probeProgram(checks: Check[], timeoutS = 1): string {
  const source = readFileSync(PROBE, "utf8").replace(/^TIMEOUT = 1\.0$/m, `TIMEOUT = ${timeoutS}`);
  return `import sys\nsys.argv = ['probe', ${JSON.stringify(JSON.stringify(checks))}]\n${source}`;
}
