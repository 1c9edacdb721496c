/**
 * The egress allowlist's nftables rules (src/net/nftables-proxy.ts and the proxied form of
 * renderEgressRuleset), checked on the exact text the kernel gets with the rule-order model
 * (nft-model.ts): a proxied sandbox gets nothing out but what the proxy carries, the blocked
 * ranges and the host stay dropped first, and the proxy's own uid cannot dial them either.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  BLOCKED_CIDRS,
  BLOCKED_V4_CIDRS,
  isBlockedAddress,
  parseCidr,
  type Cidr,
} from "../../src/net/addresses.js";
import { mustRun, runCommand } from "../../src/net/commands.js";
import { inNetworks } from "../../src/net/host-block.js";
import { renderEgressRuleset, type EgressPolicy } from "../../src/net/nftables.js";
import { renderProxyTable, type ProxyTablePolicy } from "../../src/net/nftables-proxy.js";
import { formatIpv4, formatIpv6, parseAddress } from "../../src/net/parse-address.js";
import { evalChain, parseScript, type Packet } from "./nft-model.js";

const ports = { http: 40080, tls: 40443, dns: 40053 };
const hostNetworks = [
  parseCidr("192.0.2.0/24", "on-link") as Cidr,
  parseCidr("2001:db8:ffff::/64", "on-link") as Cidr,
];
const base: EgressPolicy = {
  table: "sr-test",
  hostIfname: "sr-h7",
  sandboxV4: "10.250.0.30",
  gatewayV4: "10.250.0.29",
  sandboxV6: "fd5c:5252:0:7::2",
  hostAddresses: ["192.0.2.2", "2001:db8:ffff::2"],
  hostNetworks,
  dnsResolvers: ["169.254.169.253", "198.51.100.53"],
  blocked: BLOCKED_CIDRS,
  proxy: ports,
};
const guard: ProxyTablePolicy = {
  table: "sr-egress",
  prefix: "sr-",
  ports,
  uid: 6208170,
  resolvers: ["169.254.169.253", "198.51.100.53"],
  blocked: BLOCKED_CIDRS,
  hostAddresses: ["192.0.2.2", "2001:db8:ffff::2"],
  hostNetworks,
};

const v4Arb = fc.oneof(
  fc.integer({ min: 0, max: 0xffffffff }).map((n) => formatIpv4(BigInt(n))),
  fc.constantFrom(...BLOCKED_V4_CIDRS).chain((c) => {
    const n = parseAddress(c.network)!.value;
    const size = 1n << BigInt(32 - c.prefix);
    return fc.bigInt({ min: -2n, max: size + 1n }).map((o) => formatIpv4((n + o) & 0xffffffffn));
  }),
  fc.constantFrom("192.0.2.2", "192.0.2.1", "198.51.100.53", "169.254.169.253", "10.250.0.29"),
);
const v6Arb = fc.oneof(
  fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }).map(formatIpv6),
  v4Arb.map((a) => `::ffff:${a}`),
  v4Arb.map((a) => formatIpv6((0x64ff9bn << 96n) | parseAddress(a)!.value)),
  fc.constantFrom("::1", "fc00::1", "fe80::1", "2001:db8:ffff::2", "2001:db8:ffff::99"),
);
const extraArb = fc.record({
  proto: fc.constantFrom("tcp" as const, "udp" as const, "icmp" as const),
  dport: fc.constantFrom(53, 80, 443, 22, 8443, 853, ports.http, ports.tls, ports.dns),
  ct: fc.constantFrom("new" as const, "established" as const),
  hoplimit: fc.constantFrom(64, 255),
  dnat: fc.boolean(),
});

function pkt(dst: string, over: Partial<Packet> = {}): Packet {
  const family = dst.includes(":") ? 6 : 4;
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

/** Blocked for a sandbox: a blocked range, or the host's own address or neighbourhood. */
const inward = (dst: string) =>
  isBlockedAddress(dst) || base.hostAddresses.includes(dst) || inNetworks(hostNetworks, dst);

describe("proxied sandbox ruleset", () => {
  const model = parseScript(renderEgressRuleset(base));

  it("forward never accepts: blocked and host destinations drop (counted as blocked), the rest is refused fast", () => {
    fc.assert(
      fc.property(fc.oneof(v4Arb, v6Arb), extraArb, (dst, extra) => {
        const { verdict, rule } = evalChain(model, "from_sandbox", pkt(dst, extra));
        assert.notEqual(verdict, "accept", `${dst} accepted by ${rule}`);
        assert.notEqual(verdict, "return");
        if (inward(dst)) assert.equal(verdict, "drop", `${dst}: ${rule}`);
        else assert.equal(verdict, "reject", `${dst}: ${rule}`);
      }),
      { numRuns: 2000 },
    );
  });

  it("DNS to any server goes to the proxy; TCP 80/443 to public destinations goes to the proxy; nothing else is redirected", () => {
    fc.assert(
      fc.property(fc.oneof(v4Arb, v6Arb), extraArb, (dst, extra) => {
        const p = pkt(dst, extra);
        const { verdict } = evalChain(model, "sandbox_dnat", p);
        if (p.dport === 53 && p.proto !== "icmp") assert.equal(verdict, `redirect:${ports.dns}`);
        else if (inward(dst)) assert.equal(verdict, "return", `${dst} must reach forward's drop`);
        else if (p.proto === "tcp" && p.dport === 80)
          assert.equal(verdict, `redirect:${ports.http}`);
        else if (p.proto === "tcp" && p.dport === 443)
          assert.equal(verdict, `redirect:${ports.tls}`);
        else assert.equal(verdict, "return");
      }),
      { numRuns: 2000 },
    );
  });

  it("the host takes only redirected connections to the proxy's ports (and IPv6 neighbour discovery)", () => {
    fc.assert(
      fc.property(fc.oneof(v4Arb, v6Arb), extraArb, (dst, extra) => {
        const p = pkt(dst, extra);
        const { verdict } = evalChain(model, "sandbox_to_host", p);
        const proxyPort =
          (p.proto === "tcp" && [ports.http, ports.tls, ports.dns].includes(p.dport)) ||
          (p.proto === "udp" && p.dport === ports.dns);
        if (p.dnat && proxyPort) assert.equal(verdict, "accept");
        else if (p.family === 6 && p.proto === "icmp" && p.hoplimit === 255)
          return; // ND (model lacks types here)
        else assert.equal(verdict, "drop", JSON.stringify(p));
      }),
      { numRuns: 1500 },
    );
  });

  it("no resolver exception in forward (DNS never leaves the sandbox but to the proxy)", () => {
    const rules = model.chains.get("from_sandbox") ?? [];
    assert.deepEqual(
      rules.filter((r) => r.includes("dport 53")),
      [],
    );
  });

  it("the open ruleset is the one without proxy: no redirect, no refusal", () => {
    const { proxy: _, ...open } = base;
    const script = renderEgressRuleset(open);
    assert.doesNotMatch(script, /redirect|reject|ct status dnat|counter refused/);
  });
});

describe("the proxy's guard table", () => {
  const model = parseScript(renderProxyTable(guard));

  it("the proxy's uid opens connections only to TCP 80/443 of public destinations and to its resolvers' port 53", () => {
    fc.assert(
      fc.property(fc.oneof(v4Arb, v6Arb), extraArb, (dst, extra) => {
        const p: Packet = { ...pkt(dst, extra), src: "192.0.2.2", uid: guard.uid, ct: "new" };
        const { verdict, rule } = evalChain(model, "output", p);
        const resolver = guard.resolvers.includes(dst) && p.dport === 53 && p.proto !== "icmp";
        if (resolver) return assert.equal(verdict, "accept");
        if (inward(dst)) return assert.equal(verdict, "reject", `${dst}: ${rule}`);
        const web = p.proto === "tcp" && (p.dport === 80 || p.dport === 443);
        assert.equal(verdict, web ? "accept" : "reject", `${JSON.stringify(p)}: ${rule}`);
      }),
      { numRuns: 2000 },
    );
  });

  it("replies of the proxy's connections pass; other uids are not touched", () => {
    fc.assert(
      fc.property(
        fc.oneof(v4Arb, v6Arb),
        extraArb,
        fc.integer({ min: 0, max: 7_000_000 }),
        (dst, extra, uid) => {
          const mine = evalChain(model, "output", {
            ...pkt(dst, extra),
            uid: guard.uid,
            ct: "established",
          });
          assert.equal(mine.verdict, "accept");
          fc.pre(uid !== guard.uid);
          assert.equal(evalChain(model, "output", { ...pkt(dst, extra), uid }).verdict, "return");
        },
      ),
      { numRuns: 800 },
    );
  });

  it("the proxy's ports are closed to everything but sandbox links", () => {
    fc.assert(
      fc.property(
        fc.constantFrom("eth0", "lo", "wlan0", "sr-h3", "sr-h4095", "sq-h1", "docker0"),
        extraArb,
        (iif, extra) => {
          const p = { ...pkt("192.0.2.2", extra), iif };
          const { verdict } = evalChain(model, "input", p);
          const proxyPort =
            p.proto !== "icmp" && [ports.http, ports.tls, ports.dns].includes(p.dport);
          assert.equal(verdict, proxyPort && !iif.startsWith("sr-h") ? "drop" : "return");
        },
      ),
      { numRuns: 500 },
    );
  });

  it("rejects inputs that could inject nft syntax or aim at the host's own resolver", () => {
    const bad: Array<Partial<ProxyTablePolicy>> = [
      { table: "x; flush ruleset" },
      { prefix: 'sr-" accept' },
      { uid: 0 },
      { uid: 1.5 },
      { ports: { http: 0, tls: 1, dns: 2 } },
      { ports: { http: 5, tls: 5, dns: 6 } },
      { resolvers: ["127.0.0.53"] },
      { resolvers: ["192.0.2.2"] },
      { resolvers: ["1.1.1.1 accept"] },
      { hostAddresses: ["1.2.3.4 }"] },
    ];
    for (const b of bad)
      assert.throws(() => renderProxyTable({ ...guard, ...b }), TypeError, JSON.stringify(b));
    assert.throws(
      () => renderEgressRuleset({ ...base, proxy: { http: 1, tls: 1, dns: 2 } }),
      TypeError,
    );
  });

  it("the kernel accepts both scripts (nft -c in a throwaway namespace)", async () => {
    const ns = `srt-nftp-${process.pid}`;
    await mustRun(["/usr/sbin/ip", "netns", "add", ns]);
    try {
      for (const script of [renderEgressRuleset(base), renderProxyTable(guard)])
        await mustRun(
          ["/usr/sbin/ip", "netns", "exec", ns, "/usr/sbin/nft", "-c", "-f", "-"],
          script,
        );
    } finally {
      await runCommand(["/usr/sbin/ip", "netns", "del", ns]);
    }
  });
});
