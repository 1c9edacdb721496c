import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  BLOCKED_CIDRS,
  BLOCKED_V4_CIDRS,
  classifyAddress,
  isBlockedAddress,
  parseCidr,
} from "../../src/net/addresses.js";
import { formatIpv4, formatIpv6, parseAddress } from "../../src/net/parse-address.js";

const BLOCKED = [
  "0.0.0.0",
  "0.1.2.3",
  "10.0.0.1",
  "10.255.255.255",
  "100.64.0.1",
  "100.127.255.255",
  "127.0.0.1",
  "127.255.255.254",
  "169.254.169.254",
  "169.254.0.1",
  "172.16.0.1",
  "172.31.255.255",
  "192.0.0.8",
  "192.168.1.1",
  "198.18.0.1",
  "198.19.255.255",
  "224.0.0.1",
  "239.255.255.250",
  "240.0.0.1",
  "255.255.255.255",
  // inet_aton shorthands
  "2130706433",
  "0x7f.1",
  "0x7f000001",
  "017700000001",
  "127.1",
  "127.0.1",
  "0177.0.0.1",
  "2852039166",
  "0xa9.0xfe.0xa9.0xfe",
  "0251.0376.0251.0376",
  "169.254.43518",
  "0",
  "10.1",
  "127.0.0.1 trailing",
  "0x0A.0x00.0x00.0x01",
  // IPv6
  "::",
  "::1",
  "0:0:0:0:0:0:0:1",
  "[::1]",
  "::1%lo",
  "fc00::1",
  "fd00::1",
  "fdff:ffff::1",
  "fe80::1",
  "fe80::1%eth0",
  "febf::1",
  "fec0::1",
  "ff02::1",
  "ff00::",
  "FF05::2",
  "::ffff:169.254.169.254",
  "::ffff:a9fe:a9fe",
  "::FFFF:7F00:1",
  "::ffff:10.0.0.1",
  "0:0:0:0:0:ffff:127.0.0.1",
  "64:ff9b::a9fe:a9fe",
  "64:ff9b::10.0.0.1",
  "64:ff9b::127.0.0.1",
  "64:ff9b:1::1",
  "2002:a9fe:a9fe::1",
  "2002:7f00:1::",
  "2002:c0a8:0101::1",
  "::ffff:8.8.8.8", // mapped: never legitimate on the wire, the whole /96 is dropped
];
const PUBLIC = [
  "1.1.1.1",
  "8.8.8.8",
  "9.255.255.255",
  "11.0.0.0",
  "100.63.255.255",
  "100.128.0.0",
  "126.255.255.255",
  "128.0.0.0",
  "169.253.255.255",
  "169.255.0.0",
  "172.15.255.255",
  "172.32.0.0",
  "192.0.1.0",
  "192.0.2.1",
  "192.167.255.255",
  "192.169.0.0",
  "198.17.255.255",
  "198.20.0.0",
  "198.51.100.10",
  "203.0.113.10",
  "223.255.255.255",
  "134744072",
  "0x08080808",
  "2001:db8::1",
  "2606:4700::1111",
  "2a00:1450::1",
  "fbff:ffff::1",
  "64:ff9b::808:808",
  "64:ff9b::8.8.8.8",
  "2002:808:808::1",
  "::2",
  "fe7f::1",
];
const GARBAGE = [
  "",
  " ",
  "localhost",
  "1.2.3.4.5",
  "256.0.0.1",
  "1.2.3.256",
  "08.1.1.1",
  "0x",
  "1..1",
  "1.2.3.",
  ".1.2.3",
  "4294967296",
  "0x100000000",
  "1.16777216",
  ":::",
  "1::2::3",
  "12345::",
  "::g",
  "1:2:3:4:5:6:7:8:9",
  "::ffff:1.2.3",
  "::ffff:256.1.1.1",
  "[::1",
  "example.com",
  "-1",
  "1e3",
  "１.１.１.１",
  "1.1.1.1/32",
  "fe80::1%",
  "%eth0",
];

describe("classifyAddress / isBlockedAddress", () => {
  for (const a of BLOCKED) {
    it(`blocks ${JSON.stringify(a)}`, () =>
      assert.equal(isBlockedAddress(a), true, JSON.stringify(classifyAddress(a))));
  }
  for (const a of PUBLIC) {
    it(`allows ${JSON.stringify(a)}`, () =>
      assert.equal(isBlockedAddress(a), false, JSON.stringify(classifyAddress(a))));
  }
  it("fails closed on everything unparsable", () => {
    for (const a of GARBAGE) {
      const c = classifyAddress(a);
      if (c.valid) assert.equal(c.blocked, true, `${a} parsed as ${c.address} and was allowed`);
      else assert.equal(c.blocked, true);
    }
    assert.equal(isBlockedAddress(undefined as unknown as string), true);
  });
  it("decodes the shorthands to the address the packet carries", () => {
    const cases: Array<[string, string]> = [
      ["2130706433", "127.0.0.1"],
      ["0x7f.1", "127.0.0.1"],
      ["127.1", "127.0.0.1"],
      ["169.254.43518", "169.254.169.254"],
      ["0251.0376.0251.0376", "169.254.169.254"],
      ["10.1.10", "10.1.0.10"],
    ];
    for (const [text, addr] of cases) {
      const c = classifyAddress(text);
      assert.ok(c.valid && c.address === addr, `${text}: ${JSON.stringify(c)}`);
    }
    const m = classifyAddress("::ffff:169.254.169.254");
    assert.ok(m.valid && m.embeddedV4 === "169.254.169.254" && m.range === "link-local-metadata");
  });
  it("every blocked IPv4 range is blocked in every embedding, at both ends of the range", () => {
    for (const c of BLOCKED_V4_CIDRS) {
      const lo = parseAddress(c.network)!.value;
      const hi = lo + (1n << BigInt(32 - c.prefix)) - 1n;
      for (const v of [lo, hi]) {
        const q = formatIpv4(v);
        for (const form of [
          q,
          `::ffff:${q}`,
          formatIpv6(0xffff00000000n | v),
          formatIpv6((0x64ff9bn << 96n) | v),
          formatIpv6((0x2002n << 112n) | (v << 80n)),
        ]) {
          assert.equal(isBlockedAddress(form), true, `${c.name}: ${form}`);
        }
      }
    }
  });
  it("property: an IPv4 address is blocked iff a blocked v4 CIDR contains it, in any text form", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 0xffffffff }), (n) => {
        const v = BigInt(n);
        const inRange = BLOCKED_V4_CIDRS.some((c) => {
          const net = parseAddress(c.network)!.value;
          const s = BigInt(32 - c.prefix);
          return v >> s === net >> s;
        });
        const forms = [
          formatIpv4(v),
          String(n),
          `0x${n.toString(16)}`,
          `0${n.toString(8)}`,
          `${Number(v >> 24n)}.${n & 0xffffff}`,
          `::ffff:${formatIpv4(v)}`,
        ];
        for (const f of forms.slice(0, 5)) assert.equal(isBlockedAddress(f), inRange, f);
        assert.equal(isBlockedAddress(forms[5]!), true); // mapped: blocked as IPv6
        assert.equal(isBlockedAddress(formatIpv6((0x64ff9bn << 96n) | v)), inRange);
      }),
      { numRuns: 3000 },
    );
  });
  it("property: IPv6 text round-trips and classification ignores case, brackets and zone", () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }), (v) => {
        const text = formatIpv6(v);
        assert.equal(parseAddress(text)?.value, v);
        const b = isBlockedAddress(text);
        assert.equal(isBlockedAddress(`[${text.toUpperCase()}]`), b);
        assert.equal(isBlockedAddress(`${text}%eth0`), b);
      }),
      { numRuns: 3000 },
    );
  });
  it("the CIDR list is well-formed and has both families", () => {
    for (const c of BLOCKED_CIDRS) assert.ok(parseCidr(`${c.network}/${c.prefix}`), `${c.name}`);
    assert.ok(
      BLOCKED_CIDRS.some((c) => c.family === 6 && c.network === "::ffff:0:0" && c.prefix === 96),
    );
    assert.equal(parseCidr("10.0.0.1/8"), null, "host bits set");
  });
});
