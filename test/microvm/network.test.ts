import { skipOutsideCi } from "../helpers/ci.js";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { createMicrovmBackend, type MicrovmBackend } from "../../src/backends/microvm/create.js";
import { listSandboxNetworkResources } from "../../src/net/resources.js";
import { networkFromEnv, type NetworkPlan } from "../../src/compose/network.js";
import { startServer, type McpHarness } from "../helpers/mcp-client.js";
import { running } from "../helpers/procs.js";
import { allProcStats } from "../../src/jail/procfs.js";
import {
  BLOCKED_HOSTS,
  probeProgram,
  PUBLIC,
  Topology,
  UPLINK_ADDR,
  type Check,
  type ProbeResult,
} from "../net/topology.js";
import {
  assertNoLeftovers,
  canRunMicrovm,
  hostLeftovers,
  makeTinyRoot,
  shJob,
  text,
  type TinyRoot,
} from "./fixture.js";

const skip = skipOutsideCi(canRunMicrovm());

/** pid -> [ppid, comm] of every process now. */
function processTable(): Map<number, [number, string]> {
  return new Map(allProcStats().map((p) => [p.pid, [p.ppid, p.comm]]));
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

    before(async () => {
      topo = await new Topology().build();
      h = await startServer({
        SCRATCHRUN_ISOLATION: "microvm",
        SCRATCHRUN_POOL_SIZE: "python3.11=1",
        SCRATCHRUN_NETWORK: "public",
        ...topo.serverEnv(),
      });
    });
    after(async () => {
      await h?.close();
      // The server tears its VMs and their networks down as it exits; give it a bounded moment.
      const left = await topo.networksLeft();
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
      for (let i = 0; i < 100 && [...seen.pids].some(running); i++)
        await new Promise((r) => setTimeout(r, 100));
      assert.deepEqual([...seen.pids].filter(running), [], "a QEMU process outlived the server");
      assert.deepEqual([...seen.cgroups].filter(cgroupExists), [], "a VM cgroup was left");
    });

    function record(): void {
      const v = ourVms();
      for (const p of v.pids) seen.pids.add(p);
      for (const c of v.cgroups) seen.cgroups.add(c);
    }

    async function runProbe(checks: Check[], network: "public" | "none") {
      const code = probeProgram(checks);
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

/**
 * Two VMs at once on one uplink (the backend directly, busybox in a tiny root): one serves TCP
 * echo on its own address for a few seconds, the other tries every sandbox address of the first
 * slots meanwhile. Wall clocks (both set from the host's by the seed) prove the windows overlap,
 * and the server's own connection to itself proves it was listening.
 */
describe(
  "two simultaneous microVMs cannot reach each other",
  {
    skip: skip ?? false,
    timeout: 300_000,
  },
  () => {
    let topo: Topology;
    let root: TinyRoot;
    let plan: NetworkPlan;
    let backend: MicrovmBackend;
    let before0: Awaited<ReturnType<typeof hostLeftovers>>;

    before(async () => {
      topo = await new Topology().build();
      root = makeTinyRoot();
      before0 = await hostLeftovers();
      plan = await networkFromEnv({
        SCRATCHRUN_NETWORK: "public",
        ...topo.serverEnv(),
      });
      assert.ok(plan.provider, plan.reason);
      backend = await createMicrovmBackend({
        rootfsDir: root.rootfs,
        disk: root.disk,
        network: plan.provider,
        pool: { sizes: { bash: 2 }, mode: "restore" },
      });
      await backend.pool.whenFull();
    });
    after(async () => {
      await backend?.close();
      await plan?.provider?.close();
      const left = await listSandboxNetworkResources(topo.uplink);
      await topo.destroy();
      root.cleanup();
      assert.deepEqual(
        left,
        { netns: [], links: [], tables: [] },
        "sandbox networks were torn down",
      );
      await assertNoLeftovers(before0, "a VM or template left something behind");
    });

    test("a cold-booted VM (empty boot-mode pool) gets its network on demand, IPv4 only", async () => {
      // The on-demand path: network created, QEMU booted into it, guest seeded with its address.
      const cold = await createMicrovmBackend({
        rootfsDir: root.rootfs,
        disk: root.disk,
        network: plan.provider!,
        pool: { mode: "boot" },
      });
      try {
        const job = shJob(
          `echo tok | timeout 3 nc ${PUBLIC} 7; ip -o addr show eth0 | awk '{print $3}'; ` +
            "cat /proc/sys/net/ipv6/conf/eth0/disable_ipv6",
        );
        job.egress = { kind: "public" };
        const r = await cold.run(job, { signal: new AbortController().signal });
        assert.equal(r.agent.failure, null);
        assert.equal(text(r.agent.stdout), "tok\ninet\n1\n");
        assert.equal(cold.counters.bootedCalls, 1);
      } finally {
        await cold.close();
      }
    });

    test("the listener is never reached from the other VM", async () => {
      const server = shJob(
        "own=$(ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1); echo \"own $own\"; " +
          'nc -ll -p 7000 -e /home/user/echo.sh & sleep 0.5; echo "start $(date +%s)"; ' +
          'echo self | timeout 2 nc $own 7000; sleep 6; echo "end $(date +%s)"',
        {
          timeoutMs: 20_000,
          files: [
            {
              path: "/home/user/echo.sh",
              mode: 0o755,
              content: Buffer.from("#!/bin/sh\nexec /bin/busybox cat\n"),
            },
          ],
        },
      );
      const client = shJob(
        'sleep 1.5; echo "probe $(date +%s)"; for i in 2 6 10 14 18 22 26 30; do ' +
          '(echo from-b | timeout 2 nc 10.250.0.$i 7000 | sed "s/^/reply $i /") & done; wait; ' +
          'echo "probed $(date +%s)"',
        { timeoutMs: 20_000 },
      );
      server.egress = { kind: "public" };
      client.egress = { kind: "public" };
      const run = (j: typeof server) => backend.run(j, { signal: new AbortController().signal });
      const [a, b] = await Promise.all([run(server), run(client)]);
      type Outcome = typeof a;
      const out = (r: Outcome) => text(r.agent.stdout);
      const field = (r: Outcome, k: string) =>
        new RegExp(`^${k} (\\S+)$`, "m").exec(out(r))?.[1] ?? "";
      const own = field(a, "own");
      assert.match(own, /^10\.250\.0\.(2|6|10|14|18|22|26|30)$/, out(a));
      assert.match(out(a), /^self$/m, "control: the listener answered its own VM");
      const [start, end, probe, probed] = [
        Number(field(a, "start")),
        Number(field(a, "end")),
        Number(field(b, "probe")),
        Number(field(b, "probed")),
      ];
      assert.ok(start <= probe && probed <= end, `windows overlap: ${out(a)} / ${out(b)}`);
      assert.doesNotMatch(out(b), /^reply /m, `the other VM reached the listener: ${out(b)}`);
      assert.ok((b.network?.blockedPackets ?? 0) > 0, "the filter counted the attempts");
    });
  },
);
