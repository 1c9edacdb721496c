// Who a request is counted against (http/client-address.ts) and the buckets that count it
// (http/auth.ts FailureLimiter.take), under a client that writes its own X-Forwarded-For, spells
// addresses every way Node and proxies do, rotates IPv6 addresses, or sends its attempts at once.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { FailureLimiter } from "../../src/http/auth.js";
import {
  bucketOf,
  clientAddress,
  NO_TRUSTED_PROXIES,
  normaliseAddress,
  parseTrustedProxies,
} from "../../src/http/client-address.js";

const front = parseTrustedProxies(["10.0.0.0/8", "192.168.1.5", "fd00::/8"]);

describe("the client's address (SEC-LIMIT-PROXIES)", () => {
  test("without trusted proxies the peer is the client, whatever X-Forwarded-For says", () => {
    for (const xff of [undefined, "1.2.3.4", "1.2.3.4, 10.0.0.1", ["5.6.7.8"], "garbage"])
      assert.equal(clientAddress("203.0.113.9", xff, NO_TRUSTED_PROXIES), "203.0.113.9");
    assert.equal(clientAddress("203.0.113.9", "1.2.3.4", front), "203.0.113.9", "peer not trusted");
  });

  test("from a trusted proxy: the rightmost entry that is not a trusted proxy", () => {
    assert.equal(clientAddress("10.1.2.3", "198.51.100.1", front), "198.51.100.1");
    assert.equal(clientAddress("10.1.2.3", "198.51.100.1, 10.9.9.9", front), "198.51.100.1");
    assert.equal(
      clientAddress("10.1.2.3", "198.51.100.1, 192.168.1.5, 10.9.9.9", front),
      "198.51.100.1",
      "a chain of trusted proxies",
    );
    // Several header lines are one list, in order.
    assert.equal(clientAddress("10.1.2.3", ["198.51.100.1", "10.9.9.9"], front), "198.51.100.1");
    assert.equal(clientAddress("fd00::1", "2001:db8::7", front), "2001:db8::7");
  });

  test("what the client wrote to the left of its own entry is never read", () => {
    // The client sent "X-Forwarded-For: 1.1.1.1, 2.2.2.2"; the proxy appended its peer.
    for (const forged of ["1.1.1.1, 2.2.2.2", "10.0.0.7", "192.168.1.5, 10.0.0.1", "127.0.0.1"])
      assert.equal(
        clientAddress("10.1.2.3", `${forged}, 198.51.100.66`, front),
        "198.51.100.66",
        forged,
      );
  });

  test("garbage in the chain stops at the last trusted hop; it never picks the bucket", () => {
    const cases: [string, string][] = [
      ["unknown", "10.1.2.3"],
      ["", "10.1.2.3"],
      ["198.51.100.1, not-an-ip", "10.1.2.3"],
      ["198.51.100.1, not-an-ip, 10.5.5.5", "10.5.5.5"],
      ["1.2.3.4:5678", "10.1.2.3"],
      ["_hidden", "10.1.2.3"],
      ["999.1.1.1", "10.1.2.3"],
      ["1.2.3", "10.1.2.3"],
      ["0x7f.1", "10.1.2.3"],
      [" 198.51.100.1 ", "198.51.100.1"],
      ["198.51.100.1,,", "10.1.2.3"],
      ["1.2.3.4\u0000", "10.1.2.3"],
    ];
    for (const [xff, want] of cases)
      assert.equal(clientAddress("10.1.2.3", xff, front), want, JSON.stringify(xff));
    // Every entry trusted: the leftmost trusted hop is as far as anyone vouches.
    assert.equal(clientAddress("10.1.2.3", "10.0.0.9, 192.168.1.5", front), "10.0.0.9");
    // No header from a trusted proxy: the proxy is the client.
    assert.equal(clientAddress("10.1.2.3", undefined, front), "10.1.2.3");
  });

  test("addresses as Node and proxies spell them are one address", () => {
    assert.equal(normaliseAddress("::ffff:10.1.2.3"), "10.1.2.3");
    assert.equal(normaliseAddress("::FFFF:198.51.100.1"), "198.51.100.1");
    assert.equal(normaliseAddress("[2001:DB8::1]"), "2001:db8::1");
    assert.equal(normaliseAddress("fe80::1%eth0"), "fe80::1");
    assert.equal(normaliseAddress("localhost"), null);
    assert.equal(normaliseAddress("1.2.3.4/32"), null);
    // A proxy's IPv4-mapped peer is still that proxy; its client too.
    assert.equal(clientAddress("::ffff:10.1.2.3", "::ffff:198.51.100.1", front), "198.51.100.1");
    assert.equal(clientAddress(undefined, "1.2.3.4", front), "unknown");
  });

  test("the operator's list: addresses and ranges, IPv4 and IPv6; anything else named and refused", () => {
    const p = parseTrustedProxies([" 10.0.0.0/8 ", "2001:db8::/32", "127.0.0.1", "", "::1"]);
    assert.deepEqual(p.entries, ["10.0.0.0/8", "2001:db8::/32", "127.0.0.1", "::1"]);
    for (const a of ["10.255.0.1", "2001:db8:ffff::1", "127.0.0.1", "::ffff:127.0.0.1", "::1"])
      assert.ok(p.has(a), a);
    for (const a of ["11.0.0.1", "2001:db9::1", "127.0.0.2", "::2", "garbage"])
      assert.ok(!p.has(a), a);
    for (const bad of [
      "10.0.0.0/33",
      "::/129",
      "10.0.0.0/x",
      "10.0.0.0/",
      "example.com",
      "10.0.0",
      "*",
      "10.0.0.0/8/8",
      "1.2.3.4:80",
    ])
      assert.throws(() => parseTrustedProxies([bad]), new RegExp(bad.replace(/[*./:]/g, "\\$&")));
    assert.equal(parseTrustedProxies([]).entries.length, 0);
  });
});

describe("the buckets addresses are counted in", () => {
  test("an IPv4 address alone; an IPv6 address by its /64, however it is written", () => {
    assert.equal(bucketOf("198.51.100.1"), "198.51.100.1");
    const b = bucketOf("2001:db8:1:2:aaaa::1");
    assert.equal(b, "2001:db8:1:2::/64");
    for (const same of [
      "2001:db8:1:2::ffff",
      "2001:0db8:0001:0002:ffff:ffff:ffff:ffff",
      "2001:db8:1:2:0:0:0:7",
    ])
      assert.equal(bucketOf(same), b, same);
    assert.notEqual(bucketOf("2001:db8:1:3::1"), b);
    assert.equal(bucketOf("::1"), "0:0:0:0::/64");
    assert.equal(bucketOf("::ffff:1.2.3.4"), "0:0:0:0::/64");
    assert.equal(bucketOf("unknown"), "unknown");
  });

  test("rotating through a /64 does not buy more attempts", () => {
    const f = new FailureLimiter(3, 60_000);
    const now = 1_000_000;
    for (let i = 0; i < 3; i++) assert.ok(f.take(`2001:db8:7:7::${i + 1}`, now));
    assert.equal(f.take("2001:db8:7:7::99", now), null);
    assert.ok(f.take("2001:db8:7:8::1", now), "the next /64 is another client");
  });

  test("take: attempts sent at once each take a token before any finishes; a success gives its back", () => {
    const f = new FailureLimiter(10, 6000);
    const now = 5_000_000;
    const taken = Array.from({ length: 120 }, () => f.take("203.0.113.1", now));
    assert.equal(taken.filter(Boolean).length, 10, "the burst, no more");
    assert.ok(f.retryAfterS("203.0.113.1", now) > 0);
    taken[0]!.refund(now);
    taken[0]!.refund(now);
    assert.ok(f.take("203.0.113.1", now), "one refunded token (once, however often refunded)");
    assert.equal(f.take("203.0.113.1", now), null);
    // Refunds never fill a bucket past its burst.
    const g = new FailureLimiter(2, 6000);
    const t = g.take("198.51.100.2", now)!;
    t.refund(now);
    assert.ok(g.take("198.51.100.2", now));
    assert.ok(g.take("198.51.100.2", now));
    assert.equal(g.take("198.51.100.2", now), null);
  });
});
