import { PY } from "../helpers/pythons.js";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, mkdirSync, statSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { listSandboxNetworkResources } from "../../src/net/resources.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import { serverParams, startServer, type McpHarness } from "../helpers/mcp-client.js";
import {
  BLOCKED_HOSTS,
  probeProgram,
  PUBLIC,
  Topology,
  UPLINK_ADDR,
  type Check,
  type ProbeResult,
} from "../net/topology.js";

/**
 * Egress through the real server: the test builds a private internet in namespaces (no route to
 * the machine's real interfaces) and points the server's uplink at it. Nothing leaves the machine.
 */
describe("network egress through the MCP server [namespace]", { timeout: 180_000 }, () => {
  let topo: Topology;
  let h: McpHarness;
  let base: HostSnapshot;

  before(async () => {
    base = snapshot();
    topo = await new Topology().build();
    // As an older build's uid locks left it on a fresh host (mkdir -p gave it their 0700): every
    // jail opens its resolv.conf under /run/scratchrun, so the server must open it to traverse.
    mkdirSync("/run/scratchrun", { recursive: true });
    chmodSync("/run/scratchrun", 0o700);
    h = await startServer({
      SCRATCHRUN_ISOLATION: "namespace",
      SCRATCHRUN_NETWORK: "public",
      ...topo.serverEnv(),
    });
  });
  after(async () => {
    await h?.close();
    const left = await listSandboxNetworkResources(topo.uplink);
    await topo.destroy();
    assert.deepEqual(left, { netns: [], links: [], tables: [] }, "sandbox networks were torn down");
    await assertNoLeaks(base);
  });

  async function runProbe(checks: Check[], network: "public" | "none") {
    const code = probeProgram(checks);
    const { s } = await h.exec({ runtime: PY, code, network, timeout_ms: 20_000 });
    assert.equal(s.exit_reason, "ok", s.stderr);
    return { res: JSON.parse(s.stdout) as ProbeResult, s };
  }

  test("public hosts answer over TCP, UDP and ICMP; names resolve", async () => {
    assert.equal(
      statSync("/run/scratchrun").mode & 0o001,
      0o001,
      "/run/scratchrun opened to jails",
    );
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
  });

  test("blocked ranges, numeric tricks, the host and names resolving inward are unreachable", async () => {
    const checks: Check[] = [];
    for (const [name, addr] of Object.entries(BLOCKED_HOSTS))
      for (const kind of ["tcp", "udp", "icmp"] as const)
        checks.push({ label: `${name}/${kind}`, kind, host: addr });
    for (const trick of [
      "2852039166",
      "0xa9.0xfe.0xa9.0xfe",
      "::ffff:169.254.169.254",
      "2130706433",
      "0x7f.1",
    ])
      checks.push({ label: `trick ${trick}`, kind: "tcp", host: trick });
    checks.push({ label: "uplink host", kind: "tcp", host: UPLINK_ADDR });
    checks.push({ label: "private.test", kind: "tcp", host: "private.test" });
    const { res, s } = await runProbe(checks, "public");
    const reached = Object.entries(res)
      .filter(([, r]) => r.ok)
      .map(([l]) => l);
    assert.deepEqual(reached, []);
    assert.ok((s.network_blocked_packets ?? 0) > 0, "the filter counted the drops");
  });

  test('network "none" reaches nothing, not even public hosts', async () => {
    const { res, s } = await runProbe([{ label: "tcp", kind: "tcp", host: PUBLIC }], "none");
    assert.equal(res.tcp?.ok, false);
    assert.equal(s.network, "none");
  });

  test("a second server on this uplink runs without network and says why; the first's sandboxes keep theirs", async () => {
    // The first server has networks made ahead (SCRATCHRUN_NET_READY): without the claim on the
    // uplink, the second's start would remove them as a dead server's leftovers.
    // The earlier tests' used networks are removed in the background: the networks counted are
    // those left once nothing was removed for 2 s (the ready ones; more may be added meanwhile).
    const mine = async () => (await listSandboxNetworkResources(topo.uplink)).netns;
    let ready = await mine();
    for (let still = 0, waited = 0; (still < 2000 || ready.length === 0) && waited < 30_000;) {
      await new Promise((r) => setTimeout(r, 250));
      waited += 250;
      const now = await mine();
      still = ready.every((n) => now.includes(n)) ? still + 250 : 0;
      ready = now;
    }
    assert.ok(ready.length > 0, "the first server made networks ahead");
    const second = await startServer({
      SCRATCHRUN_ISOLATION: "namespace",
      SCRATCHRUN_NETWORK: "auto",
      ...topo.serverEnv(),
    });
    try {
      const { s } = await second.exec({ runtime: PY, code: "print(1)", network: "public" });
      const now = new Set(await mine());
      assert.deepEqual(
        ready.filter((n) => !now.has(n)),
        [],
        "the second server's start removed none of the first's networks",
      );
      assert.equal(s.exit_reason, "ok", s.stderr);
      assert.equal(s.network, "none");
      assert.match(
        (s as { network_reason?: string }).network_reason ?? "",
        new RegExp(
          `another ScratchRun server \\(pid \\d+\\) on this host runs public networking on prefix "${topo.uplink.prefix}".*SCRATCHRUN_NETWORK=none`,
        ),
      );
      // Asked for public outright, it refuses to start, naming the holder and the way out.
      const { exit, stderr } = await new Promise<{
        exit: number | null;
        stderr: string;
      }>((resolve) => {
        const p = serverParams({
          SCRATCHRUN_ISOLATION: "namespace",
          SCRATCHRUN_NETWORK: "public",
          ...topo.serverEnv(),
        });
        const child = spawn(p.command, p.args, { env: p.env, stdio: ["pipe", "ignore", "pipe"] });
        let err = "";
        child.stderr.on("data", (d: Buffer) => (err += d.toString()));
        const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
        child.on("exit", (code) => {
          clearTimeout(timer);
          resolve({ exit: code, stderr: err });
        });
      });
      assert.notEqual(exit, 0, "the server exits");
      assert.match(
        stderr,
        /another ScratchRun server \(pid \d+\) on this host runs public networking on prefix .*SCRATCHRUN_NETWORK=none/,
      );
    } finally {
      await second.close();
    }
    const { res } = await runProbe([{ label: "tcp", kind: "tcp", host: PUBLIC }], "public");
    assert.ok(res.tcp!.ok, `the first server's sandbox still reaches out: ${res.tcp!.detail}`);
  });
});
