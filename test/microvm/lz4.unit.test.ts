import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { decodeLz4Legacy, extractVmlinux, isElf } from "../../src/images/vm/kernel.js";

const MAGIC = Buffer.from([0x02, 0x21, 0x4c, 0x18]);

function lengthBytes(n: number): number[] {
  const out: number[] = [];
  for (; n >= 255; n -= 255) out.push(255);
  out.push(n);
  return out;
}

/**
 * An independent LZ4 block encoder (greedy, hash of 4 bytes, the format's own rules: the last 5
 * bytes are literals, a match ends 12 bytes before the end at the latest).
 */
function encodeBlock(src: Buffer): Buffer {
  const out: number[] = [];
  const table = new Map<number, number>();
  let anchor = 0;
  let i = 0;
  const emit = (literalEnd: number, offset: number, matchLen: number) => {
    const lit = literalEnd - anchor;
    const ml = matchLen - 4;
    out.push(((lit >= 15 ? 15 : lit) << 4) | (matchLen === 0 ? 0 : ml >= 15 ? 15 : ml));
    if (lit >= 15) out.push(...lengthBytes(lit - 15));
    for (let k = anchor; k < literalEnd; k++) out.push(src[k]!);
    if (matchLen === 0) return;
    out.push(offset & 0xff, offset >> 8);
    if (ml >= 15) out.push(...lengthBytes(ml - 15));
  };
  while (i + 12 < src.length) {
    const key = src.readUInt32LE(i);
    const cand = table.get(key);
    table.set(key, i);
    if (cand !== undefined && i - cand <= 0xffff) {
      let len = 4;
      while (i + len < src.length - 5 && src[cand + len] === src[i + len]) len++;
      emit(i, i - cand, len);
      i += len;
      anchor = i;
    } else i++;
  }
  emit(src.length, 0, 0);
  return Buffer.from(out);
}

function legacyStream(blocks: Buffer[]): Buffer {
  const parts: Buffer[] = [MAGIC];
  for (const b of blocks) {
    const block = encodeBlock(b);
    const size = Buffer.alloc(4);
    size.writeUInt32LE(block.length);
    parts.push(size, block);
  }
  return Buffer.concat(parts);
}

const compressible = fc
  .array(fc.oneof(fc.uint8Array({ maxLength: 40 }), fc.constantFrom(Buffer.from("abcabcabcabc"))), {
    maxLength: 60,
  })
  .map((parts) => Buffer.concat(parts.flatMap((p) => [Buffer.from(p), Buffer.from(p)])));

describe("decodeLz4Legacy: the kernel payload decoder (pure)", () => {
  it("decodes what an independent encoder wrote, block after block", () => {
    fc.assert(
      fc.property(fc.array(compressible, { minLength: 1, maxLength: 3 }), (blocks) => {
        const nonEmpty = blocks.filter((b) => b.length > 0);
        if (nonEmpty.length === 0) return;
        assert.ok(decodeLz4Legacy(legacyStream(nonEmpty)).equals(Buffer.concat(nonEmpty)));
      }),
    );
  });

  it("long literals and long, overlapping matches (run-length) decode", () => {
    const data = Buffer.concat([
      Buffer.from("x".repeat(300)),
      Buffer.alloc(70_000, 7),
      Buffer.from("tail-bytes!!!"),
    ]);
    assert.ok(decodeLz4Legacy(legacyStream([data])).equals(data));
  });

  it("ignores the size the kernel appends after the stream", () => {
    const data = Buffer.from("hello hello hello hello hello hello");
    const withTrailer = Buffer.concat([legacyStream([data, data]), Buffer.from([0x10, 0, 0, 0])]);
    assert.ok(decodeLz4Legacy(withTrailer).equals(Buffer.concat([data, data])));
  });

  it("refuses a non-LZ4 start, a zero or too-far match offset, and overruns", () => {
    assert.throws(() => decodeLz4Legacy(Buffer.from("not lz4 at all")), /not a legacy/);
    const block = (bytes: number[]) => {
      const size = Buffer.alloc(4);
      size.writeUInt32LE(bytes.length);
      return Buffer.concat([MAGIC, size, Buffer.from(bytes)]);
    };
    // one literal "a", then a match with offset 0
    assert.throws(() => decodeLz4Legacy(block([0x10, 0x61, 0x00, 0x00, 0x00])), /offset/);
    // one literal, then a match reaching 5 bytes back
    assert.throws(() => decodeLz4Legacy(block([0x10, 0x61, 0x05, 0x00, 0x00])), /offset/);
    // 15+ literals announced, length byte missing
    assert.throws(() => decodeLz4Legacy(block([0xf0])), /lz4/);
  });

  it("extractVmlinux finds an ELF behind an LZ4 payload inside a larger image", () => {
    const elf = Buffer.concat([Buffer.from([0x7f, 0x45, 0x4c, 0x46]), Buffer.alloc(200, 1)]);
    assert.ok(isElf(elf));
    const bzImage = Buffer.concat([Buffer.alloc(1000, 0xaa), legacyStream([elf]), Buffer.alloc(8)]);
    assert.ok(extractVmlinux(bzImage).equals(elf));
    assert.throws(() => extractVmlinux(Buffer.alloc(4096, 0x55)), /no ELF kernel/);
  });
});
