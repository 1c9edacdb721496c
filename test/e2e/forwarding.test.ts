// NET-FRESH-HOST, NET-DOCKER-HOST, NET-REASON (issue 45): a new user's host through the real
// stdio server, per backend. The test's own private internet (test/net/topology.ts) stands in
// for the host: its uplink namespace starts as a fresh Debian's does (IPv4 forwarding off), with
// another link beside the sandboxes' (test/net/other-link.ts). The server starts with its
// defaults (SCRATCHRUN_NETWORK and SCRATCHRUN_ENABLE_FORWARDING unset). No packet leaves the
// test's namespaces.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";
import { inNetns, mustRun } from "../../src/net/commands.js";
import { GUARD_TABLE } from "../../src/net/forward-guard.js";
import { listSandboxNetworkResources } from "../../src/net/resources.js";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import { startServer, type ExecStructured } from "../helpers/mcp-client.js";
import { DOCKER, HOST_FIREWALL, OtherLink } from "../net/other-link.js";
import { probeProgram, PUBLIC, Topology, type ProbeResult } from "../net/topology.js";

type Result = ExecStructured & { network_reason?: string };

for (const backend of TEST_BACKENDS) {
  describe(`a fresh host's network through the server (${backend})`, { timeout: 600_000 }, () => {
    let topo: Topology;
    let other: OtherLink;
    let base: HostSnapshot;
    const up = () => topo.uplinkNs;
    const sysctl = (kv: string) => mustRun(inNetns(up(), "sysctl", ["-qw", kv]));
    const nft = (script: string) => mustRun(inNetns(up(), "nft", ["-f", "-"]), script);

    /** The server as a user starts it, on this test's uplink; its first call asks for nothing. */
    async function firstCall(env: Record<string, string> = {}) {
      const { SCRATCHRUN_ENABLE_FORWARDING: _, ...uplink } = topo.serverEnv();
      const h = await startServer({
        SCRATCHRUN_ISOLATION: backend,
        SCRATCHRUN_POOL_SIZE: "python3.11=1",
        ...uplink,
        // The helper's default is "none": unset it to the product's default (auto).
        SCRATCHRUN_NETWORK: "auto",
        ...env,
      });
      try {
        const code = probeProgram([{ label: "tcp", kind: "tcp", host: PUBLIC }], 5);
        const result = await h.call({ runtime: "python3.11", code, timeout_ms: 30_000 });
        const s = result.structuredContent as unknown as Result;
        assert.equal(s.exit_reason, "ok", s.stderr);
        const text = (result.content as { type: string; text?: string }[])
          .filter((c) => c.type === "text")
          .map((c) => c.text)
          .join("\n");
        return { s, tcp: (JSON.parse(s.stdout) as ProbeResult).tcp!, text, stderr: h.stderr() };
      } finally {
        await h.close();
      }
    }

    before(async () => {
      base = snapshot();
      topo = new Topology();
      try {
        await topo.build();
        other = await new OtherLink(topo).build();
      } catch (e) {
        await topo.destroy();
        throw e;
      }
    });
    beforeEach(async () => {
      await sysctl("net.ipv4.ip_forward=0");
      await sysctl("net.ipv6.conf.all.forwarding=0");
      for (const t of [`inet ${GUARD_TABLE}`, "ip filter", "inet hostfw"])
        await nft(`table ${t}\ndelete table ${t}\n`);
    });
    after(async () => {
      const left = await listSandboxNetworkResources(topo.uplink);
      await other.destroy();
      await topo.destroy();
      assert.deepEqual(left, { netns: [], links: [], tables: [] }, "sandbox networks torn down");
      await assertNoLeaks(base);
    });

    test("forwarding off before the server starts: a call's network is public and reaches a public host; another link's forwarded traffic is still dropped (control: forwarded once the guard is gone)", async () => {
      assert.equal((await other.reachesPublic()).ok, false, "off: the host forwards nothing");
      const { s, tcp, stderr } = await firstCall();
      assert.equal(s.network, "public");
      assert.equal(s.network_reason, undefined);
      assert.ok(tcp.ok, `the sandbox reached ${PUBLIC}: ${tcp.detail}`);
      assert.match(
        stderr,
        /IP forwarding was off: turned on, with forwarded traffic that is not a sandbox's dropped/,
      );
      // As Docker leaves its FORWARD policy: on and guarded after the server stops.
      assert.equal(
        (await mustRun(inNetns(up(), "sysctl", ["-n", "net.ipv4.ip_forward"]))).trim(),
        "1",
      );
      assert.equal((await other.reachesPublic()).ok, false, "another link is not forwarded");
      await nft(`delete table inet ${GUARD_TABLE}\n`);
      assert.ok((await other.reachesPublic()).ok, "control: forwarded without the guard");
    });

    test("SCRATCHRUN_ENABLE_FORWARDING=0 on a host whose forwarding is off: the call runs with none and its result says why, in the text a model reads too (SCRATCHRUN_NETWORK=none: the operator's choice, no reason)", async () => {
      const { s, tcp, text } = await firstCall({ SCRATCHRUN_ENABLE_FORWARDING: "0" });
      assert.equal(s.network, "none");
      assert.equal(tcp.ok, false);
      assert.match(
        s.network_reason ?? "",
        /^ran with network "none", not "public": IP forwarding is off on the uplink namespace .* SCRATCHRUN_ENABLE_FORWARDING=0 .*unset SCRATCHRUN_ENABLE_FORWARDING/,
      );
      assert.match(text, /^network: ran with network "none", not "public": IP forwarding is off/m);
      // The operator's own SCRATCHRUN_NETWORK=none is the tool description's to state, not each
      // result's.
      const chosen = await firstCall({ SCRATCHRUN_NETWORK: "none" });
      assert.equal(chosen.s.network, "none");
      assert.equal(chosen.s.network_reason, undefined);
      assert.doesNotMatch(chosen.text, /^network: /m);
    });

    test("Docker's FORWARD policy drop: the call still reaches a public host (its links let through DOCKER-USER)", async () => {
      await sysctl("net.ipv4.ip_forward=1");
      await nft(DOCKER);
      const { s, tcp, stderr } = await firstCall();
      assert.equal(s.network, "public");
      assert.ok(tcp.ok, tcp.detail);
      assert.equal(s.network_reason, undefined);
      assert.match(stderr, /the sandbox links let through Docker's DOCKER-USER chain \(ip\)/);
    });

    test("a host firewall that drops forwarding and is not Docker's: the result says the host dropped the call's packets", async () => {
      await sysctl("net.ipv4.ip_forward=1");
      await nft(HOST_FIREWALL);
      const { s, tcp, text, stderr } = await firstCall();
      assert.equal(s.network, "public");
      assert.equal(tcp.ok, false);
      assert.match(
        s.network_reason ?? "",
        /^the host's own firewall dropped \d+ packets? this sandbox sent/,
      );
      assert.match(text, /^network: the host's own firewall dropped/m);
      assert.match(stderr, /warning: the forward chain inet hostfw forward drops by policy/);
    });
  });
}
