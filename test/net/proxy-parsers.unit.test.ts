/**
 * The egress proxy's parsers (src/net/proxy/): the TLS ClientHello's SNI, the HTTP request head's
 * Host, DNS queries and answers, and the decisions on them. Real ClientHellos come from Node's
 * own TLS client over loopback; the properties feed them fragmented into any number of records
 * and TCP chunks, mutated, truncated, oversized, and as plain garbage, and compare with an
 * independent reference parser. Nothing here needs root or a network beyond loopback.
 */
import assert from "node:assert/strict";
import net from "node:net";
import tls from "node:tls";
import { before, describe, it } from "node:test";
import fc from "fast-check";
import { parseAllowlist } from "../../src/net/allowlist.js";
import {
  MAX_HELLO_BYTES,
  MAX_PEEK_BYTES,
  peekClientHello,
  type HelloPeek,
} from "../../src/net/proxy/client-hello.js";
import {
  decideHttp,
  decideName,
  decideTls,
  dialable,
  RefusalLog,
  MAX_REFUSALS,
} from "../../src/net/proxy/decide.js";
import { addressAnswer, emptyAnswer, parseQuery, RCODE } from "../../src/net/proxy/dns-wire.js";
import { MAX_HEAD_BYTES, peekHttpHead } from "../../src/net/proxy/http-head.js";

/** The first flight Node's TLS client sends for `opts` (captured by a loopback server). */
function captureHello(opts: tls.ConnectionOptions): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const server = net.createServer((sock) => {
      const chunks: Buffer[] = [];
      sock.on("data", (d: Buffer) => {
        chunks.push(d);
        const all = Buffer.concat(chunks);
        if (all.length >= 5 && all.length >= 5 + all.readUInt16BE(3)) {
          sock.destroy();
          server.close();
          resolve(all);
        }
      });
      sock.on("error", () => undefined);
    });
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port;
      const c = tls.connect({ host: "127.0.0.1", port, rejectUnauthorized: false, ...opts });
      c.on("error", () => undefined);
    });
    server.on("error", reject);
  });
}

/** Splits a TLS record stream's handshake bytes into records of the given sizes (cycled). */
function refragment(records: Buffer, sizes: number[]): Buffer {
  const hs: Buffer[] = [];
  for (let pos = 0; pos + 5 <= records.length; pos += 5 + records.readUInt16BE(pos + 3))
    hs.push(records.subarray(pos + 5, pos + 5 + records.readUInt16BE(pos + 3)));
  const body = Buffer.concat(hs);
  const out: Buffer[] = [];
  for (let pos = 0, i = 0; pos < body.length; i++) {
    const n = Math.max(1, Math.min(16384, sizes[i % sizes.length] ?? 1));
    const part = body.subarray(pos, pos + n);
    out.push(Buffer.from([22, 3, 1, part.length >> 8, part.length & 0xff]), part);
    pos += part.length;
  }
  return Buffer.concat(out);
}

/** A ClientHello built by hand: `exts` as [type, data] pairs. */
function buildHello(exts: Array<[number, Buffer]>, opts: { trailing?: Buffer } = {}): Buffer {
  const extBytes = Buffer.concat(
    exts.map(([t, d]) =>
      Buffer.concat([Buffer.from([t >> 8, t & 0xff, d.length >> 8, d.length & 0xff]), d]),
    ),
  );
  const body = Buffer.concat([
    Buffer.from([3, 3]),
    Buffer.alloc(32, 7),
    Buffer.from([0]),
    Buffer.from([0, 2, 0x13, 0x01]),
    Buffer.from([1, 0]),
    Buffer.from([extBytes.length >> 8, extBytes.length & 0xff]),
    extBytes,
    opts.trailing ?? Buffer.alloc(0),
  ]);
  const hs = Buffer.concat([
    Buffer.from([1, body.length >> 16, (body.length >> 8) & 0xff, body.length & 0xff]),
    body,
  ]);
  return refragment(
    Buffer.concat([Buffer.from([22, 3, 1, hs.length >> 8, hs.length & 0xff]), hs]),
    [16384],
  );
}

function sni(...names: Array<[number, string]>): Buffer {
  const list = Buffer.concat(
    names.map(([type, n]) => {
      const b = Buffer.from(n, "latin1");
      return Buffer.concat([Buffer.from([type, b.length >> 8, b.length & 0xff]), b]);
    }),
  );
  return Buffer.concat([Buffer.from([list.length >> 8, list.length & 0xff]), list]);
}

/**
 * Reference ClientHello reader, written apart from the proxy's (exceptions instead of a reader
 * that returns null): the same rules, so the two must agree on every input.
 */
function referenceHello(data: Buffer): HelloPeek {
  if (data.length > MAX_PEEK_BYTES) return { kind: "refuse", reason: "oversized" };
  if (data.length >= 1 && data[0] !== 22) return { kind: "refuse", reason: "not_tls" };
  if (data.length >= 2 && data[1] !== 3) return { kind: "refuse", reason: "not_tls" };
  let hs = Buffer.alloc(0);
  let stopped = false;
  let pos = 0;
  while (data.length - pos >= 5) {
    if (data[pos] !== 22) {
      stopped = true;
      break;
    }
    const len = data.readUInt16BE(pos + 3);
    if (data[pos + 1] !== 3 || len < 1 || len > 16384)
      return { kind: "refuse", reason: "malformed" };
    hs = Buffer.concat([hs, data.subarray(pos + 5, pos + 5 + len)]);
    pos += 5 + len;
  }
  if (hs.length >= 1 && hs[0] !== 1) return { kind: "refuse", reason: "malformed" };
  const incomplete: HelloPeek = stopped
    ? { kind: "refuse", reason: "malformed" }
    : { kind: "more" };
  if (hs.length < 4) return incomplete;
  const len = hs.readUIntBE(1, 3);
  if (len > MAX_HELLO_BYTES) return { kind: "refuse", reason: "oversized" };
  if (hs.length < 4 + len) return incomplete;
  if (hs.length > 4 + len) return { kind: "refuse", reason: "malformed" };
  const b = hs.subarray(4);
  try {
    let o = 34;
    const need = (n: number) => {
      if (o + n > b.length) throw new Error("short");
    };
    need(1);
    const sid = b[o] as number;
    if (sid > 32) throw new Error("sid");
    o += 1 + sid;
    need(2);
    const cs = b.readUInt16BE(o);
    if (cs < 2 || cs % 2) throw new Error("suites");
    o += 2 + cs;
    need(1);
    const cm = b[o] as number;
    if (cm < 1) throw new Error("compression");
    o += 1 + cm;
    need(0);
    if (o === b.length) return { kind: "hello", serverName: null, ech: false };
    need(2);
    const extLen = b.readUInt16BE(o);
    o += 2;
    need(extLen);
    if (o + extLen !== b.length) throw new Error("trailing");
    const end = o + extLen;
    const seen: number[] = [];
    let name: string | null = null;
    let ech = false;
    while (o < end) {
      if (o + 4 > end) throw new Error("ext header");
      const t = b.readUInt16BE(o);
      const l = b.readUInt16BE(o + 2);
      o += 4;
      if (o + l > end) throw new Error("ext body");
      if (seen.includes(t)) throw new Error("dup");
      seen.push(t);
      if (t === 0xfe0d || t === 0xffce) ech = true;
      if (t === 0) {
        const d = b.subarray(o, o + l);
        if (d.length < 2 || d.readUInt16BE(0) !== d.length - 2 || d.length === 2)
          throw new Error("sni list");
        if (d.length < 5 || d[2] !== 0) throw new Error("sni type");
        const nl = d.readUInt16BE(3);
        if (nl === 0 || 5 + nl !== d.length) throw new Error("sni name");
        name = d.subarray(5).toString("latin1");
      }
      o += l;
    }
    return { kind: "hello", serverName: name, ech };
  } catch {
    return { kind: "refuse", reason: "malformed" };
  }
}

describe("TLS ClientHello: SNI", () => {
  const hellos = new Map<string, Buffer>();
  before(async () => {
    hellos.set("named", await captureHello({ servername: "Allowed.Test" }));
    hellos.set(
      "alpn",
      await captureHello({ servername: "a.wild.test", ALPNProtocols: ["h2", "http/1.1"] }),
    );
    hellos.set("tls12", await captureHello({ servername: "allowed.test", maxVersion: "TLSv1.2" }));
    hellos.set("ip", await captureHello({}));
  });

  it("reads the name Node's TLS client sends, and no name for an IP address", () => {
    assert.deepEqual(peekClientHello(hellos.get("named")!), {
      kind: "hello",
      serverName: "Allowed.Test",
      ech: false,
    });
    assert.deepEqual(peekClientHello(hellos.get("alpn")!), {
      kind: "hello",
      serverName: "a.wild.test",
      ech: false,
    });
    assert.deepEqual(peekClientHello(hellos.get("tls12")!), {
      kind: "hello",
      serverName: "allowed.test",
      ech: false,
    });
    assert.deepEqual(peekClientHello(hellos.get("ip")!), {
      kind: "hello",
      serverName: null,
      ech: false,
    });
  });

  it("property: any fragmentation into records and TCP chunks gives the same name, and every prefix waits", () => {
    fc.assert(
      fc.property(
        fc.constantFrom("named", "alpn", "tls12", "ip"),
        fc.array(fc.integer({ min: 1, max: 600 }), { minLength: 1, maxLength: 8 }),
        fc.array(fc.integer({ min: 1, max: 700 }), { minLength: 1, maxLength: 8 }),
        (which, recordSizes, chunkSizes) => {
          const original = hellos.get(which)!;
          const data = refragment(original, recordSizes);
          const want = peekClientHello(original);
          let got: HelloPeek = { kind: "more" };
          for (let pos = 0, i = 0; pos < data.length; i++) {
            pos = Math.min(data.length, pos + (chunkSizes[i % chunkSizes.length] as number));
            got = peekClientHello(data.subarray(0, pos));
            if (pos < data.length) assert.equal(got.kind, "more", `prefix ${pos}/${data.length}`);
          }
          assert.deepEqual(got, want);
        },
      ),
      { numRuns: 400 },
    );
  });

  it("property: mutated, truncated and extended hellos and garbage agree with the reference reader, never throw", () => {
    const mutated = fc
      .tuple(
        fc.constantFrom(...hellos.values()),
        fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 4 }),
        fc.nat(),
        fc.uint8Array({ maxLength: 40 }),
      )
      .map(([h, flips, cut, tail]) => {
        const b = Buffer.from(h);
        for (const [at, v] of flips) b[at % b.length] = v;
        return Buffer.concat([
          b.subarray(0, 1 + (cut % b.length)),
          cut % 3 === 0 ? Buffer.from(tail) : Buffer.alloc(0),
        ]);
      });
    const garbage = fc.uint8Array({ maxLength: 300 }).map((a) => Buffer.from(a));
    const tlsLike = fc
      .uint8Array({ maxLength: 300 })
      .map((a) => Buffer.concat([Buffer.from([22, 3, 1, 0, a.length]), Buffer.from(a)]));
    fc.assert(
      fc.property(fc.oneof(mutated, garbage, tlsLike), (data) => {
        assert.deepEqual(peekClientHello(data), referenceHello(data));
      }),
      { numRuns: 5000 },
    );
  });

  it("refuses: not TLS, SSLv2, oversized, two names, a non-host_name entry, duplicate extensions, bytes after the hello", () => {
    const refuse = (data: Buffer) => peekClientHello(data);
    assert.deepEqual(refuse(Buffer.from("GET / HTTP/1.1\r\n")), {
      kind: "refuse",
      reason: "not_tls",
    });
    assert.deepEqual(refuse(Buffer.from([0x80, 0x2e, 0x01, 0x00, 0x02])), {
      kind: "refuse",
      reason: "not_tls",
    });
    assert.deepEqual(refuse(Buffer.from([22, 3, 1, 0x40, 0x01])), {
      kind: "refuse",
      reason: "malformed",
    });
    assert.deepEqual(refuse(Buffer.from([22, 3, 1, 0, 4, 1, 0x01, 0, 0])), {
      kind: "refuse",
      reason: "oversized",
    });
    assert.deepEqual(refuse(Buffer.alloc(MAX_PEEK_BYTES + 1, 22)), {
      kind: "refuse",
      reason: "oversized",
    });
    const big = buildHello([
      [0, sni([0, "allowed.test"])],
      [21, Buffer.alloc(MAX_HELLO_BYTES)],
    ]);
    assert.deepEqual(refuse(big), { kind: "refuse", reason: "oversized" });
    assert.deepEqual(refuse(buildHello([[0, sni([0, "allowed.test"], [0, "evil.test"])]])), {
      kind: "refuse",
      reason: "malformed",
    });
    assert.deepEqual(refuse(buildHello([[0, sni([1, "evil.test"])]])), {
      kind: "refuse",
      reason: "malformed",
    });
    assert.deepEqual(
      refuse(
        buildHello([
          [0, sni([0, "a.test"])],
          [0, sni([0, "b.test"])],
        ]),
      ),
      {
        kind: "refuse",
        reason: "malformed",
      },
    );
    assert.deepEqual(
      refuse(buildHello([[0, sni([0, "a.test"])]], { trailing: Buffer.from([0]) })),
      {
        kind: "refuse",
        reason: "malformed",
      },
    );
    assert.deepEqual(refuse(buildHello([[0, sni([0, "allowed.test"])]])), {
      kind: "hello",
      serverName: "allowed.test",
      ech: false,
    });
  });

  it("Encrypted Client Hello (and draft ESNI) is seen, and refused by the decision whatever the outer name", () => {
    const allow = parseAllowlist("allowed.test");
    for (const ext of [0xfe0d, 0xffce]) {
      const peek = peekClientHello(
        buildHello([
          [0, sni([0, "allowed.test"])],
          [ext, Buffer.alloc(40, 1)],
        ]),
      );
      assert.deepEqual(peek, { kind: "hello", serverName: "allowed.test", ech: true });
      assert.deepEqual(decideTls(peek as Exclude<HelloPeek, { kind: "more" }>, allow), {
        allow: false,
        reason: "ech",
        host: "allowed.test",
      });
    }
  });
});

describe("TLS and HTTP decisions", () => {
  const allow = parseAllowlist("allowed.test, *.wild.test");
  it("names, IP literals, bad names", () => {
    assert.deepEqual(decideName("ALLOWED.test.", allow), { allow: true, name: "allowed.test" });
    assert.deepEqual(decideName("x.y.wild.test", allow), { allow: true, name: "x.y.wild.test" });
    assert.deepEqual(decideName("wild.test", allow), {
      allow: false,
      reason: "not_allowed",
      host: "wild.test",
    });
    assert.deepEqual(decideName("evilallowed.test", allow), {
      allow: false,
      reason: "not_allowed",
      host: "evilallowed.test",
    });
    for (const ip of ["198.51.100.10", "[2001:db8::1]", "3325256714", "::ffff:10.0.0.1"])
      assert.equal((decideName(ip, allow) as { reason: string }).reason, "ip_address", ip);
    assert.deepEqual(decideName("a\u0000b.test\n", allow), {
      allow: false,
      reason: "bad_name",
      host: "a\\x00b.test\\x0a",
    });
    const long = decideName("x".repeat(300), allow) as { host: string };
    assert.ok(long.host.length <= 101);
    assert.deepEqual(decideTls({ kind: "hello", serverName: null, ech: false }, allow), {
      allow: false,
      reason: "no_name",
      host: null,
    });
    assert.deepEqual(decideTls({ kind: "refuse", reason: "not_tls" }, allow), {
      allow: false,
      reason: "protocol",
      host: null,
    });
  });

  it("HTTP: Host decides; refusals keep their reason", () => {
    const head = (s: string) => peekHttpHead(Buffer.from(s, "latin1"));
    const decide = (s: string) => {
      const p = head(s);
      assert.notEqual(p.kind, "more", s);
      return decideHttp(p as Exclude<typeof p, { kind: "more" }>, allow);
    };
    assert.deepEqual(decide("GET / HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n"), {
      allow: true,
      name: "allowed.test",
    });
    assert.deepEqual(decide("GET http://allowed.test/x HTTP/1.1\r\nHost: allowed.test\r\n\r\n"), {
      allow: true,
      name: "allowed.test",
    });
    assert.deepEqual(decide("GET http://evil.test/x HTTP/1.1\r\nHost: allowed.test\r\n\r\n"), {
      allow: false,
      reason: "host_mismatch",
      host: "allowed.test",
    });
    assert.equal(
      (
        decide("GET / HTTP/1.1\r\nHost: allowed.test\r\nHost: evil.test\r\n\r\n") as {
          reason: string;
        }
      ).reason,
      "host_mismatch",
    );
    assert.equal(
      (decide("GET / HTTP/1.1\r\nhost: evil.test\r\n\r\n") as { reason: string }).reason,
      "not_allowed",
    );
    assert.equal((decide("GET / HTTP/1.0\r\n\r\n") as { reason: string }).reason, "no_name");
    assert.equal(
      (decide("GET / HTTP/1.1\r\nHost: 203.0.113.10\r\n\r\n") as { reason: string }).reason,
      "ip_address",
    );
    assert.equal(
      (decide("GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n") as { reason: string }).reason,
      "ip_address",
    );
    for (const bad of [
      "GET / HTTP/1.1\r\nHost: allowed.test\r\n X-Fold: evil.test\r\n\r\n",
      "GET / HTTP/1.1\r\nHost : evil.test\r\nHost: allowed.test\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: allowed.test\nHost: evil.test\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: allowed.test\r\nX: a\rb\r\n\r\n",
      "GET x HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: user@allowed.test\r\n\r\n",
    ])
      assert.equal((decide(bad) as { reason: string }).reason, "protocol", JSON.stringify(bad));
    for (const notHttp of [
      "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
      "CONNECT evil.test:443 HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
      "\u0016\u0003\u0001",
    ])
      assert.equal(
        (decide(notHttp) as { reason: string }).reason,
        "protocol",
        JSON.stringify(notHttp),
      );
    assert.deepEqual(head("G".repeat(MAX_HEAD_BYTES + 1)), { kind: "refuse", reason: "oversized" });
  });

  it("property: a request with one Host gives that Host whatever its other headers; every prefix waits", () => {
    const token = fc
      .stringMatching(/^[A-Za-z0-9-]{1,12}$/)
      .filter((t) => t.toLowerCase() !== "host");
    const value = fc.stringMatching(/^[ -~]{0,30}$/).map((v) => v.trim());
    fc.assert(
      fc.property(
        fc.constantFrom("GET", "POST", "HEAD", "OPTIONS"),
        fc.array(fc.tuple(token, value), { maxLength: 6 }),
        fc.nat({ max: 6 }),
        fc.constantFrom("allowed.test", "a.wild.test:8080", "Evil.Test"),
        fc.constantFrom("Host", "host", "HOST"),
        (method, headers, at, host, hostName) => {
          const lines = headers.map(([k, v]) => `${k}: ${v}`);
          lines.splice(at % (lines.length + 1), 0, `${hostName}: ${host}`);
          const req = `${method} /p HTTP/1.1\r\n${lines.join("\r\n")}\r\n\r\nbody`;
          const bytes = Buffer.from(req, "latin1");
          const end = req.indexOf("\r\n\r\n") + 4;
          for (let n = 0; n < end; n += 7)
            assert.equal(peekHttpHead(bytes.subarray(0, n)).kind, "more");
          assert.deepEqual(peekHttpHead(bytes), {
            kind: "request",
            host: host.replace(/:\d+$/, ""),
          });
        },
      ),
      { numRuns: 1000 },
    );
  });

  it("property: garbage never throws and never yields a request without a Host line in it", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 400 }), (a) => {
        const p = peekHttpHead(Buffer.from(a));
        if (p.kind === "request") assert.match(Buffer.from(a).toString("latin1"), /\r\nhost:/i);
      }),
      { numRuns: 3000 },
    );
  });

  it("dialable: blocked ranges, the host's own addresses and neighbourhood are not", () => {
    const host = {
      addresses: ["192.0.2.2"],
      networks: [{ family: 4 as const, network: "203.0.113.128", prefix: 25, name: "on-link" }],
    };
    for (const no of [
      "10.1.0.10",
      "169.254.169.254",
      "127.0.0.1",
      "192.0.2.2",
      "203.0.113.200",
      "::ffff:10.0.0.1",
      "64:ff9b::a01:1",
      "fd00::1",
      "x",
    ])
      assert.equal(dialable(no, host), false, no);
    for (const yes of ["198.51.100.10", "203.0.113.10", "2001:db8:1::10"])
      assert.equal(dialable(yes, host), true, yes);
  });

  it("the refusal log merges repeats and keeps a bounded number of entries", () => {
    const log = new RefusalLog();
    for (let i = 0; i < 3; i++) log.add("evil.test", 443, "not_allowed");
    log.add("evil.test", 53, "not_allowed");
    for (let i = 0; i < MAX_REFUSALS + 10; i++) log.add(`n${i}.test`, 443, "not_allowed");
    const e = log.entries();
    assert.equal(e.length, MAX_REFUSALS);
    assert.deepEqual(e[0], { host: "evil.test", port: 443, reason: "not_allowed", count: 3 });
    assert.equal(log.dropped, 12);
  });
});

describe("DNS messages", () => {
  function query(name: string, qtype = 1, flags = 0x0100): Buffer {
    const labels = name === "" ? [] : name.split(".");
    return Buffer.concat([
      Buffer.from([0x12, 0x34, flags >> 8, flags & 0xff, 0, 1, 0, 0, 0, 0, 0, 0]),
      ...labels.map((l) =>
        Buffer.concat([Buffer.from([Buffer.byteLength(l, "latin1")]), Buffer.from(l, "latin1")]),
      ),
      Buffer.from([0, qtype >> 8, qtype & 0xff, 0, 1]),
    ]);
  }

  it("parses a question and answers it; refuses what is not one plain question", () => {
    const p = parseQuery(query("Allowed.Test"));
    assert.ok(p.ok);
    assert.equal(p.q.name, "Allowed.Test");
    assert.equal(p.q.id, 0x1234);
    const a = addressAnswer(p.q, [Uint8Array.from([198, 51, 100, 10])], 30);
    assert.equal(a.readUInt16BE(2) & 0x800f, 0x8000);
    assert.equal(a.readUInt16BE(6), 1);
    assert.deepEqual([...a.subarray(-4)], [198, 51, 100, 10]);
    const nx = emptyAnswer(p.q, RCODE.NXDOMAIN);
    assert.equal(nx.readUInt16BE(2) & 0xf, 3);
    assert.equal(nx.readUInt16BE(6), 0);
    // A compression pointer in a question, a response, two questions, an opcode other than QUERY.
    const ptr = Buffer.concat([query("").subarray(0, 12), Buffer.from([0xc0, 0x0c, 0, 1, 0, 1])]);
    assert.deepEqual(parseQuery(ptr), { ok: false, id: 0x1234, rcode: RCODE.FORMERR });
    assert.deepEqual(parseQuery(query("a.test", 1, 0x8100)), {
      ok: false,
      id: null,
      rcode: RCODE.FORMERR,
    });
    const two = query("a.test");
    two.writeUInt16BE(2, 4);
    assert.deepEqual(parseQuery(two), { ok: false, id: 0x1234, rcode: RCODE.FORMERR });
    assert.deepEqual(parseQuery(query("a.test", 1, 0x2100)), {
      ok: false,
      id: 0x1234,
      rcode: RCODE.NOTIMP,
    });
    // A label holding a dot cannot pass for two labels.
    const dotted = parseQuery(query("allowed.test").fill(0x2e, 13, 14));
    assert.ok(dotted.ok);
    assert.equal(decideName(dotted.q.name, parseAllowlist("allowed.test")).allow, false);
  });

  it("a UDP answer over 512 bytes is cut and flagged truncated", () => {
    const p = parseQuery(query("many.test"));
    assert.ok(p.ok);
    const a = addressAnswer(
      p.q,
      Array.from({ length: 60 }, (_, i) => Uint8Array.from([198, 51, 100, i])),
      30,
      512,
    );
    assert.ok(a.length <= 512);
    assert.ok(a.readUInt16BE(2) & 0x0200, "TC set");
  });

  it("property: garbage never throws; a parsed question echoes back exactly", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (a) => {
        const p = parseQuery(a);
        if (!p.ok) return;
        const ans = emptyAnswer(p.q, RCODE.NOERROR);
        assert.deepEqual([...ans.subarray(12)], [...p.q.question]);
      }),
      { numRuns: 5000 },
    );
  });
});
