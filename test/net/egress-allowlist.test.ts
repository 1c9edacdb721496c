/**
 * The egress allowlist from inside real sandboxes (netns + bwrap: the namespace backend's network)
 * in the private test internet (topology.ts, web.ts): the real proxy child in the uplink namespace,
 * the real per-sandbox and guard nftables rules. Every refusal is paired with a control (the same
 * request reaches the same host from an unrestricted sandbox), the refused host's own log proves
 * nothing arrived there, and the refusal is fast (a reset, a TLS alert, a 403, NXDOMAIN; never a
 * timeout) and named in the sandbox's report. Nothing leaves the test namespaces.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { parseAllowlist } from "../../src/net/allowlist.js";
import { runCommand } from "../../src/net/commands.js";
import { listSandboxNetworkResources } from "../../src/net/resources.js";
import { createSandboxNetwork, type SandboxNetwork } from "../../src/net/sandbox-net.js";
import { EgressProxy, PROXY_UID_BASE, proxyTableName } from "../../src/net/proxy/supervisor.js";
import { egressOf } from "../../src/compose/network.js";
import type { NetworkEgress, NetworkReport } from "../../src/backends/types.js";
import {
  PROBE,
  probe,
  PUBLIC6,
  RESOLVER,
  Topology,
  UPLINK_ADDR,
  type Check,
  type ProbeResult,
} from "./topology.js";
import {
  ALLOWED_IP,
  echHello,
  INWARD_IP,
  REFUSED_IP,
  ROGUE_DNS,
  TEST_ALLOWLIST,
  WebHosts,
  type WebHost,
} from "./web.js";

type Sandbox = { net: SandboxNetwork; egress: NetworkEgress & { teardown(): Promise<void> } };

/** How a refusal looks from inside: at once, never a timeout. */
const FAST =
  /ConnectionResetError|ConnectionRefusedError|ALERT_ACCESS_DENIED|403 Forbidden|rcode=3|Name or service not known|No address associated|No route to host|recv 15030300020231/;

describe("egress allowlist (real namespaces, proxy and rules)", { timeout: 300_000 }, () => {
  let topo: Topology;
  let web: WebHosts;
  let proxy: EgressProxy;
  let dir: string;
  let resolvPath: string;
  const allow = parseAllowlist(TEST_ALLOWLIST);
  let seq = 0;
  const live: Sandbox[] = [];

  async function sandbox(proxied: boolean): Promise<Sandbox> {
    seq += 1;
    const net = await createSandboxNetwork({
      id: `a${seq}`,
      uplink: topo.uplink,
      ...(proxied ? { proxy: proxy.ports } : {}),
    });
    const egress = await egressOf(net, proxied ? proxy : null, proxied ? allow : null);
    const s = { net, egress };
    live.push(s);
    return s;
  }

  async function drop(s: Sandbox): Promise<void> {
    live.splice(live.indexOf(s), 1);
    await s.egress.teardown();
  }

  const run = (s: Sandbox, checks: Check[]): Promise<ProbeResult> =>
    probe(s.net.netns, checks, { resolvConfPath: resolvPath });

  /** Runs `checks` in an open sandbox (all must succeed: the control) and in a proxied one. */
  async function withControl(
    checks: Check[],
  ): Promise<{ res: ProbeResult; report: NetworkReport }> {
    const open = await sandbox(false);
    const control = await run(open, checks);
    await drop(open);
    const failed = Object.entries(control).filter(([, r]) => !r.ok);
    assert.deepEqual(failed, [], "control: without the allowlist these succeed");
    const s = await sandbox(true);
    const res = await run(s, checks);
    const report = await s.egress.report();
    await drop(s);
    return { res, report };
  }

  function assertRefusedFast(res: ProbeResult, labels: string[]): void {
    for (const l of labels) {
      const r = res[l];
      assert.ok(r, `${l} ran`);
      assert.equal(r.ok, false, `${l} must be refused: ${r.detail}`);
      assert.match(r.detail, FAST, `${l} refused at once, not left to time out: ${r.detail}`);
    }
  }

  function assertNothingArrived(mark: Map<WebHost, number>, host: WebHost): void {
    assert.equal(web.since(mark, host), "", `${host} must see no connection, request or query`);
  }

  const refusal = (report: NetworkReport, host: string | null, port: number) =>
    report.refused?.find((r) => r.host === host && r.port === port);

  before(async () => {
    topo = await new Topology().build();
    web = await new WebHosts(topo).start();
    proxy = await EgressProxy.start(topo.uplink, PROXY_UID_BASE + 63);
    dir = mkdtempSync(join(tmpdir(), "sr-allow-"));
    resolvPath = join(dir, "resolv.conf");
    writeFileSync(resolvPath, `nameserver ${RESOLVER}\noptions timeout:1 attempts:1\n`);
  });

  after(async () => {
    for (const s of live.splice(0)) await s.egress.teardown();
    await proxy?.close();
    await web?.stop();
    const left = await listSandboxNetworkResources(topo.uplink);
    await topo.destroy();
    rmSync(dir, { recursive: true, force: true });
    assert.deepEqual(
      left,
      { netns: [], links: [], tables: [] },
      "networks and the guard table removed",
    );
  });

  it("allowed names (exact and under a wildcard) answer over HTTPS and HTTP, reaching their own host", async () => {
    const s = await sandbox(true);
    const mark = web.mark();
    const res = await run(s, [
      { label: "https allowed.test", kind: "https", host: "allowed.test" },
      { label: "http allowed.test", kind: "http", host: "allowed.test" },
      { label: "https a.wild.test", kind: "https", host: "a.wild.test" },
      { label: "http deep.b.wild.test", kind: "http", host: "deep.b.wild.test" },
      { label: "resolve", kind: "resolve", host: "allowed.test" },
    ]);
    for (const [label, r] of Object.entries(res)) assert.ok(r.ok, `${label}: ${r.detail}`);
    assert.equal(
      res.resolve?.detail,
      ALLOWED_IP,
      "the proxy's DNS answers with the name's address",
    );
    const seen = web.since(mark, "allowed");
    assert.match(seen, /https sni=allowed\.test host=allowed\.test/);
    assert.match(seen, /https sni=a\.wild\.test host=a\.wild\.test/);
    assert.match(seen, /http host=deep\.b\.wild\.test/);
    assert.deepEqual((await s.egress.report()).refused, []);
    await drop(s);
  });

  it("a refused name fails by name (DNS NXDOMAIN at once), also the bare parent of a wildcard", async () => {
    const checks: Check[] = [
      { label: "https refused.test", kind: "https", host: "refused.test" },
      { label: "http refused.test", kind: "http", host: "refused.test" },
      { label: "http wild.test", kind: "http", host: "wild.test" },
    ];
    const mark = web.mark();
    const { res, report } = await withControl(checks);
    const after = web.mark();
    assertRefusedFast(res, Object.keys(res));
    assert.ok((refusal(report, "refused.test", 53)?.count ?? 0) >= 1, JSON.stringify(report));
    assert.equal(refusal(report, "wild.test", 53)?.reason, "not_allowed");
    // The control reached refused.test: the proxied sandbox's part added nothing after it.
    assert.match(web.since(mark, "refused"), /https sni=refused\.test/);
    void after;
  });

  it("a raw IP is refused: HTTPS without SNI (DoH to an address), HTTP with an address as Host, other ports and protocols", async () => {
    const checks: Check[] = [
      {
        label: "https ip no sni",
        kind: "https",
        host: REFUSED_IP,
        sni: null,
        hostHeader: "refused.test",
      },
      { label: "http ip", kind: "http", host: REFUSED_IP },
      { label: "tcp 7", kind: "tcp", host: REFUSED_IP },
      { label: "udp 7", kind: "udp", host: REFUSED_IP, connect: true },
      { label: "tcp 7 of an allowed host", kind: "tcp", host: ALLOWED_IP },
    ];
    const open = await sandbox(false);
    const control = await run(open, checks);
    await drop(open);
    assert.deepEqual(
      Object.entries(control).filter(([, r]) => !r.ok),
      [],
      "control",
    );
    const s = await sandbox(true);
    const mark = web.mark();
    const logMark = topo.mark();
    const res = await run(s, checks);
    const report = await s.egress.report();
    await drop(s);
    assertRefusedFast(res, Object.keys(res));
    assertNothingArrived(mark, "refused");
    assert.doesNotMatch(
      topo.logSince(logMark, "pub2"),
      /scratchrun-probe/,
      "no echo packet arrived",
    );
    assert.doesNotMatch(
      topo.logSince(logMark, "pub"),
      /scratchrun-probe/,
      "no echo packet arrived",
    );
    assert.equal(refusal(report, null, 443)?.reason, "no_name");
    assert.equal(refusal(report, REFUSED_IP, 80)?.reason, "ip_address");
    assert.ok(report.blockedPackets >= 3, `non-web packets counted: ${report.blockedPackets}`);
  });

  it("its own resolver: DNS sent to another server is answered by the proxy, which never forwards it", async () => {
    const checks: Check[] = [
      { label: "udp refused", kind: "dnsq", server: ROGUE_DNS, name: "refused.test" },
      { label: "tcp refused", kind: "dnsq", server: ROGUE_DNS, name: "refused.test", tcp: true },
      { label: "udp rogue", kind: "dnsq", server: ROGUE_DNS, name: "rogue.test" },
    ];
    const { res, report } = await withControl(checks);
    const mark = web.mark();
    assertRefusedFast(res, Object.keys(res));
    assert.ok(refusal(report, "rogue.test", 53), JSON.stringify(report));
    // An allowed name asked of the rogue server gets the proxy's answer, not the rogue's.
    const s = await sandbox(true);
    const r = await run(s, [
      { label: "allowed via rogue", kind: "dnsq", server: ROGUE_DNS, name: "allowed.test" },
    ]);
    await drop(s);
    assert.equal(r["allowed via rogue"]?.detail, `rcode=0 ${ALLOWED_IP}`);
    assertNothingArrived(mark, "refused");
  });

  it("SNI allowed but sent to a refused IP: it reaches the allowed name's own host, never the IP", async () => {
    const s = await sandbox(true);
    const mark = web.mark();
    const res = await run(s, [
      { label: "sni allowed to refused ip", kind: "https", host: REFUSED_IP, sni: "allowed.test" },
      {
        label: "sni allowed, Host refused",
        kind: "https",
        host: REFUSED_IP,
        sni: "allowed.test",
        hostHeader: "refused.test",
      },
      {
        label: "http Host allowed to refused ip",
        kind: "http",
        host: REFUSED_IP,
        hostHeader: "allowed.test",
      },
    ]);
    await drop(s);
    for (const [label, r] of Object.entries(res)) assert.ok(r.ok, `${label}: ${r.detail}`);
    assertNothingArrived(mark, "refused");
    const seen = web.since(mark, "allowed");
    assert.match(seen, /https sni=allowed\.test host=allowed\.test/);
    // The Host inside TLS is the allowed server's business: it reached that server, nothing else.
    assert.match(seen, /https sni=allowed\.test host=refused\.test/);
    assert.match(seen, /http host=allowed\.test/);
  });

  it("SNI refused but Host allowed, or HTTP Host refused at an allowed IP: refused before any connection out", async () => {
    const checks: Check[] = [
      {
        label: "sni refused, Host allowed",
        kind: "https",
        host: ALLOWED_IP,
        sni: "refused.test",
        hostHeader: "allowed.test",
      },
      {
        label: "http Host refused at allowed ip",
        kind: "http",
        host: ALLOWED_IP,
        hostHeader: "refused.test",
      },
    ];
    const open = await sandbox(false);
    const control = await run(open, checks);
    await drop(open);
    assert.deepEqual(
      Object.entries(control).filter(([, r]) => !r.ok),
      [],
      "control",
    );
    const s = await sandbox(true);
    const mark = web.mark();
    const res = await run(s, checks);
    const report = await s.egress.report();
    await drop(s);
    assertRefusedFast(res, Object.keys(res));
    assertNothingArrived(mark, "allowed");
    assertNothingArrived(mark, "refused");
    assert.equal(refusal(report, "refused.test", 443)?.reason, "not_allowed");
    assert.equal(refusal(report, "refused.test", 80)?.reason, "not_allowed");
    assert.match(
      res["http Host refused at allowed ip"]?.detail ?? "",
      /403 Forbidden \| ScratchRun egress allowlist: refused refused\.test \(not_allowed\)/,
    );
  });

  it("Encrypted Client Hello is refused even with an allowed outer name", async () => {
    const s = await sandbox(true);
    const mark = web.mark();
    const res = await run(s, [
      { label: "ech", kind: "raw", host: ALLOWED_IP, port: 443, hex: echHello("allowed.test") },
    ]);
    const report = await s.egress.report();
    await drop(s);
    assert.equal(res.ech?.detail, "recv 15030300020231", "a fatal access_denied alert");
    assert.equal(refusal(report, "allowed.test", 443)?.reason, "ech");
    assertNothingArrived(mark, "allowed");
  });

  it("the blocked ranges and the host still come first: an allowed name resolving inward, and inward addresses", async () => {
    const s = await sandbox(true);
    const mark = web.mark();
    const before = (await s.egress.report()).blockedPackets;
    const res = await run(s, [
      { label: "resolve inward.test", kind: "resolve", host: "inward.test" },
      { label: "https sni inward.test", kind: "https", host: ALLOWED_IP, sni: "inward.test" },
      { label: "http Host uplink.test", kind: "http", host: ALLOWED_IP, hostHeader: "uplink.test" },
      { label: "https to 10.x", kind: "https", host: INWARD_IP, sni: "allowed.test" },
      { label: "https to the host", kind: "https", host: UPLINK_ADDR, sni: "allowed.test" },
    ]);
    const report = await s.egress.report();
    await drop(s);
    for (const [label, r] of Object.entries(res))
      assert.equal(r.ok, false, `${label}: ${r.detail}`);
    assertNothingArrived(mark, "inward");
    assert.equal(refusal(report, "inward.test", 53)?.reason, "blocked_address");
    assert.equal(refusal(report, "inward.test", 443)?.reason, "blocked_address");
    assert.equal(refusal(report, "uplink.test", 80)?.reason, "blocked_address");
    // Direct to a blocked address: dropped on the wire as always (not redirected), and counted.
    assert.ok(report.blockedPackets > before, `${before} -> ${report.blockedPackets}`);
    assert.equal(refusal(report, "allowed.test", 443), undefined, "never reached the proxy");
  });

  it("the proxy's uid cannot reach what sandboxes cannot (the guard table), and its ports are closed to the LAN", async () => {
    const uid = String(proxy.uid);
    // setpriv must run inside the namespace (ip netns exec needs root): exec ip first.
    const probeAs = async (user: string | null, checks: Check[]) => {
      const drop = user
        ? ["/usr/bin/setpriv", `--reuid=${user}`, `--regid=${user}`, "--clear-groups"]
        : [];
      const r = await runCommand(
        [
          "/usr/sbin/ip",
          "netns",
          "exec",
          topo.uplinkNs,
          ...drop,
          "/usr/bin/python3.11",
          PROBE,
          JSON.stringify(checks),
        ],
        undefined,
        20_000,
      );
      assert.equal(r.code, 0, r.stderr);
      return JSON.parse(r.stdout) as ProbeResult;
    };
    const checks: Check[] = [
      { label: "private web", kind: "http", host: INWARD_IP, hostHeader: "inward.test" },
      { label: "metadata echo", kind: "tcp", host: "169.254.169.254" },
      { label: "public echo port", kind: "tcp", host: ALLOWED_IP },
      { label: "public udp", kind: "udp", host: ALLOWED_IP },
      { label: "public https", kind: "https", host: ALLOWED_IP, sni: "allowed.test" },
    ];
    const root = await probeAs(null, checks);
    assert.deepEqual(
      Object.entries(root).filter(([, r]) => !r.ok),
      [],
      "control: another uid reaches them all",
    );
    const res = await probeAs(uid, checks);
    assert.equal(res["public https"]?.ok, true, res["public https"]?.detail);
    for (const l of ["private web", "metadata echo", "public echo port", "public udp"]) {
      assert.equal(res[l]?.ok, false, `${l}: ${res[l]?.detail}`);
      assert.match(
        res[l]?.detail ?? "",
        /Refused|unreachable|No route|not permitted/i,
        `${l} refused at once`,
      );
    }
    // From the LAN side (the router), the proxy's ports are dropped; a sandbox link is the only way in.
    const lan = await runCommand([
      "/usr/sbin/ip",
      "netns",
      "exec",
      topo.routerNs,
      "/usr/bin/python3.11",
      PROBE,
      JSON.stringify([
        { label: "tls port", kind: "tcp", host: UPLINK_ADDR, port: proxy.ports.tls },
      ]),
    ]);
    const lanRes = JSON.parse(lan.stdout) as ProbeResult;
    assert.equal(lanRes["tls port"]?.ok, false);
    assert.match(lanRes["tls port"]?.detail ?? "", /timed out/, "dropped, not even refused");
    assert.ok(proxyTableName(topo.uplink).startsWith(topo.uplink.prefix));
  });

  it("IPv6 takes the same road: port 443 to any v6 address goes to the proxy, other ports are refused", async () => {
    const s = await sandbox(true);
    assert.ok(s.net.addresses.sandboxV6, "the topology gives sandboxes IPv6");
    const mark = web.mark();
    const logMark = topo.mark();
    const res = await run(s, [
      { label: "v6 sni allowed", kind: "https", host: PUBLIC6, sni: "allowed.test" },
      { label: "v6 no sni", kind: "https", host: PUBLIC6, sni: null },
      { label: "v6 tcp 7", kind: "tcp", host: PUBLIC6 },
    ]);
    const report = await s.egress.report();
    await drop(s);
    assert.ok(res["v6 sni allowed"]?.ok, res["v6 sni allowed"]?.detail);
    assertRefusedFast(res, ["v6 no sni", "v6 tcp 7"]);
    assert.match(web.since(mark, "allowed"), /https sni=allowed\.test/);
    assert.doesNotMatch(
      topo.logSince(logMark, "pub"),
      /scratchrun-probe/,
      "no echo packet arrived",
    );
    assert.equal(refusal(report, null, 443)?.reason, "no_name");
  });

  it("a killed proxy fails closed, comes back on its ports and is told its sandboxes again", async () => {
    const s = await sandbox(true);
    const pid = proxy.pid;
    assert.ok(pid);
    process.kill(pid, "SIGKILL");
    const down = await run(s, [
      { label: "https", kind: "https", host: ALLOWED_IP, sni: "allowed.test" },
    ]);
    assert.equal(down.https?.ok, false, "nothing passes while the proxy is down");
    for (let i = 0; i < 100 && (proxy.starts < 2 || proxy.pid === undefined); i++)
      await new Promise((r) => setTimeout(r, 50));
    assert.equal(proxy.starts, 2);
    await new Promise((r) => setTimeout(r, 300));
    const up = await run(s, [{ label: "https", kind: "https", host: "allowed.test" }]);
    assert.ok(up.https?.ok, up.https?.detail);
    await drop(s);
  });

  it("a sandbox's report is its own: a new sandbox on the same address starts empty", async () => {
    const a = await sandbox(true);
    await run(a, [{ label: "refused", kind: "resolve", host: "refused.test" }]);
    assert.ok((await a.egress.report()).refused?.length);
    const addr = a.net.addresses.sandboxV4;
    await drop(a);
    const b = await sandbox(true);
    assert.equal(b.net.addresses.sandboxV4, addr, "the slot is reused");
    assert.deepEqual((await b.egress.report()).refused, []);
    await drop(b);
  });
});
