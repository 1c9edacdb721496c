/**
 * The egress proxy's incremental readers (HelloReader, HeadReader): fed a connection's bytes in
 * any chunks, after every chunk they give exactly what the whole-input parsers (peekClientHello,
 * peekHttpHead, themselves checked against a reference in proxy-parsers.unit.test.ts) give for
 * everything received so far, and once they have a verdict it stays. Split at every offset, one
 * byte at a time, and in random chunks; real hellos from Node's TLS client, hand-made ones
 * split into one-byte records, mutations and garbage.
 */
import assert from "node:assert/strict";
import net from "node:net";
import tls from "node:tls";
import { before, describe, it } from "node:test";
import fc from "fast-check";
import {
  HelloReader,
  MAX_PEEK_BYTES,
  peekClientHello,
  type HelloPeek,
} from "../../src/net/proxy/client-hello.js";
import {
  HeadReader,
  MAX_HEAD_BYTES,
  peekHttpHead,
  type HeadPeek,
} from "../../src/net/proxy/http-head.js";

type Peek = HelloPeek | HeadPeek;

/**
 * Feeds `data` to a new reader cut at `cuts` (ascending offsets) and checks each answer against
 * the whole-input parser on the prefix so far, the first verdict staying. Returns the last answer.
 */
function agree(
  make: () => { push(chunk: Uint8Array): Peek },
  whole: (data: Uint8Array) => Peek,
  data: Buffer,
  cuts: readonly number[],
): Peek {
  const reader = make();
  let pos = 0;
  let decided: Peek | null = null;
  let got: Peek = { kind: "more" };
  for (const cut of [...cuts, data.length]) {
    got = reader.push(data.subarray(pos, cut));
    pos = cut;
    const want: Peek = decided ?? whole(data.subarray(0, cut));
    assert.deepEqual(got, want, `after ${cut} of ${data.length} bytes`);
    if (want.kind !== "more") decided = want;
  }
  return got;
}

const newHello = () => new HelloReader();
const newHead = () => new HeadReader();

/** Every way to cut `data` once, plus one byte at a time. */
function everySplit(
  make: () => { push(chunk: Uint8Array): Peek },
  whole: (data: Uint8Array) => Peek,
  data: Buffer,
): void {
  agree(make, whole, data, []);
  for (let k = 0; k <= data.length; k++) agree(make, whole, data, [k]);
  agree(
    make,
    whole,
    data,
    Array.from({ length: data.length }, (_, i) => i),
  );
}

/** The records of a TLS stream re-cut into one-byte records. */
function oneByteRecords(records: Buffer): Buffer {
  const out: Buffer[] = [];
  for (let pos = 0; pos + 5 <= records.length; pos += 5 + records.readUInt16BE(pos + 3)) {
    const body = records.subarray(pos + 5, pos + 5 + records.readUInt16BE(pos + 3));
    for (const b of body) out.push(Buffer.from([22, 3, 1, 0, 1, b]));
  }
  return Buffer.concat(out);
}

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

describe("incremental TLS hello reader", () => {
  let hello: Buffer;
  before(async () => {
    hello = await captureHello({ servername: "allowed.test" });
  });

  it("split at every offset and one byte at a time: the whole input's verdict, every prefix waiting", () => {
    everySplit(newHello, peekClientHello, hello);
    assert.deepEqual(agree(newHello, peekClientHello, hello, [7, 100]), {
      kind: "hello",
      serverName: "allowed.test",
      ech: false,
    });
  });

  it("a hello in one-byte records, cut anywhere, reads the same name; followed by bytes, the same verdicts", () => {
    const trickled = oneByteRecords(hello);
    assert.ok(trickled.length < MAX_PEEK_BYTES);
    everySplit(newHello, peekClientHello, trickled);
    assert.equal(
      (agree(newHello, peekClientHello, trickled, []) as { serverName: string }).serverName,
      "allowed.test",
    );
    // A hello, then a change_cipher_spec record, then anything: decided on the hello.
    const ccs = Buffer.concat([hello, Buffer.from([20, 3, 3, 0, 1, 1]), Buffer.from("junk")]);
    everySplit(newHello, peekClientHello, ccs);
  });

  it("work: a hello in one-byte records, pushed a record at a time, is looked at about once per byte; re-read from the start on every record, the count shows it", () => {
    const trickled = oneByteRecords(hello);
    const once = { examined: 0 };
    const reader = new HelloReader(once);
    for (let pos = 0; pos < trickled.length; pos += 6) reader.push(trickled.subarray(pos, pos + 6));
    // Every byte walked once, and the hello's body parsed once when whole.
    assert.ok(once.examined >= trickled.length, `${once.examined} of ${trickled.length}`);
    assert.ok(once.examined <= 2 * trickled.length, `${once.examined} of ${trickled.length}`);
    // What SEC-PROXY-TRICKLE must catch: everything so far handed to a parser on every record.
    const again = { examined: 0 };
    for (let pos = 6; pos <= trickled.length; pos += 6)
      new HelloReader(again).push(trickled.subarray(0, pos));
    assert.ok(again.examined > 50 * trickled.length, `${again.examined} of ${trickled.length}`);
  });

  it("refusals at every split: not TLS, a bad record, oversized, bytes past the hello, a record that ends the flight early", () => {
    const cases = [
      Buffer.from("GET / HTTP/1.1\r\n"),
      Buffer.from([22, 2, 1, 0, 5]),
      Buffer.from([22, 3, 1, 0x40, 0x01]),
      Buffer.from([22, 3, 1, 0, 0]),
      Buffer.from([22, 3, 1, 0, 4, 1, 0x01, 0, 0]),
      Buffer.from([22, 3, 1, 0, 4, 2, 0, 0, 0]),
      Buffer.concat([hello, Buffer.from([22, 3, 1, 0, 2, 1, 2])]),
      Buffer.concat([hello.subarray(0, 60), Buffer.from([23, 3, 3, 0, 1, 0])]),
    ];
    for (const c of cases) everySplit(newHello, peekClientHello, c);
    // Past MAX_PEEK_BYTES of one-byte records: oversized, whatever the chunks.
    const long = Buffer.concat([
      Buffer.from([22, 3, 1, 0, 4, 1, 0, 0x75, 0x30]),
      Buffer.alloc(MAX_PEEK_BYTES, 0).fill(Buffer.from([22, 3, 1, 0, 1, 7])),
    ]);
    assert.deepEqual(agree(newHello, peekClientHello, long, [1000, 30_000, 60_000]), {
      kind: "refuse",
      reason: "oversized",
    });
  });

  it("property: any chunks of mutated hellos, one-byte records and garbage agree with the whole-input parser", () => {
    const mutated = fc
      .tuple(
        fc.constantFrom(0, 1),
        fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 4 }),
        fc.nat(),
      )
      .map(([which, flips, cut]) => {
        const b = Buffer.from(which === 0 ? hello : oneByteRecords(hello));
        for (const [at, v] of flips) b[at % b.length] = v;
        return b.subarray(0, 1 + (cut % b.length));
      });
    const garbage = fc.uint8Array({ maxLength: 300 }).map((a) => Buffer.from(a));
    fc.assert(
      fc.property(
        fc.oneof(mutated, garbage),
        fc.array(fc.nat(), { maxLength: 12 }),
        (data, points) => {
          const cuts = [...new Set(points.map((p) => p % (data.length + 1)))].sort((x, y) => x - y);
          agree(newHello, peekClientHello, data, cuts);
        },
      ),
      { numRuns: 3000 },
    );
  });
});

describe("incremental HTTP head reader", () => {
  const heads = [
    "GET /p HTTP/1.1\r\nHost: allowed.test\r\nAccept: */*\r\n\r\nbody",
    "POST http://allowed.test/x HTTP/1.1\r\nHost: allowed.test:80\r\n\r\n",
    "GET http://evil.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
    "CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n",
    "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: allowed.test\r\nHost: evil.test\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: allowed.test\0.evil.test\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
    "\u0016\u0003\u0001\u0000",
    "GET / HTTP/1.1\r\nX: " + "a".repeat(200) + "\r\n",
  ];

  it("split at every offset and one byte at a time: the whole input's verdict, every prefix waiting", () => {
    for (const h of heads) everySplit(newHead, peekHttpHead, Buffer.from(h, "latin1"));
  });

  it("work: a head pushed one byte at a time is looked at a bounded number of times per byte", () => {
    const head = Buffer.from(`GET / HTTP/1.1\r\nHost: a.test\r\nX: ${"b".repeat(8000)}\r\n\r\n`);
    const work = { examined: 0 };
    const reader = new HeadReader(work);
    for (let pos = 0; pos < head.length; pos++) reader.push(head.subarray(pos, pos + 1));
    // Each push searches its byte and the 3 before it; the first 16 are read for an early
    // refusal; the whole head is parsed once.
    assert.ok(work.examined >= head.length, `${work.examined} of ${head.length}`);
    assert.ok(work.examined <= 5 * head.length + 16 * 16, `${work.examined} of ${head.length}`);
  });

  it("oversized heads, in any chunks: the same verdict as the whole input", () => {
    const big = Buffer.from(
      `GET / HTTP/1.1\r\nHost: a.test\r\nX: ${"b".repeat(MAX_HEAD_BYTES)}\r\n\r\n`,
    );
    agree(newHead, peekHttpHead, big, [10, 5000, MAX_HEAD_BYTES - 2, MAX_HEAD_BYTES + 3]);
    agree(newHead, peekHttpHead, big, []);
    // The blank line falls just inside and just outside the bound.
    for (const pad of [MAX_HEAD_BYTES - 40, MAX_HEAD_BYTES - 30, MAX_HEAD_BYTES - 20]) {
      const h = Buffer.from(`GET / HTTP/1.1\r\nHost: a.test\r\nX: ${"c".repeat(pad)}\r\n\r\nrest`);
      for (const cut of [0, 100, h.length - 6, h.length - 4, h.length - 3])
        agree(newHead, peekHttpHead, h, [cut]);
    }
  });

  it("property: any chunks of any head-like bytes agree with the whole-input parser", () => {
    const headLike = fc
      .array(
        fc.constantFrom(
          "GET ",
          "/ ",
          "HTTP/1.1",
          "\r\n",
          "Host: ",
          "allowed.test",
          ":80",
          "\r",
          "\n",
          " ",
          "x",
          "\0",
        ),
        { maxLength: 30 },
      )
      .map((parts) => Buffer.from(parts.join(""), "latin1"));
    const garbage = fc.uint8Array({ maxLength: 200 }).map((a) => Buffer.from(a));
    fc.assert(
      fc.property(
        fc.oneof(headLike, garbage),
        fc.array(fc.nat(), { maxLength: 10 }),
        (data, points) => {
          const cuts = [...new Set(points.map((p) => p % (data.length + 1)))].sort((x, y) => x - y);
          agree(newHead, peekHttpHead, data, cuts);
        },
      ),
      { numRuns: 3000 },
    );
  });
});
