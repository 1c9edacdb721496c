/**
 * The egress allowlist against the bypasses that broke agent sandboxes in 2025–26 (issue 28),
 * each tried from a real sandbox network (netns + bwrap) against the real proxy child and rules
 * in the private test internet (test/net/topology.ts, web.ts). test/net/egress-allowlist.test.ts
 * holds the first ones (a refused name, raw IPs, its own resolver, SNI and Host that disagree
 * either way, ECH, IPv6); these are the rest. Each refusal must be fast, named in the sandbox's
 * report, and leave the refused host's log empty; each allowed spelling must reach the allowed
 * host only.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { parseAllowlist } from "../../src/net/allowlist.js";
import type { NetworkReport } from "../../src/backends/types.js";
import { EgressFixture } from "../net/egress-fixture.js";
import { PUBLIC, RESOLVER, type Check, type ProbeResult } from "../net/topology.js";
import { ALLOWED_IP, clientHello, REFUSED_IP, ROGUE_DNS, type WebHost } from "../net/web.js";

const ALLOWLIST = "allowed.test, *.wild.test, meta.test, rebind.test";
/** The proxy's TLS refusal: a fatal access_denied alert. */
const ALERT = "recv 15030300020231";
/** A refusal seen from inside: at once, never a timeout. */
const FAST =
  /ConnectionResetError|ALERT_ACCESS_DENIED|403 Forbidden|rcode=3|recv 15030300020231|refused|closed/;
/** The reasons a name that is an address, or no name at all, may be refused for. */
const NOT_A_NAME = ["ip_address", "bad_name"];

const http = (head: string): string => Buffer.from(head, "latin1").toString("hex");
const get = (host: string, target = "/"): string =>
  http(`GET ${target} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);

describe(
  "egress allowlist bypasses (real namespaces, proxy and rules)",
  { timeout: 300_000 },
  () => {
    const fx = new EgressFixture({ idPrefix: "b", proxy: { uidOffset: 61 } });
    const allow = parseAllowlist(ALLOWLIST);
    const attempt = (checks: Check[]): Promise<{ res: ProbeResult; report: NetworkReport }> =>
      fx.attempt(allow, checks);

    const reasonOf = (report: NetworkReport, host: string | null, port: number) =>
      report.refused?.find((r) => r.host === host && r.port === port)?.reason;

    function assertRefused(res: ProbeResult, labels: string[]): void {
      for (const l of labels) {
        const r = res[l];
        assert.ok(r, `${l} ran`);
        assert.doesNotMatch(r.detail, /hello from|timed out/, `${l}: ${r.detail}`);
        assert.match(r.detail, FAST, `${l} refused at once: ${r.detail}`);
      }
    }

    function assertNothingArrived(mark: Map<WebHost, number>, ...hosts: WebHost[]): void {
      for (const h of hosts) assert.equal(fx.web.since(mark, h), "", `${h} must see nothing`);
    }

    before(() => fx.start());
    after(() => fx.stop());

    it("BYPASS-ABSOLUTE-CONNECT: absolute-URI, CONNECT and HTTP/2 prior knowledge cannot name a refused host", async () => {
      const raw = (label: string, host: string, hex: string): Check => ({
        label,
        kind: "raw",
        host,
        port: 80,
        hex,
        text: true,
      });
      const mark = fx.web.mark();
      const { res, report } = await attempt([
        raw(
          "absolute refused, Host allowed",
          ALLOWED_IP,
          get("allowed.test", "http://refused.test/"),
        ),
        raw(
          "absolute refused, Host refused",
          ALLOWED_IP,
          get("refused.test", "http://refused.test/"),
        ),
        raw(
          "absolute refused to its own ip",
          REFUSED_IP,
          get("allowed.test", "http://refused.test:80/x"),
        ),
        raw(
          "connect refused",
          ALLOWED_IP,
          http("CONNECT refused.test:443 HTTP/1.1\r\nHost: refused.test:443\r\n\r\n"),
        ),
        raw(
          "connect allowed",
          ALLOWED_IP,
          http("CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n"),
        ),
        raw("h2 prior knowledge", ALLOWED_IP, http("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")),
      ]);
      assertRefused(res, Object.keys(res));
      assertNothingArrived(mark, "allowed", "refused");
      assert.match(
        res["absolute refused, Host allowed"]?.detail ?? "",
        /refused allowed\.test \(host_mismatch\)/,
      );
      assert.equal(reasonOf(report, "allowed.test", 80), "host_mismatch");
      assert.equal(reasonOf(report, "refused.test", 80), "not_allowed");
      // CONNECT is never a tunnel, whatever it names: refused as not HTTP/1 (and so is h2c).
      assert.ok(
        (report.refused?.find((r) => r.host === null && r.port === 80 && r.reason === "protocol")
          ?.count ?? 0) >= 3,
        JSON.stringify(report.refused),
      );
    });

    it("BYPASS-SPELLING: NUL bytes, trailing dots, case and IDNA lookalikes in SNI, Host and DNS", async () => {
      const lookalike = Buffer.from("d0b06c6c6f776564", "hex").toString("latin1") + ".test"; // Cyrillic а
      const sni = (label: string, name: string | Buffer): Check => ({
        label,
        kind: "raw",
        host: ALLOWED_IP,
        port: 443,
        hex: clientHello(name),
      });
      const host = (label: string, name: string): Check => ({
        label,
        kind: "raw",
        host: ALLOWED_IP,
        port: 80,
        hex: get(name),
        text: true,
      });
      const mark = fx.web.mark();
      const { res, report } = await attempt([
        sni("sni nul", "allowed.test\0.refused.test"),
        sni("sni nul first", "refused.test\0allowed.test"),
        sni("sni two dots", "allowed.test.."),
        sni("sni lookalike", lookalike),
        sni("sni punycode lookalike", "xn--llowed-2nf.test"),
        sni("sni refused trailing dot", "refused.test."),
        host("host nul", "allowed.test\0.refused.test"),
        host("host refused upper", "REFUSED.Test"),
        host("host refused trailing dot", "refused.test."),
        host("host lookalike", lookalike),
        { label: "dns lookalike", kind: "dnsq", server: RESOLVER, name: "xn--llowed-2nf.test" },
        // Allowed in any case and with its trailing dot: these reach the allowed host.
        host("host allowed upper", "ALLOWED.TEST"),
        host("host allowed trailing dot", "allowed.test."),
        sni("sni allowed upper trailing dot", "Allowed.Test."),
        { label: "dns allowed upper", kind: "dnsq", server: RESOLVER, name: "ALLOWED.test" },
      ]);
      const allowedOnes = [
        "host allowed upper",
        "host allowed trailing dot",
        "sni allowed upper trailing dot",
        "dns allowed upper",
      ];
      assertRefused(
        res,
        Object.keys(res).filter((l) => !allowedOnes.includes(l)),
      );
      for (const l of [
        "sni nul",
        "sni nul first",
        "sni two dots",
        "sni lookalike",
        "sni punycode lookalike",
        "sni refused trailing dot",
      ])
        assert.equal(res[l]?.detail, ALERT, `${l}: ${res[l]?.detail}`);
      assert.match(
        res["host allowed upper"]?.detail ?? "",
        /hello from allowed host=ALLOWED\.TEST/,
      );
      assert.match(res["host allowed trailing dot"]?.detail ?? "", /hello from allowed/);
      assert.notEqual(
        res["sni allowed upper trailing dot"]?.detail,
        ALERT,
        "passed to the allowed host",
      );
      assert.equal(res["dns allowed upper"]?.detail, `rcode=0 ${ALLOWED_IP}`);
      assertNothingArrived(mark, "refused");
      const seen = fx.web.since(mark, "allowed");
      assert.match(
        seen,
        /conn 443/,
        "the allowed SNI in another spelling reached the allowed host",
      );
      assert.doesNotMatch(seen, /refused\.test/i, "no refused name reached even the allowed host");
      assert.equal(
        reasonOf(report, "refused.test", 443),
        "not_allowed",
        "trailing dot and case normalised",
      );
      assert.equal(reasonOf(report, "refused.test", 80), "not_allowed");
      assert.equal(reasonOf(report, "xn--llowed-2nf.test", 443), "not_allowed");
      assert.equal(reasonOf(report, "xn--llowed-2nf.test", 53), "not_allowed");
      assert.equal(
        reasonOf(report, "allowed.test\\x00.refused.test", 443),
        "bad_name",
        JSON.stringify(report.refused),
      );
      assert.equal(reasonOf(report, "allowed.test..", 443), "bad_name");
      assert.ok(
        report.refused?.some(
          (r) =>
            r.port === 443 && r.reason === "bad_name" && r.host?.startsWith("\\xd0\\xb0llowed"),
        ),
        JSON.stringify(report.refused),
      );
    });

    it("BYPASS-WILDCARD: *.wild.test allows names under it only, never wild.test, evilwild.test or a name that merely contains it", async () => {
      const both = (name: string): Check[] => [
        { label: `sni ${name}`, kind: "raw", host: REFUSED_IP, port: 443, hex: clientHello(name) },
        {
          label: `host ${name}`,
          kind: "raw",
          host: REFUSED_IP,
          port: 80,
          hex: get(name),
          text: true,
        },
        { label: `dns ${name}`, kind: "dnsq", server: RESOLVER, name },
      ];
      const refused = ["wild.test", "evilwild.test", "a.wild.test.refused.test", "wild.test.evil"];
      const mark = fx.web.mark();
      const { res, report } = await attempt([
        ...refused.flatMap(both),
        {
          label: "sni .wild.test",
          kind: "raw",
          host: REFUSED_IP,
          port: 443,
          hex: clientHello(".wild.test"),
        },
        {
          label: "sni *.wild.test",
          kind: "raw",
          host: REFUSED_IP,
          port: 443,
          hex: clientHello("*.wild.test"),
        },
        {
          label: "allowed under",
          kind: "raw",
          host: REFUSED_IP,
          port: 80,
          hex: get("deep.b.wild.test"),
          text: true,
        },
      ]);
      const allowedOnes = ["allowed under"];
      assertRefused(
        res,
        Object.keys(res).filter((l) => !allowedOnes.includes(l)),
      );
      // Sent to the refused host's address: an allowed name still reaches its own host only.
      assert.match(
        res["allowed under"]?.detail ?? "",
        /hello from allowed host=deep\.b\.wild\.test/,
      );
      assertNothingArrived(mark, "refused");
      for (const name of refused)
        for (const port of [443, 80, 53])
          assert.equal(reasonOf(report, name, port), "not_allowed", `${name}:${port}`);
      assert.equal(reasonOf(report, ".wild.test", 443), "bad_name");
      assert.equal(reasonOf(report, "*.wild.test", 443), "bad_name");
    });

    it("BYPASS-IP-FORMS: an IP address in any spelling, as SNI or Host, is refused and never dialled", async () => {
      const forms = [
        REFUSED_IP,
        `${REFUSED_IP}.`,
        "3413180426", // decimal
        "0313.0161.0.012", // octal
        "0xcb71000a", // hex
        "0xcb.0x71.0.0xa",
        "203.7405194", // two parts
        "[::ffff:203.0.113.10]",
        "[::ffff:cb71:a]",
        "[64:ff9b::cb71:a]",
        "[2001:db8:1::10]",
        "::ffff:203.0.113.10",
      ];
      const checks: Check[] = forms.flatMap((f, i): Check[] => [
        { label: `host ${i}`, kind: "raw", host: ALLOWED_IP, port: 80, hex: get(f), text: true },
        {
          label: `sni ${i}`,
          kind: "raw",
          host: ALLOWED_IP,
          port: 443,
          hex: clientHello(f.replace(/^\[|\]$/g, "")),
        },
      ]);
      const mark = fx.web.mark();
      const { res, report } = await attempt(checks);
      assertRefused(res, Object.keys(res));
      assertNothingArrived(mark, "allowed", "refused");
      for (const r of report.refused ?? [])
        assert.ok(NOT_A_NAME.includes(r.reason) || r.reason === "protocol", JSON.stringify(r));
      const named = (report.refused ?? []).reduce((n, r) => n + r.count, 0);
      assert.equal(named, checks.length, `every attempt named: ${JSON.stringify(report.refused)}`);
    });

    it("BYPASS-PIPELINE: a second request on an allowed connection, naming a refused host, reaches only the allowed host", async () => {
      const mark = fx.web.mark();
      const twice = http(
        "GET /one HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET /two HTTP/1.1\r\nHost: refused.test\r\nConnection: close\r\n\r\n",
      );
      const { res } = await attempt([
        { label: "pipelined", kind: "raw", host: REFUSED_IP, port: 80, hex: twice, text: true },
      ]);
      assert.match(res.pipelined?.detail ?? "", /hello from allowed/);
      assertNothingArrived(mark, "refused");
      assert.match(fx.web.since(mark, "allowed"), /http host=allowed\.test path=\/one/);
    });

    it("BYPASS-SPLIT-HELLO: a ClientHello split across TCP segments (mid-name) is read whole", async () => {
      const split = (name: string): string[] => {
        const hex = clientHello(name);
        const at = hex.indexOf(Buffer.from(name).toString("hex")) + 8; // four bytes into the name
        return [hex.slice(0, 6), hex.slice(6, at), hex.slice(at)];
      };
      const mark = fx.web.mark();
      const { res, report } = await attempt([
        {
          label: "refused split",
          kind: "raw",
          host: ALLOWED_IP,
          port: 443,
          hex: "",
          parts: split("refused.test"),
          gap_ms: 150,
        },
        {
          label: "allowed split",
          kind: "raw",
          host: REFUSED_IP,
          port: 443,
          hex: "",
          parts: split("allowed.test"),
          gap_ms: 150,
        },
      ]);
      assert.equal(res["refused split"]?.detail, ALERT);
      assert.notEqual(res["allowed split"]?.detail, ALERT, res["allowed split"]?.detail);
      assertNothingArrived(mark, "refused");
      assert.match(fx.web.since(mark, "allowed"), /conn 443/);
      assert.equal(reasonOf(report, "refused.test", 443), "not_allowed");
    });

    it("BYPASS-DNS-EXFIL: queries for refused names never leave the proxy, to any server, over UDP or TCP", async () => {
      const tag = `x${randomBytes(6).toString("hex")}`;
      const control = `y${randomBytes(6).toString("hex")}.wild.test`;
      const logMark = fx.topo.mark();
      const mark = fx.web.mark();
      const { res, report } = await attempt([
        { label: "udp resolver", kind: "dnsq", server: RESOLVER, name: `${tag}-1.refused.test` },
        {
          label: "tcp resolver",
          kind: "dnsq",
          server: RESOLVER,
          name: `${tag}-2.evil.example`,
          tcp: true,
        },
        { label: "udp rogue", kind: "dnsq", server: ROGUE_DNS, name: `${tag}-3.refused.test` },
        {
          label: "tcp rogue",
          kind: "dnsq",
          server: ROGUE_DNS,
          name: `${tag}-4.wild.test.evil`,
          tcp: true,
        },
        { label: "udp public ip", kind: "dnsq", server: PUBLIC, name: `${tag}-5.refused.test` },
        // Control: an allowed name (new to the proxy's cache) does reach the real resolver.
        { label: "allowed", kind: "dnsq", server: RESOLVER, name: control },
      ]);
      assert.equal(
        res.allowed?.detail,
        "rcode=3 ",
        `the resolver's own NXDOMAIN, passed on: ${JSON.stringify(res)} ${fx.topo.logSince(logMark, "pub")}`,
      );
      await fx.topo.waitForLog("pub", `dns ${control}`);
      assertRefused(
        res,
        Object.keys(res).filter((l) => l !== "allowed"),
      );
      const resolverLog = fx.topo.logSince(logMark, "pub");
      assert.ok(resolverLog.includes(`dns ${control}`), "control: the resolver logs questions");
      assert.doesNotMatch(resolverLog, new RegExp(tag), "no refused name reached the resolver");
      assert.doesNotMatch(fx.web.since(mark, "refused"), new RegExp(tag), "nor the rogue server");
      assert.equal(
        (report.refused ?? []).filter((r) => r.port === 53 && r.host?.startsWith(tag)).length,
        5,
      );
    });

    it("BYPASS-INWARD-NAMES: an allowed name on the metadata address is refused by address, never dialled", async () => {
      const { res, report } = await attempt([
        { label: "https", kind: "https", host: ALLOWED_IP, sni: "meta.test" },
        { label: "http", kind: "http", host: ALLOWED_IP, hostHeader: "meta.test" },
        { label: "resolve", kind: "resolve", host: "meta.test" },
      ]);
      for (const [l, r] of Object.entries(res)) assert.equal(r.ok, false, `${l}: ${r.detail}`);
      assert.equal(reasonOf(report, "meta.test", 443), "blocked_address");
      assert.equal(reasonOf(report, "meta.test", 80), "blocked_address");
      assert.equal(reasonOf(report, "meta.test", 53), "blocked_address");
    });

    it("BYPASS-REBIND: a TTL-0 name that rebinds from a public to a private address is dialled only while it is public", async () => {
      const mark = fx.web.mark();
      const logMark = fx.topo.mark();
      const round = (): Check[] => [
        { label: "https", kind: "https", host: ALLOWED_IP, sni: "rebind.test" },
        { label: "resolve", kind: "resolve", host: "rebind.test" },
      ];
      const first = await attempt(round());
      // The proxy keeps an answer at least 5 s (MIN_TTL in resolve.ts): past it, it asks again.
      await new Promise((r) => setTimeout(r, 6000));
      const second = await attempt(round());
      const asked = fx.topo
        .logSince(logMark, "pub")
        .split("\n")
        .filter((l) => l === "dns rebind.test").length;
      // A and AAAA, once per round: the second round's A question got the private address.
      assert.ok(asked >= 4, `the resolver was asked again (${asked})`);
      assert.equal(first.res.https?.ok, true, `first answer public: ${first.res.https?.detail}`);
      assert.equal(first.res.resolve?.detail, PUBLIC);
      assert.equal(
        second.res.https?.ok,
        false,
        `second answer private: ${second.res.https?.detail}`,
      );
      assert.equal(reasonOf(second.report, "rebind.test", 443), "blocked_address");
      assertNothingArrived(mark, "inward");
      assert.match(fx.web.since(mark, "allowed"), /https sni=rebind\.test/);
    });
  },
);
