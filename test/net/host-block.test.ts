import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";
import fc from "fast-check";
import { BLOCKED_CIDRS, cidrText, isBlockedAddress } from "../../src/net/addresses.js";
import {
  hostBlockSet,
  inNetworks,
  parseHostNetwork,
  type HostNetwork,
  type HostRoute,
} from "../../src/net/host-block.js";
import { renderEgressRuleset, renderHostSetUpdate } from "../../src/net/nftables.js";
import { formatIpv4, formatIpv6, parseAddress } from "../../src/net/parse-address.js";
import { evalChain, parseScript } from "./nft-model.js";
import { REPO } from "./topology.js";

/**
 * The host's neighbourhood as a pure function of its addresses and routes (threat model H17,
 * SEC-NET-BLOCK): a fixture of real `ip -j` output from a namespace with every kind of route, and
 * a model that says, for any host network and any destination, whether a sandbox must be kept
 * from it; the function and the rendered ruleset must agree with it both ways (nothing the host
 * reaches directly is left open, nothing beyond its gateways is closed).
 */
const FIXTURE = readFileSync(`${REPO}test/net/fixtures/host-network.jsonl`, "utf8");
const OPTS = { ignoreLinkPrefix: "sr-h", pools: ["10.250.0.0/16"] };

describe("host neighbourhood: parsing real ip output", () => {
  const net = parseHostNetwork(FIXTURE);

  it("reads addresses with prefixes and peers, routes with every kind of next hop", () => {
    assert.ok(net.addresses.some((a) => a.local === "198.51.100.2" && a.prefixlen === 24));
    assert.ok(net.addresses.some((a) => a.local === "203.0.113.5" && a.peer === "203.0.113.6"));
    const route = (dst: string) => net.routes.find((r) => r.dst === dst) as HostRoute;
    assert.deepEqual(route("100.1.0.0/16").gateways, ["198.51.100.7", "198.51.100.8"]);
    assert.deepEqual(route("8.8.0.0/16").gateways, ["fe80::1"]);
    assert.deepEqual(route("9.9.0.0/16").gateways, ["198.51.100.9"]);
    assert.equal(route("192.0.2.0/25").direct, true);
    assert.equal(route("100.1.0.0/16").direct, false);
    assert.equal(route("7.7.0.0/16").type, "blackhole");
    assert.equal(route("192.0.2.128/25").type, "local");
    assert.deepEqual(net.nexthopGateways, ["198.51.100.9"]);
  });

  it("blocks on-link subnets, device routes, peers, local routes in any table; not what lies beyond", () => {
    const set = hostBlockSet(net, OPTS);
    const v4 = set.networks.filter((c) => c.family === 4).map(cidrText);
    assert.deepEqual(v4.sort(), [
      "1.1.0.0/16",
      "192.0.2.0/25",
      "192.0.2.128/25",
      "198.51.100.0/24",
      "203.0.113.5/32",
      "203.0.113.6/32",
    ]);
    const v6 = set.networks.filter((c) => c.family === 6).map(cidrText);
    for (const c of [
      "2001:db8:1::/64",
      "2001:db8:eeee::/64",
      "64:ff9b::c633:6400/120",
      "2002:c633:6400::/40",
    ])
      assert.ok(v6.includes(c), c);
    assert.deepEqual(set.addresses.sort(), ["198.51.100.2", "2001:db8:1::2", "203.0.113.5"]);
    // Routed elsewhere (through a gateway), blackholed, or the internet: not blocked.
    for (const open of ["100.1.2.3", "8.8.8.8", "9.9.9.9", "7.7.7.7", "6.6.6.6", "1.2.3.4"])
      assert.ok(!inNetworks(set.networks, open), open);
    // The sandbox's own link (sr-h3, 10.250.0.12/30) is the pool's, not the host's neighbourhood.
    assert.ok(set.networks.every((c) => !c.network.startsWith("10.250.")));
  });

  it("fails closed on output without the address or route list", () => {
    assert.throws(() => parseHostNetwork(""), /addresses and routes/);
    assert.throws(() => parseHostNetwork(FIXTURE.split("\n")[0] as string), /addresses and routes/);
    assert.throws(() => parseHostNetwork("not json"));
  });
});

// A model written apart from the implementation: plain bigint arithmetic over the same inputs.
const bits = (family: 4 | 6) => (family === 4 ? 32n : 128n);
function within(addr: string, net: string, prefix: number): boolean {
  const a = parseAddress(addr);
  const n = parseAddress(net);
  if (!a || !n || a.family !== n.family) return false;
  const shift = bits(a.family) - BigInt(prefix);
  return a.value >> shift === n.value >> shift;
}
function expectedBlocked(net: HostNetwork, d: string, ignore: string): boolean {
  const fam = (x: string) => (x.includes(":") ? 6 : 4);
  const hostBits = (x: string) => (fam(x) === 4 ? 32 : 128);
  for (const a of net.addresses) {
    if (a.local === d) return true;
    if (a.ifname.startsWith(ignore)) continue;
    if (within(d, a.local, a.prefixlen)) return true;
    if (a.peer && (a.peer === d || within(d, a.peer, a.prefixlen))) return true;
  }
  for (const r of net.routes) {
    if (r.dev?.startsWith(ignore)) continue;
    if (r.gateways.includes(d)) return true;
    if (r.dst === "default") continue;
    const [n, p] = r.dst.split("/");
    const prefix = p === undefined ? hostBits(n as string) : Number(p);
    const onLink =
      ["local", "broadcast", "anycast"].includes(r.type) || (r.type === "unicast" && r.direct);
    if (onLink && prefix > 0 && within(d, n as string, prefix)) return true;
  }
  return net.nexthopGateways.includes(d);
}

// Networks clustered in a few public neighbourhoods so destinations land in, near and outside them.
const v4Near = fc
  .tuple(
    fc.constantFrom(0xc6336400n, 0xcb007100n, 0x08080800n, 0x5db8d800n),
    fc.integer({ min: 0, max: 1023 }),
  )
  .map(([base, off]) => formatIpv4((base + BigInt(off)) & 0xffffffffn));
const v6Near = fc
  .tuple(
    fc.constantFrom(0x20010db8000100000000000000000000n, 0x2a0104f8000000000000000000000000n),
    fc.integer({ min: 0, max: 300 }),
  )
  .map(([base, off]) => formatIpv6(base + (BigInt(off) << 56n) + BigInt(off)));
const anyAddr = fc.oneof(
  v4Near,
  v6Near,
  fc.integer({ min: 0, max: 0xffffffff }).map((n) => formatIpv4(BigInt(n))),
);
const prefixFor = (a: string) =>
  fc.integer({ min: a.includes(":") ? 40 : 8, max: a.includes(":") ? 128 : 32 });
const cidrOf = anyAddr.chain((a) =>
  prefixFor(a).map((p) => {
    const v = parseAddress(a)!;
    const b = bits(v.family);
    const mask = ((1n << b) - 1n) ^ ((1n << (b - BigInt(p))) - 1n);
    const n = v.value & mask;
    return `${v.family === 4 ? formatIpv4(n) : formatIpv6(n)}/${p}`;
  }),
);
const ifname = fc.constantFrom("eth0", "wg0", "lo", "br0", "sr-h1");
const hostNetworkArb: fc.Arbitrary<HostNetwork> = fc.record({
  addresses: fc.array(
    anyAddr.chain((local) =>
      fc
        .record({
          ifname,
          local: fc.constant(local),
          prefixlen: prefixFor(local),
          peer: fc.option(
            fc.constant(local).chain((l) => (l.includes(":") ? v6Near : v4Near)),
            { nil: undefined },
          ),
        })
        .map(({ peer, ...a }) => (peer === undefined ? a : { ...a, peer })),
    ),
    { maxLength: 5 },
  ),
  routes: fc.array(
    fc.record({
      type: fc.constantFrom(
        "unicast",
        "unicast",
        "local",
        "broadcast",
        "anycast",
        "blackhole",
        "unreachable",
        "multicast",
      ),
      dst: fc.oneof(fc.constant("default"), cidrOf, anyAddr),
      dev: ifname,
      gateways: fc.array(anyAddr, { maxLength: 2 }),
      direct: fc.boolean(),
    }),
    { maxLength: 6 },
  ),
  nexthopGateways: fc.array(anyAddr, { maxLength: 2 }),
});

describe("host neighbourhood: model and property tests", () => {
  it("property: exactly what the host reaches directly (and itself, gateways, pools) is blocked", () => {
    fc.assert(
      fc.property(
        hostNetworkArb,
        fc.array(anyAddr, { minLength: 1, maxLength: 8 }),
        (net, dests) => {
          const set = hostBlockSet(net, { ignoreLinkPrefix: "sr-h", pools: ["10.250.0.0/16"] });
          for (const d of dests) {
            const want = expectedBlocked(net, d, "sr-h") || isBlockedAddress(d);
            const got =
              isBlockedAddress(d) || inNetworks(set.networks, d) || set.addresses.includes(d);
            assert.equal(got, want, `${d} in ${JSON.stringify(net)}`);
          }
          // Minimal: no entry inside a blocked range, none inside another entry.
          for (const c of set.networks) {
            assert.ok(
              !BLOCKED_CIDRS.some(
                (b) =>
                  b.family === c.family &&
                  b.prefix <= c.prefix &&
                  within(c.network, b.network, b.prefix),
              ),
            );
            const inside = set.networks.filter(
              (o) =>
                o !== c &&
                o.family === c.family &&
                o.prefix <= c.prefix &&
                within(c.network, o.network, o.prefix),
            );
            assert.deepEqual(inside, [], cidrText(c));
          }
        },
      ),
      { numRuns: 1500 },
    );
  });

  it("property: a neighbour's NAT64 and 6to4 forms are blocked with it", () => {
    fc.assert(
      fc.property(hostNetworkArb, v4Near, (net, d) => {
        fc.pre(expectedBlocked(net, d, "sr-h") && !isBlockedAddress(d));
        const set = hostBlockSet(net, OPTS);
        const v = parseAddress(d)!.value;
        assert.ok(inNetworks(set.networks, formatIpv6((0x64ff9bn << 96n) | v)), "nat64");
        assert.ok(inNetworks(set.networks, formatIpv6((0x2002n << 112n) | (v << 80n))), "6to4");
      }),
      { numRuns: 500 },
    );
  });

  it("model: the rendered ruleset drops exactly the blocked set from the sandbox, and the live update refills it", () => {
    const base = {
      table: "sr-t1",
      hostIfname: "sr-h1",
      sandboxV4: "10.250.0.6",
      gatewayV4: "10.250.0.5",
      sandboxV6: "fd5c:5252:0:1::2",
      dnsResolvers: ["1.1.1.1"],
      blocked: BLOCKED_CIDRS,
    };
    fc.assert(
      fc.property(hostNetworkArb, hostNetworkArb, anyAddr, (before, after, d) => {
        fc.pre(d !== "1.1.1.1");
        const first = hostBlockSet(before, OPTS);
        const script = renderEgressRuleset({
          ...base,
          hostAddresses: first.addresses,
          hostNetworks: first.networks,
        });
        const model = parseScript(script);
        const fam = d.includes(":") ? 6 : 4;
        const packet = {
          family: fam as 4 | 6,
          src: fam === 4 ? base.sandboxV4 : base.sandboxV6,
          dst: d,
          proto: "tcp" as const,
          dport: 443,
          hoplimit: 64,
          ct: "new" as const,
        };
        const verdict = (m: typeof model) => evalChain(m, "from_sandbox", packet).verdict;
        const want = (n: HostNetwork) => expectedBlocked(n, d, "sr-h") || isBlockedAddress(d);
        assert.equal(verdict(model) === "drop", want(before), `${d}: ${script}`);
        // The live update (flush + add) replaces the host sets with the new neighbourhood.
        const next = hostBlockSet(after, OPTS);
        const update = renderHostSetUpdate(base.table, next.addresses, next.networks);
        const updated = parseScript(
          update
            .replace(/^flush set inet \S+ (\S+)$/gm, "set $1 {\n}")
            .replace(/^add element inet \S+ (\S+) \{ (.*) \}$/gm, "set $1 {\nelements = { $2 }\n}"),
        );
        for (const [name, elements] of updated.sets) model.sets.set(name, elements);
        assert.equal(verdict(model) === "drop", want(after), `${d} after the update: ${update}`);
      }),
      { numRuns: 800 },
    );
  });

  it("a resolver on the host's link gets the port-53 exception, nothing more", () => {
    const set = hostBlockSet(parseHostNetwork(FIXTURE), OPTS);
    const script = renderEgressRuleset({
      table: "sr-t2",
      hostIfname: "sr-h2",
      sandboxV4: "10.250.0.10",
      gatewayV4: "10.250.0.9",
      sandboxV6: null,
      hostAddresses: set.addresses,
      hostNetworks: set.networks,
      dnsResolvers: ["198.51.100.53"],
      blocked: BLOCKED_CIDRS,
    });
    const model = parseScript(script);
    const p = (dport: number, proto: "udp" | "tcp") => ({
      family: 4 as const,
      src: "10.250.0.10",
      dst: "198.51.100.53",
      proto,
      dport,
      hoplimit: 64,
      ct: "new" as const,
    });
    assert.equal(evalChain(model, "from_sandbox", p(53, "udp")).verdict, "accept");
    assert.equal(evalChain(model, "from_sandbox", p(80, "tcp")).verdict, "drop");
  });
});
