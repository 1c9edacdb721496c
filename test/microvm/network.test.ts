import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { listSandboxNetworkResources } from "../../src/net/resources.js";
import { startServer, type McpHarness } from "../helpers/mcp-client.js";
import {
  BLOCKED_HOSTS,
  PROBE,
  PUBLIC,
  RESOLVER,
  Topology,
  UPLINK_ADDR,
  type Check,
  type ProbeResult,
} from "../net/topology.js";
import { canRunMicrovm } from "./fixture.js";

const skip = canRunMicrovm();

/** pid -> [ppid, comm] of every process now. */
function processTable(): Map<number, [number, string]> {
  const m = new Map<number, [number, string]>();
  for (const pid of readdirSync("/proc").filter((n) => /^\d+$/.test(n))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      m.set(Number(pid), [Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]), comm]);
    } catch {
      // exited while we looked
    }
  }
  return m;
}

/**
 * QEMU processes of the server this test started (descendants of our child running
 * scratchrun-mcp.js) and their cgroup paths: what must be gone after the server closes. Other
 * engineers' VMs on the same host are not ours and are never counted.
 */
function ourVms(): { pids: number[]; cgroups: string[] } {
  const table = processTable();
  const servers = [...table]
    .filter(([pid, [ppid]]) => {
      if (ppid !== process.pid) return false;
      try {
        return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("scratchrun-mcp.js");
      } catch {
        return false;
      }
    })
    .map(([pid]) => pid);
  const under = (pid: number): boolean => {
    for (let p = pid, i = 0; p > 1 && i < 64; p = table.get(p)?.[0] ?? 0, i++)
      if (servers.includes(p)) return true;
    return false;
  };
  const pids = [...table]
    .filter(([pid, [, comm]]) => comm.startsWith("qemu-system") && under(pid))
    .map(([pid]) => pid);
  const cgroups: string[] = [];
  for (const pid of pids) {
    try {
      for (const line of readFileSync(`/proc/${pid}/cgroup`, "utf8").split("\n")) {
        const path = line.split(":")[2] ?? "";
        if (/\/vm-[0-9a-f]+$/.test(path)) cgroups.push(path);
      }
    } catch {
      // exited
    }
  }
  return { pids, cgroups: [...new Set(cgroups)] };
}

function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

function cgroupExists(rel: string): boolean {
  return ["memory", "pids", "cpu"].some((h) => {
    try {
      readdirSync(`/sys/fs/cgroup/${h}${rel}`);
      return true;
    } catch {
      return false;
    }
  });
}

/**
 * Egress from inside microVMs through the real server: the test builds a private internet in
 * namespaces (no route to the machine's real interfaces, test/net/topology.ts) and points the
 * server's uplink at it. Each VM's QEMU runs in the VM's own sandbox netns with a tap; the guest is
 * configured from the seed message. Nothing leaves the machine. python3.11 runs the same probe as
 * the namespace backend's e2e test.
 */
describe(
  "network egress from microVMs [microvm, real server]",
  {
    skip: skip ?? false,
    timeout: 600_000,
  },
  () => {
    let topo: Topology;
    let h: McpHarness;
    const seen = { pids: new Set<number>(), cgroups: new Set<string>() };
    const probeSource = readFileSync(PROBE, "utf8");

    before(async () => {
      topo = await new Topology().build();
      h = await startServer({
        SCRATCHRUN_ISOLATION: "microvm",
        SCRATCHRUN_POOL_SIZE: "python3.11=1",
        SCRATCHRUN_NETWORK: "public",
        SCRATCHRUN_UPLINK_NETNS: topo.uplinkNs,
        SCRATCHRUN_NET_PREFIX: topo.uplink.prefix,
        SCRATCHRUN_DNS: RESOLVER,
        SCRATCHRUN_ENABLE_FORWARDING: "1",
      });
    });
    after(async () => {
      await h?.close();
      // The server tears its VMs and their networks down as it exits; give it a bounded moment.
      let left = await listSandboxNetworkResources(topo.uplink);
      for (
        let i = 0;
        i < 100 && (left.netns.length || left.links.length || left.tables.length);
        i++
      ) {
        await new Promise((r) => setTimeout(r, 100));
        left = await listSandboxNetworkResources(topo.uplink);
      }
      await topo.destroy();
      assert.deepEqual(
        left,
        { netns: [], links: [], tables: [] },
        "sandbox networks were torn down",
      );
      assert.deepEqual(
        await topo.leftovers(),
        [],
        "no namespace of the topology or a sandbox left",
      );
      assert.ok(seen.pids.size > 0, "the test saw the server's QEMU processes");
      for (let i = 0; i < 100 && [...seen.pids].some(alive); i++)
        await new Promise((r) => setTimeout(r, 100));
      assert.deepEqual([...seen.pids].filter(alive), [], "a QEMU process outlived the server");
      assert.deepEqual([...seen.cgroups].filter(cgroupExists), [], "a VM cgroup was left");
    });

    function record(): void {
      const v = ourVms();
      for (const p of v.pids) seen.pids.add(p);
      for (const c of v.cgroups) seen.cgroups.add(c);
    }

    async function runProbe(checks: Check[], network: "public" | "none") {
      const code = `import sys\nsys.argv = ['probe', ${JSON.stringify(JSON.stringify(checks))}]\n${probeSource}`;
      record();
      const { s } = await h.exec({ runtime: "python3.11", code, network, timeout_ms: 30_000 });
      record();
      assert.equal(s.exit_reason, "ok", s.stderr);
      assert.match(s.isolation, /^microvm-(kvm|tcg)$/);
      return { res: JSON.parse(s.stdout) as ProbeResult, s };
    }

    test("public hosts answer over TCP, UDP and ICMP; names resolve through the given resolver", async () => {
      const { res, s } = await runProbe(
        [
          { label: "tcp", kind: "tcp", host: PUBLIC },
          { label: "udp", kind: "udp", host: PUBLIC },
          { label: "icmp", kind: "icmp", host: PUBLIC },
          { label: "dns", kind: "tcp", host: "public.test" },
        ],
        "public",
      );
      for (const [label, r] of Object.entries(res)) assert.ok(r.ok, `${label}: ${r.detail}`);
      assert.equal(s.network, "public");
      assert.match(topo.log("pub"), /tcp scratchrun-probe/, "the public host logged the probe");
    });

    test("blocked ranges, numeric tricks, the uplink host and names resolving inward are unreachable", async () => {
      const mark = topo.mark();
      const checks: Check[] = [];
      for (const [name, addr] of Object.entries(BLOCKED_HOSTS))
        for (const kind of ["tcp", "udp", "icmp"] as const)
          checks.push({ label: `${name}/${kind}`, kind, host: addr });
      for (const trick of ["2852039166", "0xa9.0xfe.0xa9.0xfe", "::ffff:169.254.169.254", "0x7f.1"])
        checks.push({ label: `trick ${trick}`, kind: "tcp", host: trick });
      checks.push({ label: "uplink host", kind: "tcp", host: UPLINK_ADDR });
      checks.push({ label: "uplink host/udp", kind: "udp", host: UPLINK_ADDR });
      checks.push({ label: "private.test", kind: "tcp", host: "private.test" });
      const { res, s } = await runProbe(checks, "public");
      const reached = Object.entries(res)
        .filter(([, r]) => r.ok)
        .map(([l]) => l);
      assert.deepEqual(reached, []);
      assert.ok((s.network_blocked_packets ?? 0) > 0, "the filter counted the drops");
      // Not a single probe packet arrived at any blocked host or the uplink host.
      for (const name of ["p10", "p172", "p192", "meta", "cgnat", "ula", "uplink"])
        assert.doesNotMatch(topo.logSince(mark, name), /scratchrun-probe/, `${name} got a packet`);
    });

    test('network "none" reaches nothing, not even public hosts or the resolver', async () => {
      const mark = topo.mark();
      const { res, s } = await runProbe(
        [
          { label: "tcp", kind: "tcp", host: PUBLIC },
          { label: "udp", kind: "udp", host: PUBLIC },
          { label: "icmp", kind: "icmp", host: PUBLIC },
          { label: "dns", kind: "resolve", host: "public.test" },
        ],
        "none",
      );
      assert.deepEqual(
        Object.entries(res)
          .filter(([, r]) => r.ok)
          .map(([l]) => l),
        [],
      );
      assert.equal(s.network, "none");
      assert.equal(s.network_blocked_packets, undefined);
      assert.doesNotMatch(topo.logSince(mark, "pub"), /scratchrun-probe/, "pub got a packet");
    });
  },
);
