/**
 * The egress proxy under load from a hostile sandbox (issue 28): connection floods and trickles
 * from sandbox networks in the private test internet (test/net/topology.ts, web.ts), against the
 * real proxy child and the real per-sandbox rules. The proxy runs with a small file limit here
 * (1024) so that a flood of a thousand connections reaches it; its bounds follow from that limit
 * as they do from the product's (admission.ts). Floods are bounded in count and time and come
 * from test namespaces only.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { after, before, describe, it } from "node:test";
import { parseAllowlist } from "../../src/net/allowlist.js";
import {
  MAX_CONNECTIONS_PER_SANDBOX,
  totalConnectionBound,
} from "../../src/net/proxy/admission.js";
import { FIRST_BYTES_TIMEOUT_MS } from "../../src/net/proxy/streams.js";
import type { NetworkReport } from "../../src/backends/types.js";
import { EgressFixture, type Sandbox } from "../net/egress-fixture.js";
import { REPO, RESOLVER, type Check, type ProbeResult } from "../net/topology.js";
import { ALLOWED_IP, TEST_ALLOWLIST } from "../net/web.js";

const HOLD = `${REPO}test/net/fixtures/hold.py`;
/** The proxy's file limit in this file: small enough for a flood of a thousand to reach it. */
const MAX_FILES = 1024;
const TOTAL = totalConnectionBound(MAX_FILES);

interface Counts {
  connected: number;
  alive: number;
  failed: number;
}
interface TrickleCounts {
  connected: number;
  closed_by_peer: number;
  sent_records: number;
}

/** hold.py in `ns`: its first report, then finish() closes its connections and gives the last. */
function hold(ns: string, spec: object): { first: Promise<Counts>; finish(): Promise<Counts> } {
  const child = spawn(
    "/usr/sbin/ip",
    ["netns", "exec", ns, "/usr/bin/python3.11", HOLD, JSON.stringify(spec)],
    { stdio: ["pipe", "pipe", "inherit"] },
  );
  const lines: string[] = [];
  const waiters: Array<() => void> = [];
  createInterface({ input: child.stdout }).on("line", (l) => {
    lines.push(l);
    waiters.splice(0).forEach((w) => w());
  });
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const line = async (i: number): Promise<string> => {
    while (lines.length <= i) {
      const got = new Promise<void>((r) => waiters.push(r));
      const gone = exited.then(() => {
        if (lines.length <= i) throw new Error("hold.py ended without reporting");
      });
      await Promise.race([got, gone]);
    }
    return lines[i] as string;
  };
  const first = line(0).then((l) => JSON.parse(l) as Counts);
  first.catch(() => undefined);
  return {
    first,
    async finish() {
      child.stdin.end();
      const last = JSON.parse(await line(1)) as Counts;
      await exited;
      return last;
    },
  };
}

describe("the egress proxy under a hostile sandbox's load", { timeout: 300_000 }, () => {
  const fx = new EgressFixture({
    idPrefix: "l",
    proxy: { uidOffset: 62, options: { maxFiles: MAX_FILES } },
  });
  const allow = parseAllowlist(TEST_ALLOWLIST);
  const sandbox = (): Promise<Sandbox> => fx.sandbox(allow);
  const drop = (s: Sandbox): Promise<void> => fx.drop(s);
  const run = (s: Sandbox, checks: Check[]): Promise<ProbeResult> => fx.run(s, checks);

  const refusal = (report: NetworkReport, host: string | null, port: number, reason: string) =>
    report.refused?.find((r) => r.host === host && r.port === port && r.reason === reason);

  /** The bystander's allowed requests: each must answer. */
  const BYSTANDER: Check[] = [
    { label: "https allowed.test", kind: "https", host: "allowed.test" },
    { label: "http allowed.test", kind: "http", host: "allowed.test" },
    { label: "dns over tcp", kind: "dnsq", server: RESOLVER, name: "allowed.test", tcp: true },
  ];

  function assertAnswered(res: ProbeResult): void {
    for (const [label, r] of Object.entries(res)) assert.ok(r.ok, `${label}: ${r.detail}`);
  }

  before(() => fx.start());
  after(() => fx.stop());

  it("SEC-PROXY-DNS-FLOOD: a thousand DNS-over-TCP connections from one sandbox leave another's egress working; the flood holds its bound and the rest are refused by name", async () => {
    const a = await sandbox();
    const b = await sandbox();
    const flood = hold(a.net.netns, { host: RESOLVER, port: 53, count: 1100, settle_s: 1 });
    const held = await flood.first;
    const res = await run(b, BYSTANDER);
    const last = await flood.finish();
    const report = await a.egress.report();
    assertAnswered(res);
    // A burst this size can overflow the listener's queue: a few SYNs lost past the 10 s allowed.
    assert.ok(held.connected >= 1000, JSON.stringify(held));
    assert.equal(held.alive, MAX_CONNECTIONS_PER_SANDBOX, JSON.stringify(held));
    assert.equal(last.alive, MAX_CONNECTIONS_PER_SANDBOX, `still held: ${JSON.stringify(last)}`);
    // Every connection past the bound is refused by name. The proxy may count a few more than the
    // flood saw connect: a handshake the kernel completed after the flood's 3 s gave up on it is
    // still accepted, and refused, by the proxy (a fresh-clone CI run: 844 against 818, of 1100).
    const refused = refusal(report, null, 53, "connection_limit")?.count ?? 0;
    assert.ok(
      refused >= held.connected - MAX_CONNECTIONS_PER_SANDBOX &&
        refused <= 1100 - MAX_CONNECTIONS_PER_SANDBOX,
      `${refused} refused of ${held.connected} connected: ${JSON.stringify(report.refused)}`,
    );
    assert.deepEqual((await b.egress.report()).refused, [], "the bystander was refused nothing");
    await drop(a);
    await drop(b);
  });

  it("SEC-PROXY-CONN-BOUND: a sandbox gets its whole bound of spliced connections (both ends are not counted), and the next ones are refused by name", async () => {
    const a = await sandbox();
    const mark = fx.web.mark();
    // A held connection: a real ClientHello for an allowed name, spliced to the allowed host,
    // whose TLS server answers and then waits for the rest of the handshake.
    const held = { host: ALLOWED_IP, port: 443, tls_name: "allowed.test", settle_s: 2 };
    // Two waves: the first is spliced (dialled) before the second arrives.
    const wave1 = hold(a.net.netns, { ...held, count: 200 });
    const first = await wave1.first;
    const wave2 = hold(a.net.netns, { ...held, count: 100 });
    const second = await wave2.first;
    const report = await a.egress.report();
    await wave2.finish();
    await wave1.finish();
    await drop(a);
    assert.equal(
      first.alive + second.alive,
      MAX_CONNECTIONS_PER_SANDBOX,
      JSON.stringify({ first, second }),
    );
    const arrived = fx.web
      .since(mark, "allowed")
      .split("\n")
      .filter((l) => l === "conn 443").length;
    assert.equal(
      arrived,
      MAX_CONNECTIONS_PER_SANDBOX,
      "each held connection reached the allowed host",
    );
    assert.equal(
      refusal(report, null, 443, "connection_limit")?.count,
      300 - MAX_CONNECTIONS_PER_SANDBOX,
      JSON.stringify(report.refused),
    );
  });

  it("SEC-PROXY-TOTAL-BOUND: past the proxy's own bound a connection is refused by name (proxy_busy), and capacity comes back when the flood ends", async () => {
    assert.ok(TOTAL > MAX_CONNECTIONS_PER_SANDBOX && TOTAL < 2 * MAX_CONNECTIONS_PER_SANDBOX);
    const a = await sandbox();
    const c = await sandbox();
    const b = await sandbox();
    const floodA = hold(a.net.netns, { host: RESOLVER, port: 53, count: 300, settle_s: 1 });
    const heldA = await floodA.first;
    const floodC = hold(c.net.netns, { host: RESOLVER, port: 53, count: 300, settle_s: 1 });
    const heldC = await floodC.first;
    const reportC = await c.egress.report();
    await floodC.finish();
    await floodA.finish();
    // Closed connections are counted out again: a third sandbox gets through.
    const res = await run(b, BYSTANDER);
    assertAnswered(res);
    assert.equal(heldA.alive, MAX_CONNECTIONS_PER_SANDBOX, JSON.stringify(heldA));
    assert.equal(heldC.alive, TOTAL - MAX_CONNECTIONS_PER_SANDBOX, JSON.stringify(heldC));
    assert.equal(
      refusal(reportC, null, 53, "proxy_busy")?.count,
      300 - (TOTAL - MAX_CONNECTIONS_PER_SANDBOX),
      JSON.stringify(reportC.refused),
    );
    for (const s of [a, c, b]) await drop(s);
  });

  it("SEC-PROXY-TRICKLE: one-byte TLS records on many connections: each gets its verdict within the time bound, named, and the proxy's work stays linear in the bytes", async () => {
    const a = await sandbox();
    // A hello that says it is 30000 bytes long, sent one byte per record: never complete in time.
    const hello = Buffer.concat([Buffer.from([1, 0, 0x75, 0x30]), Buffer.alloc(30_000, 7)]);
    const conns = 10;
    const workBefore = await fx.proxy.firstBytesWork();
    assert.ok(workBefore, "the proxy reports its readers' work");
    const t = hold(a.net.netns, {
      host: ALLOWED_IP,
      port: 443,
      count: conns,
      trickle: {
        hex: hello.toString("hex"),
        every_ms: 0.5,
        for_s: FIRST_BYTES_TIMEOUT_MS / 1000 + 3,
      },
    });
    const done = (await t.first) as unknown as TrickleCounts;
    const workAfter = await fx.proxy.firstBytesWork();
    assert.ok(workAfter);
    const report = await a.egress.report();
    await t.finish().catch(() => undefined);
    await drop(a);
    assert.equal(done.connected, conns);
    assert.equal(
      done.closed_by_peer,
      conns,
      `every connection got its verdict: ${JSON.stringify(done)}`,
    );
    assert.equal(
      refusal(report, null, 443, "protocol")?.count,
      conns,
      JSON.stringify(report.refused),
    );
    // Work per byte, counted, not timed: the bytes the proxy's readers looked at against the
    // bytes they were given before each verdict. Read once, that is 1 (2 at most: a whole hello
    // is parsed once more); re-read from the start on every record, it grows with the records a
    // connection has sent (a hundred or more per connection here: tens of times the bytes).
    // Every byte received is looked at (the records are all handshake records): a reader that
    // stopped counting would fail here, not pass the bound.
    const received = workAfter.received - workBefore.received;
    const examined = workAfter.examined - workBefore.examined;
    const records = received / 6;
    const why = `${examined} bytes looked at for ${received} received (${records} records of 6 bytes; hold.py sent ${done.sent_records})`;
    process.stderr.write(`trickle: ${why}\n`);
    assert.ok(records >= conns * 100, `too few records reached the proxy to tell: ${why}`);
    assert.ok(records <= done.sent_records, why);
    assert.ok(examined >= received, why);
    assert.ok(examined <= 2 * received, why);
  });
});
