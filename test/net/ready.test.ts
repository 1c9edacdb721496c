/**
 * Networks made ahead (src/net/ready.ts) and a slot's addresses given again (issue 57), in the
 * private test internet of topology.ts: a network taken from the ready list is served without
 * being made, a used one is cut at once and removed later, and the next network on the same
 * slot's addresses has nothing of the last one: no connection of its in conntrack delivers to
 * it, no address, table or counter of its is there, and no chain or counter of its is left in
 * the shared tables. No packet leaves the test namespaces.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, afterEach, before, describe, it } from "node:test";
import { inNetns, mustRun, runCommand } from "../../src/net/commands.js";
import { BLOCKED_CIDRS } from "../../src/net/addresses.js";
import { renderSandboxRules, renderSharedTables, sharedTableName } from "../../src/net/nftables.js";
import { ReadyNetworks } from "../../src/net/ready.js";
import { listSandboxNetworkResources, reapOrphanNetworks } from "../../src/net/resources.js";
import { createSandboxNetwork, type SandboxNetwork } from "../../src/net/sandbox-net.js";
import { PUBLIC, Topology } from "./topology.js";

const PY = "/usr/bin/python3";
const SERVER_PORT = 7057;
const SANDBOX_PORT = 40057;

/** A python program in `ns` (root, no jail: the programs are the test's own), its stdout. */
function python(ns: string, code: string, timeoutMs = 15_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn("/usr/sbin/ip", ["netns", "exec", ns, PY, "-c", code], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`python in ${ns} exited ${code}: ${err.trim()}`));
    });
  });
}

/**
 * The public host's side: answers the first datagram at once ("first"), then after `laterMs`
 * sends "stale" to the same address and port, as a late reply on that connection would come.
 */
const lateReplier = (laterMs: number): string => `
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("${PUBLIC}", ${SERVER_PORT}))
s.settimeout(10)
data, peer = s.recvfrom(100)
s.sendto(b"first", peer)
time.sleep(${laterMs / 1000})
for _ in range(5):
    s.sendto(b"stale", peer)
    time.sleep(0.1)
print(peer[0], peer[1])
`;

/** The sandbox side: sends from SANDBOX_PORT and prints what comes back within `waitS`. */
const sender = (waitS: number): string => `
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", ${SANDBOX_PORT}))
s.settimeout(${waitS})
s.sendto(b"hello", ("${PUBLIC}", ${SERVER_PORT}))
try:
    print(s.recvfrom(100)[0].decode())
except socket.timeout:
    print("nothing")
`;

/** Listens on SANDBOX_PORT for `waitS` seconds; prints every datagram, or "nothing". */
const listener = (waitS: number): string => `
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", ${SANDBOX_PORT}))
end = time.time() + ${waitS}
got = []
while time.time() < end:
    s.settimeout(max(0.01, end - time.time()))
    try:
        got.append(s.recvfrom(100)[0].decode())
    except socket.timeout:
        break
print(" ".join(got) or "nothing")
`;

const v4Addresses = async (ns: string, dev: string): Promise<string[]> => {
  const out = await mustRun(inNetns(ns, "ip", ["-j", "-4", "addr", "show", "dev", dev]));
  const links = JSON.parse(out) as Array<{
    addr_info?: Array<{ local: string; prefixlen: number }>;
  }>;
  return links.flatMap((l) => (l.addr_info ?? []).map((a) => `${a.local}/${a.prefixlen}`));
};

describe(
  "sandbox networks made ahead, and a slot given again (real namespaces)",
  { timeout: 120_000 },
  () => {
    let topo: Topology;
    const nets: SandboxNetwork[] = [];

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
      assert.deepEqual(
        await listSandboxNetworkResources(topo.uplink),
        { netns: [], links: [], tables: [] },
        "sandbox network resources leaked",
      );
    });

    after(async () => {
      await topo.destroy();
      assert.deepEqual(await topo.leftovers(), [], "test namespaces leaked");
    });

    it("a late reply to the last sandbox on a slot's addresses never reaches the next one", async () => {
      const a = await createSandboxNetwork({ id: "slot-a", uplink: topo.uplink });
      nets.push(a);
      const replier = python(topo.hostNs("pub"), lateReplier(2500));
      await new Promise((r) => setTimeout(r, 300));
      // The connection is made and answered: conntrack in the uplink holds it, established.
      assert.equal((await python(a.netns, sender(3))).trim(), "first");
      await a.teardown();
      nets.splice(nets.indexOf(a), 1);

      const b = await createSandboxNetwork({ id: "slot-b", uplink: topo.uplink });
      nets.push(b);
      assert.deepEqual(b.addresses, a.addresses, "the next network got another slot");
      assert.equal(b.hostIfname, a.hostIfname);
      // B listens where A's connection was, while the host sends its late replies.
      const heard = python(b.netns, listener(4));
      const peer = (await replier).trim();
      assert.match(peer, /^\S+ \d+$/, "the public host saw the first datagram");
      assert.equal(
        (await heard).trim(),
        "nothing",
        `late replies reached the next sandbox (${peer})`,
      );

      // Control: B's own connection on the same port works both ways.
      const own = python(topo.hostNs("pub"), lateReplier(100));
      await new Promise((r) => setTimeout(r, 300));
      assert.equal((await python(b.netns, sender(3))).trim(), "first");
      await own;
    });

    it("the next network on a slot has only its own address, tables and zeroed counters", async () => {
      const a = await createSandboxNetwork({ id: "slot-c", uplink: topo.uplink });
      nets.push(a);
      // Something counted in A: a blocked destination.
      await python(
        a.netns,
        `
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(3): s.sendto(b"x", ("10.1.0.10", 9))
`,
      );
      assert.ok((await a.blockedCount()) >= 3, "the drops of the first network were not counted");
      await a.teardown();
      nets.splice(nets.indexOf(a), 1);
      const b = await createSandboxNetwork({ id: "slot-d", uplink: topo.uplink });
      nets.push(b);
      assert.deepEqual(b.addresses, a.addresses);
      assert.equal(await b.blockedCount(), 0);
      assert.deepEqual(await v4Addresses(b.netns, "eth0"), [`${b.addresses.sandboxV4}/30`]);
      assert.deepEqual(await v4Addresses(topo.uplinkNs, b.hostIfname), [
        `${b.addresses.gatewayV4}/30`,
      ]);
      const left = await listSandboxNetworkResources(topo.uplink);
      assert.deepEqual(left.netns, [b.netns]);
      assert.deepEqual(left.tables.sort(), [`inet ${b.netns}`, `netdev ${b.netns}`]);
    });

    it("counters asked for together are each network's own, and count what was sent before asking", async () => {
      // Calls ending together share one `nft list counters` (sandbox-net.ts readCounters).
      const [a, b, c] = await Promise.all(
        ["cnt-a", "cnt-b", "cnt-c"].map((id) => createSandboxNetwork({ id, uplink: topo.uplink })),
      );
      nets.push(a!, b!, c!);
      const blocked = (n: number) => `
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(${n}): s.sendto(b"x", ("10.1.0.10", 9))
`;
      await python(a!.netns, blocked(2));
      await python(b!.netns, blocked(5));
      assert.deepEqual(
        await Promise.all([a!, b!, c!, a!, b!].map((n) => n.blockedCount())),
        [2, 5, 0, 2, 5],
      );
      // A read runs (C's); A sends more, then asks: its answer comes from a read begun after.
      const running = c!.blockedCount();
      await python(a!.netns, blocked(3));
      assert.deepEqual(await Promise.all([a!.blockedCount(), running]), [5, 0]);
    });

    it("a sandbox's chains and counters leave the shared tables with its network; the others' stay", async () => {
      const shared = sharedTableName(topo.uplink.prefix);
      /** Names of every chain and counter in the shared tables (both families). */
      const objects = async (): Promise<string[]> => {
        const names: string[] = [];
        for (const family of ["inet", "netdev"]) {
          const res = await runCommand(
            inNetns(topo.uplinkNs, "nft", ["-j", "list", "table", family, shared]),
          );
          const doc = JSON.parse(res.stdout || "{}") as {
            nftables?: Array<Record<string, { name?: string }>>;
          };
          for (const item of doc.nftables ?? [])
            for (const kind of ["chain", "counter", "set", "map"])
              if (item[kind]?.name) names.push(`${family} ${kind} ${item[kind].name}`);
        }
        return names.sort();
      };
      const keep = await createSandboxNetwork({ id: "slot-e", uplink: topo.uplink });
      nets.push(keep);
      const a = await createSandboxNetwork({ id: "slot-f", uplink: topo.uplink });
      nets.push(a);
      await python(
        a.netns,
        `
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(3): s.sendto(b"x", ("10.1.0.10", 9))
`,
      );
      assert.ok((await a.blockedCount()) >= 3, "the drops of A were not counted");
      const withA = await objects();
      assert.ok(
        withA.some((n) => n.endsWith(` ${a.netns}.blocked`)),
        withA.join("\n"),
      );
      await a.teardown();
      nets.splice(nets.indexOf(a), 1);
      const left = await objects();
      // Nothing named for A: no chain, no counter; the shared sets and the other's rules stay.
      assert.deepEqual(
        left.filter((n) => n.includes(` ${a.netns}.`)),
        [],
        "A's chains or counters are left in the shared tables",
      );
      assert.deepEqual(
        left,
        withA.filter((n) => !n.includes(` ${a.netns}.`)),
      );
      assert.ok(left.some((n) => n.endsWith(` ${keep.netns}.blocked`)));
      assert.ok(left.includes("inet set host4"));
      // The next network on A's slot counts from zero, in chains of its own name.
      const b = await createSandboxNetwork({ id: "slot-g", uplink: topo.uplink });
      nets.push(b);
      assert.deepEqual(b.addresses, a.addresses);
      assert.equal(await b.blockedCount(), 0);
      // The last network's removal takes the shared tables with it.
      await keep.teardown();
      await b.teardown();
      nets.splice(0);
      assert.deepEqual(await objects(), []);
    });

    it("reaping finds a dead server's chains in the shared tables and removes them, never a live one's", async () => {
      const p = topo.uplink.prefix;
      const shared = sharedTableName(p);
      // A dead server's sandbox: its chains and counters in the shared tables, on a link of its own.
      const dead = renderSandboxRules(
        {
          table: `${p}dead`,
          hostIfname: `${p}h998`,
          sandboxV4: "10.99.0.2",
          gatewayV4: "10.99.0.1",
          sandboxV6: null,
          hostAddresses: [],
          dnsResolvers: ["1.1.1.1"],
          blocked: BLOCKED_CIDRS,
          connMark: 9,
        },
        shared,
      );
      const deadLink = () =>
        mustRun(
          inNetns(topo.uplinkNs, "ip", [
            "link",
            "add",
            `${p}h998`,
            "type",
            "veth",
            "peer",
            "name",
            "dead-peer",
          ]),
        );
      const live = await createSandboxNetwork({ id: "slot-h", uplink: topo.uplink });
      nets.push(live);
      await deadLink();
      await mustRun(inNetns(topo.uplinkNs, "nft", ["-f", "-"]), dead);
      const both = await listSandboxNetworkResources(topo.uplink);
      assert.deepEqual(both.tables.sort(), [
        `inet ${p}dead`,
        `inet ${live.netns}`,
        `netdev ${p}dead`,
        `netdev ${live.netns}`,
      ]);
      const removed = await reapOrphanNetworks(topo.uplink);
      assert.deepEqual(removed.tables.sort(), [`inet ${p}dead`, `netdev ${p}dead`]);
      assert.deepEqual(removed.links, [`${p}h998`]);
      const left = await listSandboxNetworkResources(topo.uplink);
      assert.deepEqual(left.tables.sort(), [`inet ${live.netns}`, `netdev ${live.netns}`]);
      assert.equal(await live.blockedCount(), 0, "the live sandbox's counters are still read");
      // With no live sandbox, the dead server's shared tables go whole.
      await live.teardown();
      nets.splice(0);
      await deadLink();
      await mustRun(
        inNetns(topo.uplinkNs, "nft", ["-f", "-"]),
        renderSharedTables(shared, [], [], BLOCKED_CIDRS) + dead,
      );
      const again = await reapOrphanNetworks(topo.uplink);
      assert.deepEqual(again.tables.sort(), [`inet ${p}dead`, `netdev ${p}dead`]);
      assert.deepEqual((await listSandboxNetworkResources(topo.uplink)).tables, []);
    });

    it("a ready network is taken without being made, cut at its teardown, removed afterwards", async () => {
      const ready = new ReadyNetworks({ uplink: topo.uplink, depth: 2, quietMs: 50 });
      try {
        const first = await ready.take({});
        assert.deepEqual(ready.stats, { readyTakes: 0, coldTakes: 1, made: 0, removed: 0 });
        for (let i = 0; i < 200 && ready.readyCount < 2; i++)
          await new Promise((r) => setTimeout(r, 50));
        assert.equal(ready.readyCount, 2, "the ready list was not refilled");
        const second = await ready.take({});
        assert.equal(ready.stats.readyTakes, 1);
        assert.notEqual(second.netns, first.netns);
        assert.notDeepEqual(second.addresses, first.addresses);
        // Usable: a public host answers.
        const replier = python(topo.hostNs("pub"), lateReplier(0));
        await new Promise((r) => setTimeout(r, 300));
        assert.equal((await python(second.netns, sender(3))).trim(), "first");
        await replier;

        await second.teardown();
        await first.teardown();
        for (let i = 0; i < 200 && ready.pendingCount > 0; i++)
          await new Promise((r) => setTimeout(r, 50));
        assert.equal(ready.pendingCount, 0, "used networks were not removed");
        const left = await listSandboxNetworkResources(topo.uplink);
        assert.ok(!left.netns.includes(first.netns) && !left.netns.includes(second.netns));
        // The tap of a VM's network is added at take, owned by the VM's uid.
        const tap = await ready.take({ attach: { kind: "tap", name: "tap0", uid: 4242 } });
        assert.equal(tap.sandboxIfname, "tap0");
        const owner = await runCommand(
          inNetns(tap.netns, "sysctl", ["-n", "net.ipv4.conf.tap0.forwarding"]),
        );
        assert.equal(owner.code, 0, "no tap0 in the network's namespace");
        const info = await mustRun(
          inNetns(tap.netns, "ip", ["-d", "-j", "link", "show", "dev", "tap0"]),
        );
        assert.match(info, /"user":"?4242/, "the tap is not the VM uid's");
        assert.match(info, /"master":"br0"/, "the tap is not on the bridge");
        await tap.teardown();
      } finally {
        await ready.close();
      }
      assert.deepEqual(await listSandboxNetworkResources(topo.uplink), {
        netns: [],
        links: [],
        tables: [],
      });
    });

    it("a network's teardown cuts its link at once and leaves the rest to the queue", async () => {
      // Nothing runs in the background for a minute: what teardown did is all there is to see.
      const ready = new ReadyNetworks({ uplink: topo.uplink, depth: 0, quietMs: 60_000 });
      try {
        const net = await ready.take({});
        await net.teardown();
        assert.equal(ready.pendingCount, 1);
        const link = await mustRun(
          inNetns(topo.uplinkNs, "ip", ["-j", "link", "show", "dev", net.hostIfname]),
        ).catch(() => "[]");
        const state = (JSON.parse(link) as Array<{ flags?: string[] }>)[0]?.flags ?? [];
        assert.ok(!state.includes("UP"), `the link of a torn-down network is still up: ${state}`);
        const unheard = python(topo.hostNs("pub"), lateReplier(0), 4000).catch(() => "");
        await new Promise((r) => setTimeout(r, 300));
        assert.equal(
          (await python(net.netns, sender(1))).trim(),
          "nothing",
          "a cut network still reaches a public host",
        );
        assert.equal(await unheard, "", "the public host heard a cut network");
        assert.equal(ready.pendingCount, 1, "removed before its turn");
      } finally {
        await ready.close();
      }
      assert.deepEqual(await listSandboxNetworkResources(topo.uplink), {
        netns: [],
        links: [],
        tables: [],
      });
    });
  },
);
