/**
 * IP forwarding as dockerd does it (src/net/forwarding.ts), in a private test internet
 * (topology.ts): the uplink namespace stands in for the host, and a second namespace hangs off it
 * on a link that is not a sandbox's ("other", standing in for a VM bridge or a LAN the host
 * routes). Every drop is paired with a control where the same packet is forwarded. Nothing is
 * configured outside the namespaces the test creates.
 */
import assert from "node:assert/strict";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";
import { inNetns, mustRun, runCommand } from "../../src/net/commands.js";
import { GUARD_TABLE, guardPrefixes } from "../../src/net/forward-guard.js";
import { prepareForwarding } from "../../src/net/forwarding.js";
import { listSandboxNetworkResources } from "../../src/net/resources.js";
import { createSandboxNetwork, type SandboxNetwork } from "../../src/net/sandbox-net.js";
import { uplinkConfig } from "../../src/net/uplink.js";
import { DOCKER, HOST_FIREWALL, OTHER_HOST, OtherLink } from "./other-link.js";
import { probe, PUBLIC, Topology, type Check } from "./topology.js";

const TCP: Check[] = [{ label: "tcp", kind: "tcp", host: PUBLIC }];

describe("IP forwarding as dockerd does it (real namespaces)", { timeout: 240_000 }, () => {
  let topo: Topology;
  let other: OtherLink;
  const nets: SandboxNetwork[] = [];
  let seq = 0;
  const up = () => topo.uplinkNs;
  const nft = (script: string) => mustRun(inNetns(up(), "nft", ["-f", "-"]), script);
  const forwardingNow = async () =>
    (await mustRun(inNetns(up(), "sysctl", ["-n", "net.ipv4.ip_forward"]))).trim();
  const guard = async () => {
    const r = await runCommand(inNetns(up(), "nft", ["-j", "list", "table", "inet", GUARD_TABLE]));
    return r.code === 0 ? guardPrefixes(r.stdout) : null;
  };
  const guardDropped = async () => {
    const r = await mustRun(inNetns(up(), "nft", ["-j", "list", "counters"]));
    const items = (JSON.parse(r) as { nftables: { counter?: Record<string, unknown> }[] }).nftables;
    const c = items.find((i) => i.counter?.table === GUARD_TABLE)?.counter;
    return Number(c?.packets ?? 0);
  };
  const sandbox = async (uplink = topo.uplink) => {
    seq += 1;
    const net = await createSandboxNetwork({ id: `f${seq}`, uplink });
    nets.push(net);
    return net;
  };
  const fromSandbox = async (net: SandboxNetwork) => (await probe(net.netns, TCP)).tcp!;
  const fromOther = () => other.reachesPublic();

  before(async () => {
    topo = new Topology();
    try {
      await topo.build();
      other = await new OtherLink(topo).build();
    } catch (e) {
      await topo.destroy();
      throw e;
    }
  });

  /** A fresh host each test: forwarding off, no guard, no firewall of anyone's. */
  beforeEach(async () => {
    for (const key of ["net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"])
      await mustRun(inNetns(up(), "sysctl", ["-qw", `${key}=0`]));
    for (const t of [`inet ${GUARD_TABLE}`, "ip filter", "inet hostfw"])
      await nft(`table ${t}\ndelete table ${t}\n`);
  });

  afterEach(async () => {
    for (const n of nets.splice(0)) await n.teardown();
    assert.deepEqual(
      await listSandboxNetworkResources(topo.uplink),
      { netns: [], links: [], tables: [] },
      "sandbox networks leaked",
    );
  });

  after(async () => {
    await other.destroy();
    await topo.destroy();
    assert.deepEqual(await topo.leftovers(), [], "test namespaces leaked");
  });

  it("forwarding off (a fresh host): turned on with the guard; a sandbox reaches a public host, another link's forwarded traffic is dropped and counted (control: without the guard it is forwarded)", async () => {
    assert.equal(await fromOther().then((r) => r.ok), false, "off: nothing is forwarded");
    const state = await prepareForwarding(topo.uplink);
    assert.deepEqual(state, { forwarding: "turned-on", dockerUser: [], dropping: [] });
    assert.equal(await forwardingNow(), "1");
    assert.deepEqual(await guard(), [topo.uplink.prefix]);
    const net = await sandbox();
    const r = await fromSandbox(net);
    assert.ok(r.ok, `the sandbox reaches ${PUBLIC}: ${r.detail}`);
    const c = await net.counters();
    assert.ok(
      c.forwarded > 0 && c.passed === c.forwarded,
      `all it sent left: ${JSON.stringify(c)}`,
    );
    const before = await guardDropped();
    assert.equal((await fromOther()).ok, false, "another link's traffic is not forwarded");
    assert.ok((await guardDropped()) > before, "the guard counted what it dropped");
    // Control: the very same packets are forwarded once the guard is gone.
    await nft(`delete table inet ${GUARD_TABLE}\n`);
    const control = await fromOther();
    assert.ok(
      control.ok,
      `control: without the guard ${OTHER_HOST} is forwarded: ${control.detail}`,
    );
  });

  it("forwarding already on: nothing changes (no guard; other links' forwarding goes on)", async () => {
    await mustRun(inNetns(up(), "sysctl", ["-qw", "net.ipv4.ip_forward=1"]));
    await mustRun(inNetns(up(), "sysctl", ["-qw", "net.ipv6.conf.all.forwarding=1"]));
    const state = await prepareForwarding(topo.uplink);
    assert.deepEqual(state, { forwarding: "on", dockerUser: [], dropping: [] });
    assert.equal(await guard(), null, "no guard table");
    assert.ok((await fromOther()).ok, "the host's own forwarding is untouched");
    assert.ok((await fromSandbox(await sandbox())).ok);
  });

  it("SCRATCHRUN_ENABLE_FORWARDING=0: forwarding off stays off, no guard, and a sandbox network is refused saying why", async () => {
    const optOut = { ...topo.uplink, enableForwarding: false };
    assert.deepEqual(await prepareForwarding(optOut), {
      forwarding: "off",
      dockerUser: [],
      dropping: [],
    });
    assert.equal(await forwardingNow(), "0");
    assert.equal(await guard(), null);
    await assert.rejects(sandbox(optOut), /net\.ipv4\.ip_forward is 0/);
  });

  it("a sandbox network that finds forwarding turned off since start turns it on again, guard first", async () => {
    await prepareForwarding(topo.uplink);
    await mustRun(inNetns(up(), "sysctl", ["-qw", "net.ipv4.ip_forward=0"]));
    await nft(`delete table inet ${GUARD_TABLE}\n`);
    const net = await sandbox();
    assert.equal(await forwardingNow(), "1");
    assert.deepEqual(await guard(), [topo.uplink.prefix]);
    assert.ok((await fromSandbox(net)).ok);
    assert.equal((await fromOther()).ok, false);
  });

  it("a guard another server left keeps its prefix and gains this one's; a second start adds nothing", async () => {
    const first = uplinkConfig({ ...topo.uplink, prefix: `x${topo.tag}-` });
    await prepareForwarding(first);
    assert.deepEqual(await guard(), [first.prefix]);
    // Forwarding is on now: without the guard learning this prefix, its sandboxes would be cut.
    assert.equal((await prepareForwarding(topo.uplink)).forwarding, "on");
    assert.deepEqual(await guard(), [topo.uplink.prefix, first.prefix].sort());
    assert.ok((await fromSandbox(await sandbox())).ok);
    await prepareForwarding(topo.uplink);
    const rules = await mustRun(inNetns(up(), "nft", ["list", "table", "inet", GUARD_TABLE]));
    assert.equal(rules.match(/iifname/g)?.length, 2, "one pair per prefix");
  });

  it("Docker's FORWARD policy drop: the sandbox links are let through DOCKER-USER once (control: before, the host dropped the sandbox's packets, and its counters say so)", async () => {
    await mustRun(inNetns(up(), "sysctl", ["-qw", "net.ipv4.ip_forward=1"]));
    await mustRun(inNetns(up(), "sysctl", ["-qw", "net.ipv6.conf.all.forwarding=1"]));
    await nft(DOCKER);
    const before = await sandbox();
    assert.equal((await fromSandbox(before)).ok, false, "control: Docker's policy drops it");
    const c = await before.counters();
    assert.ok(
      c.forwarded > c.passed,
      `the host dropped what the filter let out: ${JSON.stringify(c)}`,
    );

    const state = await prepareForwarding(topo.uplink);
    assert.deepEqual(state, { forwarding: "on", dockerUser: ["ip"], dropping: [] });
    const net = await sandbox();
    const r = await fromSandbox(net);
    assert.ok(r.ok, `through DOCKER-USER: ${r.detail}`);
    const after = await net.counters();
    assert.equal(after.forwarded, after.passed, "nothing dropped after the filter");
    assert.equal((await fromOther()).ok, false, "Docker's policy still drops other links");
    await prepareForwarding(topo.uplink);
    const chain = await mustRun(
      inNetns(up(), "nft", ["list", "chain", "ip", "filter", "DOCKER-USER"]),
    );
    assert.equal(chain.match(/accept/g)?.length, 2, `no copies on a restart:\n${chain}`);
    assert.match(chain, /iifname "s[0-9a-f]{4}-h\*" accept[\s\S]*return/, "before Docker's return");
  });

  it("a host firewall that drops forwarding and is not Docker's is named, and a sandbox's dropped packets are counted", async () => {
    await mustRun(inNetns(up(), "sysctl", ["-qw", "net.ipv4.ip_forward=1"]));
    await mustRun(inNetns(up(), "sysctl", ["-qw", "net.ipv6.conf.all.forwarding=1"]));
    await nft(HOST_FIREWALL);
    const state = await prepareForwarding(topo.uplink);
    assert.deepEqual(state.dropping, [
      { family: "inet", table: "hostfw", name: "forward", policy: "drop" },
    ]);
    const net = await sandbox();
    assert.equal((await fromSandbox(net)).ok, false);
    const c = await net.counters();
    assert.ok(c.forwarded > 0 && c.passed === 0, JSON.stringify(c));
  });
});
