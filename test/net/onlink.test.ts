/**
 * A host whose LAN is public address space (threat model H17, SEC-NET-BLOCK): in namespaces the
 * test builds (topology.ts + lan.ts: the uplink "host" on 192.0.2.0/24 and 2001:db8:ffff::/64 with
 * a neighbour and the gateway on the same bridge, a device-route-only subnet, nothing in the root
 * namespace), a sandbox reaches a public host beyond the gateway but neither the neighbours nor
 * the gateway, by any protocol; every "unreachable" has a control from the uplink itself and the
 * target's echo log showing no probe arrived. A subnet that becomes on-link while a sandbox is
 * live is blocked in that sandbox too. Then the same through the real server on both backends.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { after, afterEach, before, describe, it } from "node:test";
import { inNetns, mustRun } from "../../src/net/commands.js";
import { hostWatch } from "../../src/net/host-watch.js";
import { sharedTableName } from "../../src/net/nftables.js";
import { listSandboxNetworkResources } from "../../src/net/resources.js";
import { createSandboxNetwork, type SandboxNetwork } from "../../src/net/sandbox-net.js";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import { startServer, type McpHarness } from "../helpers/mcp-client.js";
import {
  GATEWAY,
  GATEWAY6,
  LATE_NEIGHBOUR,
  Lan,
  NEIGHBOUR,
  NEIGHBOUR6,
  ROUTE_NEIGHBOUR,
} from "./lan.js";
import {
  PUBLIC,
  PUBLIC6,
  Topology,
  probe,
  probeProgram,
  type Check,
  type ProbeResult,
} from "./topology.js";

const KINDS = ["tcp", "udp", "icmp"] as const;
const checksFor = (label: string, host: string): Check[] =>
  KINDS.map((kind) => ({ label: `${label}/${kind}`, kind, host }));
const reached = (res: ProbeResult) =>
  Object.entries(res)
    .filter(([, r]) => r.ok)
    .map(([l, r]) => `${l} (${r.detail})`);
const failed = (res: ProbeResult) =>
  Object.entries(res)
    .filter(([, r]) => !r.ok)
    .map(([l, r]) => `${l} (${r.detail})`);

const NEIGHBOURHOOD: Record<string, string> = {
  neighbour: NEIGHBOUR,
  gateway: GATEWAY,
  "route-only neighbour": ROUTE_NEIGHBOUR,
};
const NEIGHBOURHOOD6: Record<string, string> = { neighbour6: NEIGHBOUR6, gateway6: GATEWAY6 };

/** Pids of `ip monitor` processes watching this uplink namespace. */
function monitors(uplinkNs: string): number[] {
  const out: number[] = [];
  for (const pid of readdirSafe("/proc")) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
      if (cmd.includes("monitor") && cmd.includes(uplinkNs)) out.push(Number(pid));
    } catch {
      // gone
    }
  }
  return out;
}
function readdirSafe(dir: string): string[] {
  try {
    return readdirSync(dir).filter((n) => /^\d+$/.test(n));
  } catch {
    return [];
  }
}
describe("on-link subnets of the host (real namespaces)", { timeout: 180_000 }, () => {
  let topo: Topology;
  let lan: Lan;
  const nets: SandboxNetwork[] = [];
  let seq = 0;
  const newNet = async (): Promise<SandboxNetwork> => {
    seq += 1;
    const net = await createSandboxNetwork({ id: `o${seq}`, uplink: topo.uplink });
    nets.push(net);
    return net;
  };

  before(async () => {
    topo = new Topology();
    try {
      await topo.build();
      lan = await new Lan(topo).build();
    } catch (e) {
      await lan?.destroy();
      await topo.destroy();
      throw e;
    }
  });
  afterEach(async () => {
    for (const n of nets.splice(0)) await n.teardown();
    assert.deepEqual(await listSandboxNetworkResources(topo.uplink), {
      netns: [],
      links: [],
      tables: [],
    });
  });
  after(async () => {
    await lan?.destroy();
    await topo?.destroy();
    assert.deepEqual(await topo.leftovers(), [], "test namespaces leaked");
  });

  it("control: from the host itself the neighbours and the gateway answer on every protocol", async () => {
    const checks = [
      ...checksFor("public6", PUBLIC6),
      ...Object.entries({ ...NEIGHBOURHOOD, ...NEIGHBOURHOOD6 }).flatMap(([l, a]) =>
        checksFor(l, a),
      ),
    ];
    // A first IPv6 packet can wait for neighbour discovery past the probe's 1 s: a control may
    // try again (it proves the topology works; the negative probes below are never retried).
    let down: string[] = [];
    for (let attempt = 0; attempt < 3; attempt++) {
      down = failed(await probe(topo.uplinkNs, checks, { bwrap: false }));
      if (down.length === 0) break;
    }
    assert.deepEqual(down, [], "topology broken: the tests below would prove nothing");
  });

  it("a sandbox reaches a public host beyond the gateway but no neighbour and not the gateway", async () => {
    const net = await newNet();
    const mark = topo.mark();
    const res = await probe(net.netns, [
      ...checksFor("public", PUBLIC),
      ...checksFor("public6", PUBLIC6),
      ...Object.entries({ ...NEIGHBOURHOOD, ...NEIGHBOURHOOD6 }).flatMap(([l, a]) =>
        checksFor(l, a),
      ),
    ]);
    const publicDown = failed(res).filter((l) => l.startsWith("public"));
    assert.deepEqual(publicDown, [], "the internet beyond the gateway stays reachable");
    assert.deepEqual(
      reached(res).filter((l) => !l.startsWith("public")),
      [],
    );
    assert.doesNotMatch(
      topo.logSince(mark, lan.ns),
      /scratchrun-probe/,
      "a probe reached the neighbour",
    );
    assert.doesNotMatch(
      topo.logSince(mark, topo.routerNs),
      /scratchrun-probe/,
      "a probe reached the gateway",
    );
    assert.match(topo.logSince(mark, "pub"), /scratchrun-probe/);
  });

  it("a subnet that becomes on-link while a sandbox lives is blocked in that sandbox, within a second", async () => {
    const net = await newNet();
    assert.equal(monitors(topo.uplinkNs).length, 1, "one monitor watches the uplink");
    // Before: the LATE subnet is not on-link (routed to the router, which has no such host).
    const refreshes = hostWatch(topo.uplink).refreshes;
    await lan.addLateSubnet();
    const control = await probe(topo.uplinkNs, checksFor("late", LATE_NEIGHBOUR), { bwrap: false });
    assert.deepEqual(failed(control), [], "control: the new neighbour answers the host");
    let set = "";
    for (let i = 0; i < 50 && !set.includes("203.0.113.64/27"); i++) {
      await new Promise((r) => setTimeout(r, 100));
      set = await mustRun(
        inNetns(topo.uplinkNs, "nft", [
          "list",
          "set",
          "inet",
          sharedTableName(topo.uplink.prefix),
          "host4",
        ]),
      );
    }
    assert.match(set, /203\.0\.113\.64\/27/, "the live sandbox's host set was refilled");
    assert.ok(hostWatch(topo.uplink).refreshes > refreshes);
    const mark = topo.mark();
    const res = await probe(net.netns, checksFor("late", LATE_NEIGHBOUR));
    assert.deepEqual(reached(res), []);
    assert.doesNotMatch(topo.logSince(mark, lan.ns), /late|scratchrun-probe/);
    // The next sandbox's rules use the same host set (the shared table's), which has it.
    await newNet();
    const fresh = await mustRun(
      inNetns(topo.uplinkNs, "nft", [
        "list",
        "set",
        "inet",
        sharedTableName(topo.uplink.prefix),
        "host4",
      ]),
    );
    assert.match(fresh, /203\.0\.113\.64\/27/);
  });

  it("the monitor lives exactly while a sandbox network of the uplink does", async () => {
    const a = await newNet();
    const b = await newNet();
    assert.equal(monitors(topo.uplinkNs).length, 1);
    await a.teardown();
    assert.equal(monitors(topo.uplinkNs).length, 1);
    await b.teardown();
    for (let i = 0; i < 50 && monitors(topo.uplinkNs).length > 0; i++)
      await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(monitors(topo.uplinkNs), [], "no monitor left once no sandbox network is");
  });

  it("the update script is accepted by the kernel on a live table", async () => {
    await newNet();
    await hostWatch(topo.uplink).refresh(true);
    const set = await mustRun(
      inNetns(topo.uplinkNs, "nft", [
        "list",
        "set",
        "inet",
        sharedTableName(topo.uplink.prefix),
        "host4",
      ]),
    );
    assert.match(set, /192\.0\.2\.0\/24/);
    assert.match(set, /203\.0\.113\.128\/25/);
  });
});

for (const backend of TEST_BACKENDS) {
  describe(`on-link subnets through the server [${backend}]`, { timeout: 600_000 }, () => {
    let topo: Topology;
    let lan: Lan;
    let h: McpHarness;
    let base: HostSnapshot;

    before(async () => {
      base = snapshot();
      topo = await new Topology().build();
      lan = await new Lan(topo).build();
      h = await startServer({
        SCRATCHRUN_ISOLATION: backend,
        SCRATCHRUN_POOL_SIZE: "python3.11=1",
        SCRATCHRUN_NETWORK: "public",
        ...topo.serverEnv(),
      });
    });
    after(async () => {
      await h?.close();
      const left = await topo.networksLeft();
      for (let i = 0; i < 50 && monitors(topo.uplinkNs).length > 0; i++)
        await new Promise((r) => setTimeout(r, 100));
      const watching = monitors(topo.uplinkNs);
      await lan?.destroy();
      await topo?.destroy();
      assert.deepEqual(left, { netns: [], links: [], tables: [] }, "sandbox networks torn down");
      assert.deepEqual(watching, [], "the server's monitor ended with it");
      await assertNoLeaks(base);
    });

    it("H17: the code reaches a public host but neither the LAN neighbours nor the gateway", async () => {
      const mark = topo.mark();
      const checks = [
        ...checksFor("public", PUBLIC),
        ...Object.entries(NEIGHBOURHOOD).flatMap(([l, a]) => checksFor(l, a)),
      ];
      const { s } = await h.exec({
        runtime: "python3.11",
        code: probeProgram(checks),
        network: "public",
        timeout_ms: 30_000,
      });
      assert.equal(s.exit_reason, "ok", s.stderr);
      const res = JSON.parse(s.stdout) as ProbeResult;
      assert.deepEqual(
        failed(res).filter((l) => l.startsWith("public")),
        [],
      );
      assert.deepEqual(
        reached(res).filter((l) => !l.startsWith("public")),
        [],
      );
      assert.doesNotMatch(
        topo.logSince(mark, lan.ns),
        /scratchrun-probe/,
        "neighbour got a packet",
      );
      assert.doesNotMatch(
        topo.logSince(mark, topo.routerNs),
        /scratchrun-probe/,
        "gateway got a packet",
      );
      assert.ok((s.network_blocked_packets ?? 0) > 0, "the filter counted the drops");
    });
  });
}
