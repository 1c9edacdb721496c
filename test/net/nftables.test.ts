import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  BLOCKED_CIDRS,
  BLOCKED_V4_CIDRS,
  cidrText,
  isBlockedAddress,
} from "../../src/net/addresses.js";
import { mustRun, runCommand } from "../../src/net/commands.js";
import { parseCounters, renderEgressRuleset, type EgressPolicy } from "../../src/net/nftables.js";
import { formatIpv4, formatIpv6, parseAddress } from "../../src/net/parse-address.js";
import { evalChain, parseScript, type Packet } from "./nft-model.js";

const base: EgressPolicy = {
  table: "sr-test",
  hostIfname: "sr-h7",
  sandboxV4: "10.250.0.30",
  gatewayV4: "10.250.0.29",
  sandboxV6: "fd5c:5252:0:7::2",
  hostAddresses: ["192.0.2.2", "2001:db8:ffff::2"],
  dnsResolvers: ["169.254.169.253", "198.51.100.53"],
  blocked: BLOCKED_CIDRS,
};
const CATCH_ALL = 'counter name "blocked" drop';

function pkt(family: 4 | 6, dst: string, over: Partial<Packet> = {}): Packet {
  return {
    family,
    src: family === 4 ? base.sandboxV4 : (base.sandboxV6 as string),
    dst,
    proto: "tcp",
    dport: 443,
    hoplimit: 64,
    ct: "new",
    ...over,
  };
}

describe("renderEgressRuleset: shape", () => {
  const script = renderEgressRuleset(base);
  const model = parseScript(script);

  it("every rule chain ends in its counted catch-all drop", () => {
    for (const chain of ["from_sandbox", "to_sandbox", "sandbox_to_host"]) {
      assert.equal(model.chains.get(chain)?.at(-1), CATCH_ALL, chain);
    }
    assert.equal(model.chains.get("ingress")?.at(-1), 'counter name "link_dropped" drop');
    assert.match(script, /hook ingress device "sr-h7" priority -500; policy drop;/);
  });

  it("every blocked IPv4 range is in the v4 set and, mapped and NAT64-translated, in the v6 set", () => {
    const v4 = model.sets.get("blocked4")?.map(cidrText) ?? [];
    const v6 = model.sets.get("blocked6")?.map(cidrText) ?? [];
    for (const c of BLOCKED_V4_CIDRS) {
      assert.ok(v4.includes(cidrText(c)), c.name);
      const n = parseAddress(c.network)!.value;
      assert.ok(
        v6.includes(`${formatIpv6((0x64ff9bn << 96n) | n)}/${96 + c.prefix}`),
        `nat64 ${c.name}`,
      );
      assert.ok(
        v6.includes(`${formatIpv6((0x2002n << 112n) | (n << 80n))}/${16 + c.prefix}`),
        `6to4 ${c.name}`,
      );
    }
    for (const must of [
      "::/128",
      "::1/128",
      "::ffff:0:0/96",
      "fc00::/7",
      "fe80::/10",
      "ff00::/8",
    ]) {
      assert.ok(v6.includes(must), must);
    }
  });

  it("no accept precedes a blocked-destination drop, except the port-53 rules for a blocked resolver", () => {
    const rules = model.chains.get("from_sandbox") ?? [];
    const firstBlockedDrop = rules.findIndex((r) => r.includes("@blocked"));
    assert.ok(firstBlockedDrop > 0);
    const accepts = rules.slice(0, firstBlockedDrop).filter((r) => r.endsWith("accept"));
    assert.deepEqual(accepts, [
      "ip daddr 169.254.169.253 udp dport 53 accept",
      "ip daddr 169.254.169.253 tcp dport 53 accept",
    ]);
    assert.ok(!script.includes("198.51.100.53"), "a public resolver needs no exception");
  });

  it("without IPv6 every IPv6 packet from the sandbox is dropped first, and no ND is accepted", () => {
    const s = renderEgressRuleset({ ...base, sandboxV6: null });
    const m = parseScript(s);
    assert.equal(m.chains.get("from_sandbox")?.[1], `meta nfproto ipv6 ${CATCH_ALL}`);
    assert.deepEqual(m.chains.get("sandbox_to_host"), [CATCH_ALL]);
    assert.ok(!m.chains.get("ingress")?.some((r) => r.includes("ip6")));
    assert.equal(
      evalChain(m, "from_sandbox", pkt(6, PUBLIC6, { src: "fd5c:5252:0:7::2" })).verdict,
      "drop",
    );
  });

  it("rejects names and addresses that could inject nft syntax", () => {
    const bad: Array<Partial<EgressPolicy>> = [
      { table: "x; flush ruleset" },
      { table: "1abc" },
      { hostIfname: 'a" accept' },
      { hostIfname: "sixteen-chars-xx" },
      { sandboxV4: "10.0.0.1 accept" },
      { sandboxV4: "2130706433" },
      { sandboxV4: "fd00::1" },
      { gatewayV4: "10.0.0.1}" },
      { sandboxV6: "10.0.0.1" },
      { hostAddresses: ["1.2.3.4 }"] },
      { dnsResolvers: ["127.0.0.53"] },
      { dnsResolvers: ["192.0.2.2"] },
      { blocked: BLOCKED_CIDRS.filter((c) => c.family === 4) },
    ];
    for (const b of bad)
      assert.throws(() => renderEgressRuleset({ ...base, ...b }), TypeError, JSON.stringify(b));
  });

  it("the kernel accepts the script (nft -c in a throwaway namespace)", async () => {
    const ns = `srt-nftc-${process.pid}`;
    await mustRun(["/usr/sbin/ip", "netns", "add", ns]);
    try {
      await mustRun(
        ["/usr/sbin/ip", "netns", "exec", ns, "/usr/sbin/nft", "-c", "-f", "-"],
        script,
      );
      const v4only = renderEgressRuleset({ ...base, sandboxV6: null, hostAddresses: [] });
      await mustRun(
        ["/usr/sbin/ip", "netns", "exec", ns, "/usr/sbin/nft", "-c", "-f", "-"],
        v4only,
      );
    } finally {
      await runCommand(["/usr/sbin/ip", "netns", "del", ns]);
    }
  });

  it("parseCounters reads only this table's counters", () => {
    const json = JSON.stringify({
      nftables: [
        { metainfo: {} },
        { counter: { family: "inet", name: "blocked", table: "sr-test", packets: 5 } },
        { counter: { family: "netdev", name: "link_dropped", table: "sr-test", packets: 2 } },
        { counter: { family: "inet", name: "blocked", table: "sr-other", packets: 99 } },
        { counter: { family: "inet", name: "forwarded", table: "sr-test", packets: 7 } },
        { counter: { family: "inet", name: "passed", table: "sr-test", packets: 4 } },
        { counter: { family: "inet", name: "passed", table: "sr-other", packets: 50 } },
      ],
    });
    assert.deepEqual(parseCounters(json, "sr-test"), {
      blocked: 5,
      forwarded: 7,
      passed: 4,
      refused: 0,
      linkDropped: 2,
    });
    assert.deepEqual(parseCounters("not json", "sr-test"), {
      blocked: 0,
      forwarded: 0,
      passed: 0,
      refused: 0,
      linkDropped: 0,
    });
  });

  it("counts what it forwards, and what passed every later forward chain, for its own link only", () => {
    assert.match(script, /ip saddr 10\.250\.0\.30 counter name "forwarded" accept/);
    assert.match(script, /ip6 saddr fd5c:5252:0:7::2 counter name "forwarded" accept/);
    const late = model.chains.get("forward_late");
    assert.deepEqual(late, ['iifname "sr-h7" counter name "passed" accept']);
    assert.match(
      script,
      /chain forward_late \{\n\t\ttype filter hook forward priority 1000; policy accept;/,
    );
    // After every filter chain (priority 0) a host's firewall has, Docker's FORWARD included.
    const proxied = renderEgressRuleset({ ...base, proxy: { dns: 5353, http: 8080, tls: 8443 } });
    assert.doesNotMatch(
      proxied,
      /counter name "forwarded" accept/,
      "proxied: nothing is forwarded",
    );
  });
});

const PUBLIC6 = "2001:db8:1::10";

/** Addresses biased towards the edges of every blocked range, plus anything at all. */
const v4Arb = fc.oneof(
  fc.integer({ min: 0, max: 0xffffffff }).map((n) => formatIpv4(BigInt(n))),
  fc.constantFrom(...BLOCKED_V4_CIDRS).chain((c) => {
    const n = parseAddress(c.network)!.value;
    const size = 1n << BigInt(32 - c.prefix);
    return fc.bigInt({ min: -2n, max: size + 1n }).map((o) => formatIpv4((n + o) & 0xffffffffn));
  }),
);
const v6Arb = fc.oneof(
  fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }).map(formatIpv6),
  v4Arb.map((a) => `::ffff:${a}`),
  v4Arb.map((a) => formatIpv6((0x64ff9bn << 96n) | parseAddress(a)!.value)),
  v4Arb.map((a) => formatIpv6((0x2002n << 112n) | (parseAddress(a)!.value << 80n))),
  fc.bigInt({ min: 0n, max: (1n << 16n) - 1n }).map((t) => formatIpv6((0xfe80n << 112n) | t)),
  fc.constantFrom("::", "::1", "fc00::1", "fdff::1", "ff02::1", "fec0::1", "64:ff9b:1::1"),
);
const packetArb = fc.record({
  proto: fc.constantFrom("tcp" as const, "udp" as const, "icmp" as const),
  dport: fc.constantFrom(53, 80, 443, 7, 0),
  ct: fc.constantFrom("new" as const, "established" as const),
  icmpv6Type: fc.constantFrom(
    "nd-neighbor-solicit" as const,
    "nd-neighbor-advert" as const,
    "echo-request" as const,
  ),
  hoplimit: fc.constantFrom(1, 64, 255),
});

describe("renderEgressRuleset: rule-order model (fast-check)", () => {
  const policyArb = fc.record({
    resolver: fc
      .oneof(v4Arb, fc.constant("169.254.169.253"))
      .filter((a) => !a.startsWith("127.") && a !== "0.0.0.0"),
    host: v4Arb.filter((a) => !a.startsWith("127.")),
    withV6: fc.boolean(),
  });

  it("a destination classified blocked is never accepted from the sandbox, any protocol or family", () => {
    fc.assert(
      fc.property(policyArb, fc.oneof(v4Arb, v6Arb), packetArb, (pol, dst, extra) => {
        fc.pre(pol.resolver !== pol.host);
        const policy = {
          ...base,
          dnsResolvers: [pol.resolver],
          hostAddresses: [pol.host],
          sandboxV6: pol.withV6 ? base.sandboxV6 : null,
        };
        const model = parseScript(renderEgressRuleset(policy));
        const family = dst.includes(":") ? 6 : 4;
        const p = pkt(family, dst, {
          ...extra,
          src: family === 4 ? base.sandboxV4 : (base.sandboxV6 as string),
        });
        const { verdict, rule } = evalChain(model, "from_sandbox", p);
        assert.notEqual(verdict, "return", "from_sandbox must always decide");
        const dnsException =
          isBlockedAddress(pol.resolver) &&
          dst === pol.resolver &&
          p.dport === 53 &&
          p.proto !== "icmp";
        if (isBlockedAddress(dst) && !dnsException)
          assert.equal(verdict, "drop", `${dst} accepted by ${rule}`);
        if (dst === pol.host) assert.equal(verdict, "drop", "host address");
        if (dnsException && family === 4)
          assert.equal(verdict, "accept", "the resolver exception works");
        if (!isBlockedAddress(dst) && dst !== pol.host && (family === 4 || pol.withV6)) {
          assert.equal(verdict, "accept", `public ${dst} must pass (${rule})`);
        }
      }),
      { numRuns: 1500 },
    );
  });

  it("a spoofed source is dropped whatever the destination", () => {
    fc.assert(
      fc.property(fc.oneof(v4Arb, v6Arb), fc.oneof(v4Arb, v6Arb), packetArb, (src, dst, extra) => {
        const family = dst.includes(":") ? 6 : 4;
        fc.pre(
          (src.includes(":") ? 6 : 4) === family &&
            src !== base.sandboxV4 &&
            src !== base.sandboxV6,
        );
        const model = parseScript(renderEgressRuleset(base));
        assert.equal(
          evalChain(model, "from_sandbox", pkt(family, dst, { ...extra, src })).verdict,
          "drop",
        );
      }),
      { numRuns: 800 },
    );
  });

  it("the host itself takes nothing from the sandbox but IPv6 neighbour discovery", () => {
    const model = parseScript(renderEgressRuleset(base));
    fc.assert(
      fc.property(fc.oneof(v4Arb, v6Arb), packetArb, (dst, extra) => {
        const family = dst.includes(":") ? 6 : 4;
        const p = pkt(family, dst, extra);
        const { verdict } = evalChain(model, "sandbox_to_host", p);
        const nd =
          family === 6 &&
          p.proto === "icmp" &&
          p.hoplimit === 255 &&
          p.icmpv6Type !== "echo-request";
        assert.equal(verdict, nd ? "accept" : "drop");
      }),
      { numRuns: 800 },
    );
  });

  it("nothing new gets in to the sandbox; only replies", () => {
    const model = parseScript(renderEgressRuleset(base));
    fc.assert(
      fc.property(fc.oneof(v4Arb, v6Arb), packetArb, (src, extra) => {
        const family = src.includes(":") ? 6 : 4;
        const p: Packet = {
          ...pkt(family, family === 4 ? base.sandboxV4 : (base.sandboxV6 as string), extra),
          src,
        };
        assert.equal(evalChain(model, "to_sandbox", p).verdict, p.ct === "new" ? "drop" : "accept");
      }),
      { numRuns: 500 },
    );
  });
});
