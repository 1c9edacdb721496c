/**
 * Egress from inside real sandboxes (netns + bwrap) in a private test internet (see topology.ts).
 * Every negative result is paired with a control showing the same target IS reachable without the
 * filter, so these tests fail if the filter stops filtering. No packet leaves the test namespaces.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, afterEach, before, describe, it } from "node:test";
import { inNetns, mustRun } from "../../src/net/commands.js";
import { listSandboxNetworkResources, reapOrphanNetworks } from "../../src/net/resources.js";
import { createSandboxNetwork, type SandboxNetwork } from "../../src/net/sandbox-net.js";
import { resolvConf } from "../../src/net/uplink.js";
import {
  BLOCKED_HOSTS,
  PUBLIC,
  PUBLIC2,
  PUBLIC6,
  RAW_FRAMES,
  Topology,
  UPLINK_ADDR,
  UPLINK_ADDR6,
  probe,
  type Check,
} from "./topology.js";

const KINDS = ["tcp", "udp", "icmp"] as const;
const checksFor = (prefix: string, host: string): Check[] =>
  KINDS.map((kind) => ({ label: `${prefix}/${kind}`, kind, host }));

function reachable(res: Record<string, { ok: boolean; detail: string }>): string[] {
  return Object.entries(res)
    .filter(([, r]) => r.ok)
    .map(([label, r]) => `${label} (${r.detail})`);
}

describe("sandbox network egress (real namespaces)", { timeout: 180_000 }, () => {
  let topo: Topology;
  const nets: SandboxNetwork[] = [];
  let seq = 0;
  const newNet = async (attach?: { kind: "tap"; name: string }): Promise<SandboxNetwork> => {
    seq += 1;
    const net = await createSandboxNetwork({
      id: `t${seq}`,
      uplink: topo.uplink,
      ...(attach ? { attach } : {}),
    });
    nets.push(net);
    return net;
  };

  before(async () => {
    topo = new Topology();
    try {
      await topo.build();
    } catch (e) {
      await topo.destroy();
      throw e;
    }
  });

  afterEach(async () => {
    for (const n of nets.splice(0)) await n.teardown();
    const left = await listSandboxNetworkResources(topo.uplink);
    assert.deepEqual(
      left,
      { netns: [], links: [], tables: [] },
      "sandbox network resources leaked",
    );
  });

  after(async () => {
    await topo.destroy();
    assert.deepEqual(await topo.leftovers(), [], "test namespaces leaked");
  });

  it("control: from the uplink itself (no filter) every test host answers on every protocol", async () => {
    const checks = [
      ...checksFor("public", PUBLIC),
      ...checksFor("public6", PUBLIC6),
      ...Object.entries(BLOCKED_HOSTS).flatMap(([name, host]) => checksFor(name, host)),
    ];
    const res = await probe(topo.uplinkNs, checks, { bwrap: false });
    const down = Object.entries(res).filter(([, r]) => !r.ok);
    assert.deepEqual(down, [], "topology broken: the filter tests below would prove nothing");
  });

  it("public hosts are reachable over TCP, UDP and ICMP, v4 and v6", async () => {
    const net = await newNet();
    const res = await probe(net.netns, [
      ...checksFor("public", PUBLIC),
      ...checksFor("public2", PUBLIC2),
      ...checksFor("public6", PUBLIC6),
    ]);
    const down = Object.entries(res).filter(([, r]) => !r.ok);
    assert.deepEqual(down, []);
  });

  it("every blocked host is unreachable by every protocol, and the drops are counted", async () => {
    const net = await newNet();
    const before = await net.blockedCount();
    const mark = topo.mark();
    const checks = Object.entries(BLOCKED_HOSTS).flatMap(([name, host]) => checksFor(name, host));
    const res = await probe(net.netns, checks);
    assert.equal(Object.keys(res).length, checks.length);
    assert.deepEqual(reachable(res), []);
    for (const name of Object.keys(BLOCKED_HOSTS)) {
      assert.doesNotMatch(
        topo.logSince(mark, name),
        /scratchrun-probe/,
        `${name} received a probe`,
      );
    }
    const after = await net.blockedCount();
    assert.ok(after - before >= checks.length, `blocked counter ${before} -> ${after}`);
  });

  it("numeric tricks and IPv6 embeddings of blocked addresses are unreachable", async () => {
    const net = await newNet();
    const forms = [
      "2852039166", // 169.254.169.254 as one number
      "0xa9.0xfe.0xa9.0xfe",
      "0251.0376.0251.0376",
      "169.254.43518",
      "0xa9fea9fe",
      "10.1.10", // 10.1.0.10
      "167837706", // 10.1.0.10
      "::ffff:169.254.169.254",
      "::ffff:a9fe:a9fe",
      "::ffff:10.1.0.10",
      "64:ff9b::a9fe:a9fe",
      "2130706433", // 127.0.0.1: the sandbox's own loopback, where nothing listens
      "0x7f.1",
    ];
    const checks: Check[] = forms.flatMap((host) => [
      { label: `${host}/tcp`, kind: "tcp", host },
      { label: `${host}/udp`, kind: "udp", host },
    ]);
    const mark = topo.mark();
    const res = await probe(net.netns, checks);
    assert.deepEqual(reachable(res), []);
    assert.doesNotMatch(
      topo.logSince(mark, "meta") + topo.logSince(mark, "p10"),
      /scratchrun-probe/,
    );
  });

  it("the host's own addresses (uplink, gateway, link-local) and its loopback are unreachable", async () => {
    const net = await newNet();
    const a = net.addresses;
    const hostIfs = JSON.parse(
      await mustRun(
        inNetns(topo.uplinkNs, "ip", [
          "-j",
          "-6",
          "addr",
          "show",
          "dev",
          net.hostIfname,
          "scope",
          "link",
        ]),
      ),
    ) as Array<{ addr_info?: Array<{ local?: string }> }>;
    const ll = hostIfs
      .flatMap((i) => i.addr_info ?? [])
      .find((a) => a.local?.startsWith("fe80:"))?.local;
    assert.ok(ll, "host end has a link-local address");
    const targets = [UPLINK_ADDR, UPLINK_ADDR6, a.gatewayV4, a.gatewayV6 as string, `${ll}%eth0`];
    const control = await probe(
      topo.uplinkNs,
      targets.slice(0, 4).flatMap((t) => checksFor(t, t)),
      { bwrap: false },
    );
    assert.deepEqual(
      Object.entries(control).filter(([, r]) => !r.ok),
      [],
      "control: the uplink's echo server answers on its own addresses",
    );
    const res = await probe(
      net.netns,
      targets.flatMap((t) => checksFor(t, t)),
    );
    assert.deepEqual(reachable(res), []);
  });

  it("two simultaneous sandboxes cannot reach each other", async () => {
    const a = await newNet();
    const b = await newNet();
    assert.notEqual(a.addresses.sandboxV4, b.addresses.sandboxV4);
    // b's own address answers from inside b (control), and a cannot reach it.
    const server = topo.startEchoIn(b.netns);
    try {
      await server.ready;
      const targets = [b.addresses.sandboxV4, b.addresses.sandboxV6 as string];
      const control = await probe(
        b.netns,
        targets.flatMap((t) => checksFor(`b:${t}`, t)),
      );
      assert.deepEqual(
        Object.entries(control).filter(([, r]) => !r.ok),
        [],
      );
      const res = await probe(
        a.netns,
        targets.flatMap((t) => checksFor(`a->b:${t}`, t)),
      );
      assert.deepEqual(reachable(res), []);
    } finally {
      await server.stop();
    }
  });

  it('network "none" (bwrap --unshare-net) reaches nothing, not even the public host', async () => {
    const net = await newNet();
    const checks = [...checksFor("public", PUBLIC), ...checksFor("public6", PUBLIC6)];
    const control = await probe(net.netns, checks);
    assert.equal(reachable(control).length, checks.length, "control: reachable with the network");
    const res = await probe(net.netns, checks, { shareNet: false });
    assert.deepEqual(reachable(res), []);
  });

  it("DNS works through the given resolver; a name resolving into a blocked range stays unreachable", async () => {
    const net = await newNet();
    const dir = mkdtempSync(join(tmpdir(), "sr-net-test-"));
    try {
      const file = join(dir, "resolv.conf");
      writeFileSync(file, resolvConf(topo.uplink));
      const res = await probe(
        net.netns,
        [
          { label: "resolve-public", kind: "resolve", host: "public.test" },
          { label: "resolve-private", kind: "resolve", host: "private.test" },
          { label: "public.test/tcp", kind: "tcp", host: "public.test" },
          { label: "private.test/tcp", kind: "tcp", host: "private.test" },
          { label: "private.test/udp", kind: "udp", host: "private.test" },
        ],
        { resolvConfPath: file },
      );
      assert.deepEqual(res["resolve-public"], { ok: true, detail: PUBLIC });
      assert.deepEqual(res["resolve-private"], { ok: true, detail: "10.1.0.10" });
      assert.equal(res["public.test/tcp"]?.ok, true);
      assert.equal(res["private.test/tcp"]?.ok, false);
      assert.equal(res["private.test/udp"]?.ok, false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("root in the sandbox namespace: spoofed sources, non-IP frames and frames to 127.0.0.1 are dropped", async () => {
    const net = await newNet();
    const links = JSON.parse(
      await mustRun(inNetns(topo.uplinkNs, "ip", ["-j", "link", "show", "dev", net.hostIfname])),
    ) as Array<{ address: string }>;
    const gwMac = links[0]?.address as string;
    const token = `t${Date.now().toString(36)}`;
    const before = await net.counters();
    const frames = [
      { kind: "udp4", src: net.addresses.sandboxV4, dst: PUBLIC, payload: `control-${token}` },
      { kind: "udp4", src: "192.0.2.77", dst: PUBLIC, payload: `spoof-${token}` },
      { kind: "udp4", src: "10.250.0.6", dst: PUBLIC, payload: `spoof2-${token}` },
      { kind: "udp4", src: net.addresses.sandboxV4, dst: "127.0.0.1", payload: `lo-${token}` },
      { kind: "udp4", src: net.addresses.sandboxV4, dst: UPLINK_ADDR, payload: `host-${token}` },
      { kind: "nonip", ethertype: 0x88b5, payload: `nonip-${token}` },
    ];
    await mustRun([
      "/usr/sbin/ip",
      "netns",
      "exec",
      net.netns,
      "/usr/bin/python3.11",
      RAW_FRAMES,
      JSON.stringify({ ifname: "eth0", gwMac, frames }),
    ]);
    await topo.waitForLog("pub", `control-${token}`);
    assert.doesNotMatch(topo.log("pub"), new RegExp(`spoof2?-${token}`));
    assert.doesNotMatch(topo.log("uplink"), new RegExp(`(lo|host)-${token}`));
    const after = await net.counters();
    assert.ok(
      after.linkDropped - before.linkDropped >= 9,
      `link drops ${JSON.stringify([before, after])}`,
    );
    assert.ok(after.blocked - before.blocked >= 3, `blocked ${JSON.stringify([before, after])}`);
  });

  it("tap attach: a tap bridged to the link inside the namespace, removed with it", async () => {
    const net = await newNet({ kind: "tap", name: "tap0" });
    assert.equal(net.sandboxIfname, "tap0");
    const links = JSON.parse(
      await mustRun(inNetns(net.netns, "ip", ["-j", "-d", "link", "show"])),
    ) as Array<{
      ifname: string;
      master?: string;
    }>;
    const byName = new Map(links.map((l) => [l.ifname, l]));
    assert.equal(byName.get("tap0")?.master, "br0");
    assert.equal(byName.get("eth0")?.master, "br0");
  });

  it("teardown is idempotent and reaping removes what a crashed server left", async () => {
    const net = await newNet();
    await Promise.all([net.teardown(), net.teardown()]);
    await net.teardown();
    // A "crashed server": resources created by hand with this uplink's prefix.
    const p = topo.uplink.prefix;
    await mustRun(["/usr/sbin/ip", "netns", "add", `${p}orphan`]);
    await mustRun(
      inNetns(topo.uplinkNs, "ip", [
        "link",
        "add",
        `${p}h999`,
        "type",
        "veth",
        "peer",
        "name",
        "orphan-peer",
      ]),
    );
    await mustRun(inNetns(topo.uplinkNs, "nft", ["add", "table", "inet", `${p}orphan`]));
    const live = await newNet();
    const removed = await reapOrphanNetworks(topo.uplink);
    assert.deepEqual(removed, {
      netns: [`${p}orphan`],
      links: [`${p}h999`],
      tables: [`inet ${p}orphan`],
    });
    const left = await listSandboxNetworkResources(topo.uplink);
    assert.deepEqual(left.netns, [live.netns], "the live sandbox survives reaping");
  });
});
