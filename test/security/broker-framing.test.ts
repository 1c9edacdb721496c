// The broker's framing, in-process against a real upstream (issue 43; docs/decisions/0015,
// "Each request, framed"): a real Broker serves raw connections as the egress proxy hands them
// over, and forwards to a bound host on loopback (root: it listens on ports 80 and 443 of a
// 127/8 address) that keeps connections alive, logs which connection each request came on and
// echoes every body, as a bound host that only echoes bodies would. The code's side sends raw
// bytes, so each method can carry each framing, and a smuggled request can ride in a body.
//
// What must hold: each request the code sends reaches the upstream as exactly one request, on an
// upstream connection of its own, with exactly the body the code sent; framing the broker cannot
// write out is refused with nothing sent; the value never comes back to the code and never sits
// in any body; every request of a connection passes the first request's head rules.
import assert from "node:assert/strict";
import { X509Certificate, createPrivateKey, randomBytes } from "node:crypto";
import http from "node:http";
import https from "node:https";
import net from "node:net";
import tls from "node:tls";
import { after, before, describe, it } from "node:test";
import { allowlistOf } from "../../src/net/allowlist.js";
import { Broker } from "../../src/net/proxy/broker.js";
import type { RefusalReason } from "../../src/net/proxy/reasons.js";
import { LeafIssuer, newCallCa, publicKeyId } from "../../src/net/proxy/x509.js";

/** The bound host's address: loopback, ports 80 and 443 (no other test listens there). */
const UP = "127.43.7.1";
const NAME = "bound.test";
const VALUE = `sr-framing-${randomBytes(12).toString("hex")}`;
const PH = `scratchrun-secret-${randomBytes(32).toString("hex")}`;

function issuerOf(ca: { certPem: string; keyPem: string }): LeafIssuer {
  const cert = new X509Certificate(ca.certPem);
  return new LeafIssuer(
    createPrivateKey(ca.keyPem),
    cert.subject.slice(3),
    publicKeyId(cert.publicKey),
  );
}

interface Seen {
  conn: number;
  port: number;
  method: string;
  url: string;
  authorization: string | undefined;
  body: Buffer;
}

/** The bound host: keeps connections alive (as real servers do), echoes bodies, logs it all. */
class Upstream {
  readonly seen: Seen[] = [];
  connections = 0;
  private readonly servers: net.Server[] = [];
  readonly caPem: string;
  private readonly cert: { cert: string; key: string };

  constructor() {
    const ca = newCallCa();
    const issuer = issuerOf(ca);
    this.caPem = ca.certPem;
    this.cert = { cert: issuer.leaf(NAME).certPem, key: issuer.leafKeyPem };
  }

  async start(): Promise<void> {
    const handler = (port: number) => (req: http.IncomingMessage, res: http.ServerResponse) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const body = Buffer.concat(chunks);
        this.seen.push({
          conn: (req.socket as net.Socket & { srConn: number }).srConn,
          port,
          method: req.method ?? "",
          url: req.url ?? "",
          authorization: req.headers.authorization,
          body,
        });
        res.end(body);
      });
    };
    const count = (s: net.Socket) => {
      (s as net.Socket & { srConn: number }).srConn = ++this.connections;
    };
    const plain = http.createServer(handler(80));
    plain.on("connection", count);
    const secure = https.createServer(this.cert, handler(443));
    secure.on("secureConnection", count);
    for (const [server, port] of [
      [plain, 80],
      [secure, 443],
    ] as const) {
      this.servers.push(server);
      await new Promise<void>((r) => server.listen(port, UP, r));
    }
  }

  async stop(): Promise<void> {
    for (const s of this.servers) {
      (s as http.Server).closeAllConnections();
      await new Promise((r) => s.close(r));
    }
  }
}

/** A broker as the proxy runs one, for one call whose secret is bound to NAME. */
class Front {
  readonly refused: Array<{ host: string | null; port: number; reason: RefusalReason }> = [];
  readonly ca = newCallCa();
  broker!: Broker;
  private readonly servers: net.Server[] = [];
  readonly ports = { 80: 0, 443: 0 };

  async start(upstreamCaPem: string, plainHttp: string[]): Promise<void> {
    const upstreamContext = tls.createSecureContext({ ca: upstreamCaPem });
    this.broker = new Broker(
      {
        secrets: [{ name: "TOKEN", placeholder: PH, value: VALUE, hosts: [NAME] }],
        caCertPem: this.ca.certPem,
        caKeyPem: this.ca.keyPem,
      },
      {
        address: () => Promise.resolve({ address: UP }),
        refuse: (host, port, reason) => this.refused.push({ host, port, reason }),
        upstream: () => upstreamContext,
        plainHttp: allowlistOf(plainHttp),
      },
    );
    for (const port of [80, 443] as const) {
      const server = net.createServer((sock) => {
        if (port === 443) this.broker.serveTls(sock, Buffer.alloc(0), NAME);
        else this.broker.serveHttp(sock, Buffer.alloc(0), NAME);
      });
      this.servers.push(server);
      await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
      this.ports[port] = (server.address() as net.AddressInfo).port;
    }
  }

  /**
   * Sends `bytes` as the code would on one connection (each part once the answers to the one
   * before it have had time to come back, as smuggling code waits for them); everything received
   * until it closes (or until `holdMs`, when the code closes it).
   */
  exchange(port: 80 | 443, bytes: Buffer | Buffer[], holdMs = 10_000): Promise<Buffer> {
    const parts = Array.isArray(bytes) ? bytes : [bytes];
    return new Promise((resolve) => {
      const got: Buffer[] = [];
      const sock =
        port === 443
          ? tls.connect({
              host: "127.0.0.1",
              port: this.ports[443],
              servername: NAME,
              ca: this.ca.certPem,
            })
          : net.connect({ host: "127.0.0.1", port: this.ports[80] });
      sock.on(port === 443 ? "secureConnect" : "connect", () => {
        parts.forEach((p, i) =>
          setTimeout(() => {
            if (!sock.destroyed) sock.write(p);
          }, i * 150),
        );
      });
      sock.on("data", (c: Buffer) => got.push(c));
      sock.on("error", () => undefined);
      sock.on("close", () => resolve(Buffer.concat(got)));
      setTimeout(() => sock.destroy(), holdMs).unref();
    });
  }

  async stop(): Promise<void> {
    this.broker.close();
    for (const s of this.servers) await new Promise((r) => s.close(r));
  }
}

/** A request the code smuggles in a body: its Content-Length reaches into the next head. */
function smuggle(reach: number): string {
  return `POST /echo HTTP/1.1\r\nHost: ${NAME}\r\nContent-Length: ${reach}\r\n\r\n`;
}
/** The code's next request: the placeholder in its head, so the broker writes the value there. */
const NEXT = `GET /second HTTP/1.1\r\nHost: ${NAME}\r\nAuthorization: Bearer ${PH}\r\nConnection: close\r\n\r\n`;
/**
 * A smuggled Content-Length that takes in the whole of NEXT's head as a kept-alive upstream
 * connection would carry it (issue 43's broker wrote exactly this), value and all.
 */
const REACH =
  `GET /second HTTP/1.1\r\nHost: ${NAME}\r\nAuthorization: Bearer ${VALUE}\r\nConnection: keep-alive\r\n\r\n`
    .length;

type Framing = "length" | "chunked" | "none" | "both";
const METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
const FRAMINGS: Framing[] = ["length", "chunked", "none", "both"];

/** `method /first` with `body` in `framing` (none: no body at all), keep-alive. */
function first(method: string, framing: Framing, body: string, last = false): string {
  const n = Buffer.byteLength(body);
  const chunked = `${n.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
  const head = `${method} /first HTTP/1.1\r\nHost: ${NAME}\r\n${last ? "Connection: close\r\n" : ""}`;
  if (framing === "length") return `${head}Content-Length: ${n}\r\n\r\n${body}`;
  if (framing === "chunked") return `${head}Transfer-Encoding: chunked\r\n\r\n${chunked}`;
  if (framing === "both")
    return `${head}Content-Length: ${n}\r\nTransfer-Encoding: chunked\r\n\r\n${chunked}`;
  return `${head}\r\n`;
}

/** The value reached the code, or a body upstream: as sent, reversed, or in hex. */
function holdsValue(b: Buffer): boolean {
  const s = b.toString("latin1");
  return (
    s.includes(VALUE) ||
    s.includes([...VALUE].reverse().join("")) ||
    s.includes(Buffer.from(VALUE).toString("hex"))
  );
}

for (const port of [80, 443] as const) {
  describe(`the broker frames every request it forwards [${port === 443 ? "https" : "http, opted in"}]`, () => {
    const up = new Upstream();
    const front = new Front();

    before(async () => {
      await up.start();
      // Port 80 only substitutes for a host the operator opted in (its own test, below).
      await front.start(up.caPem, [NAME]);
    });
    after(async () => {
      await front.stop();
      await up.stop();
    });

    /** What the upstream saw from here on. */
    function mark(): () => Seen[] {
      const from = up.seen.length;
      return () => up.seen.slice(from);
    }

    it("each method × (Content-Length, chunked, none, both): one upstream request per request sent, on its own connection, with exactly its body", async () => {
      const body = smuggle(REACH);
      // Every case runs; what went wrong in each is reported together.
      const wrong: string[] = [];
      const check = (ok: boolean, what: string) => {
        if (!ok) wrong.push(what);
      };
      for (const method of METHODS)
        for (const framing of FRAMINGS) {
          const what = `${method} ${framing}`;
          const seen = mark();
          const conns = up.connections;
          const got = await front.exchange(port, [
            Buffer.from(first(method, framing, body)),
            Buffer.from(NEXT),
          ]);
          // Let a late upstream request (there must be none) arrive before counting.
          await new Promise((r) => setTimeout(r, 50));
          const s = seen();
          check(!holdsValue(got), `${what}: the value came back to the code`);
          check(!s.some((r) => holdsValue(r.body)), `${what}: the value sat in a body`);
          check(!s.some((r) => r.url === "/echo"), `${what}: the smuggled request was read`);
          if (framing === "both") {
            // Framed two ways: refused, nothing of it sent.
            check(s.length === 0 && up.connections === conns, `${what}: not refused`);
            continue;
          }
          const expected = [
            [method, "/first", framing === "none" ? "" : body, undefined],
            ["GET", "/second", "", `Bearer ${VALUE}`],
          ];
          const actual = s.map((r) => [
            r.method,
            r.url,
            r.body.toString("latin1"),
            r.authorization,
          ]);
          check(
            JSON.stringify(actual) === JSON.stringify(expected),
            `${what}: the upstream saw ${JSON.stringify(actual)}`,
          );
          check(new Set(s.map((r) => r.conn)).size === s.length, `${what}: a connection reused`);
          check(up.connections - conns === 2, `${what}: ${up.connections - conns} connections`);
          check(/^HTTP\/1\.1 200 /.test(got.toString("latin1")), `${what}: not answered 200`);
        }
      assert.deepEqual(wrong, []);
    });

    it("a smuggle on one connection never reaches the next connection's request", async () => {
      const seen = mark();
      // The first connection carries the smuggle and stays open while a second one asks.
      const a = front.exchange(port, Buffer.from(first("GET", "chunked", smuggle(REACH))), 1500);
      await new Promise((r) => setTimeout(r, 300));
      const b = await front.exchange(port, Buffer.from(NEXT));
      assert.ok(!holdsValue(b), "the value came back on the second connection");
      assert.match(b.toString("latin1"), /^HTTP\/1\.1 200 /);
      assert.ok(!holdsValue(await a));
      const s = seen();
      assert.deepEqual(s.map((r) => [r.url, r.authorization]).sort(), [
        ["/first", undefined],
        ["/second", `Bearer ${VALUE}`],
      ]);
      assert.notEqual(s[0]?.conn, s[1]?.conn);
    });

    it("CONNECT is refused and named, and ends the connection", async () => {
      const seen = mark();
      const refusals = front.refused.length;
      const got = await front.exchange(
        port,
        Buffer.from(
          `CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\nAuthorization: Bearer ${PH}\r\n\r\n`,
        ),
      );
      assert.match(got.toString("latin1"), /^HTTP\/1\.1 403 /);
      assert.deepEqual(seen(), []);
      assert.deepEqual(front.refused.slice(refusals), [{ host: NAME, port, reason: "protocol" }]);
    });

    it("every request of a connection passes the first one's rules: TRACE, absolute-form, a second Host, another Host", async () => {
      const ok = `GET /ok HTTP/1.1\r\nHost: ${NAME}\r\n\r\n`;
      const auth = `Authorization: Bearer ${PH}\r\n`;
      const cases: Array<[string, RefusalReason]> = [
        [`TRACE /t HTTP/1.1\r\nHost: ${NAME}\r\n${auth}\r\n`, "protocol"],
        [`GET http://other.test/collect HTTP/1.1\r\nHost: ${NAME}\r\n${auth}\r\n`, "host_mismatch"],
        [`GET http://${NAME}/abs HTTP/1.1\r\nHost: ${NAME}\r\n${auth}\r\n`, "host_mismatch"],
        [`GET /two HTTP/1.1\r\nHost: ${NAME}\r\nHost: other.test\r\n${auth}\r\n`, "host_mismatch"],
        [`GET /two HTTP/1.1\r\nHost: other.test\r\nHost: ${NAME}\r\n${auth}\r\n`, "host_mismatch"],
        [`GET /other HTTP/1.1\r\nHost: other.test\r\n${auth}\r\n`, "host_mismatch"],
      ];
      for (const [second, reason] of cases) {
        const seen = mark();
        const refusals = front.refused.length;
        const got = await front.exchange(port, Buffer.from(ok + second));
        const text = got.toString("latin1");
        assert.ok(!holdsValue(got), second);
        // The first request went on; the second did not, and is named.
        assert.deepEqual(
          seen().map((r) => [r.url, r.authorization]),
          [["/ok", undefined]],
          second,
        );
        assert.match(text, /^HTTP\/1\.1 200 [\s\S]*HTTP\/1\.1 403 /, second);
        assert.deepEqual(
          front.refused.slice(refusals).map((r) => r.reason),
          [reason],
          second,
        );
      }
    });
  });
}

describe("a value over plain HTTP only where the operator said", () => {
  const up = new Upstream();
  const front = new Front();
  before(async () => {
    await up.start();
    await front.start(up.caPem, []);
  });
  after(async () => {
    await front.stop();
    await up.stop();
  });

  it("a bound placeholder over port 80 is refused (secret_plain_http) and nothing is sent; over TLS it is written", async () => {
    const from = up.seen.length;
    const plain = await front.exchange(80, Buffer.from(NEXT));
    assert.match(plain.toString("latin1"), /^HTTP\/1\.1 403 [\s\S]*secret_plain_http/);
    assert.deepEqual(up.seen.slice(from), []);
    assert.deepEqual(front.refused.at(-1), { host: NAME, port: 80, reason: "secret_plain_http" });
    // Plain HTTP without a placeholder still goes on.
    const bare = await front.exchange(
      80,
      Buffer.from(`GET /bare HTTP/1.1\r\nHost: ${NAME}\r\nConnection: close\r\n\r\n`),
    );
    assert.match(bare.toString("latin1"), /^HTTP\/1\.1 200 /);
    const tlsGot = await front.exchange(443, Buffer.from(NEXT));
    assert.match(tlsGot.toString("latin1"), /^HTTP\/1\.1 200 /);
    assert.deepEqual(
      up.seen.slice(from).map((r) => [r.port, r.url, r.authorization]),
      [
        [80, "/bare", undefined],
        [443, "/second", `Bearer ${VALUE}`],
      ],
    );
  });
});
