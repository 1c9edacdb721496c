/**
 * Turns a distribution's compressed kernel (bzImage) into the ELF `vmlinux` QEMU's microvm machine
 * boots directly (PVH entry point). Same idea as the kernel's extract-vmlinux: find the payload's
 * compression magic, decompress, keep the first result that is an ELF image.
 */
import { gunzipSync } from "node:zlib";
import { spawnSync } from "node:child_process";

const LZ4_LEGACY_MAGIC = Buffer.from([0x02, 0x21, 0x4c, 0x18]);
const GZIP_MAGIC = Buffer.from([0x1f, 0x8b, 0x08]);
const XZ_MAGIC = Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]);
const ZSTD_MAGIC = Buffer.from([0x28, 0xb5, 0x2f, 0xfd]);
const ELF_MAGIC = Buffer.from([0x7f, 0x45, 0x4c, 0x46]);

/** The legacy LZ4 frame caps every block at 8 MiB of output. */
const LZ4_LEGACY_BLOCK = 8 * 1024 * 1024;

export function isElf(image: Uint8Array): boolean {
  return image.length > 64 && Buffer.from(image.subarray(0, 4)).equals(ELF_MAGIC);
}

/** Decodes one LZ4 block into `out` at `outPos`; returns the new output position. */
function decodeLz4Block(src: Buffer, start: number, end: number, out: Buffer, outPos: number) {
  let i = start;
  let o = outPos;
  const readLength = (base: number): number => {
    let len = base;
    if (base === 15) {
      let b = 255;
      while (b === 255) {
        if (i >= end) throw new Error("lz4: truncated length");
        b = src[i++]!;
        len += b;
      }
    }
    return len;
  };
  while (i < end) {
    const token = src[i++]!;
    const literals = readLength(token >> 4);
    if (i + literals > end || o + literals > out.length) throw new Error("lz4: literal overrun");
    src.copy(out, o, i, i + literals);
    i += literals;
    o += literals;
    if (i >= end) break; // the last sequence has literals only
    const offset = src[i]! | (src[i + 1]! << 8);
    i += 2;
    if (offset === 0 || offset > o) throw new Error("lz4: bad match offset");
    const matchLen = readLength(token & 15) + 4;
    if (o + matchLen > out.length) throw new Error("lz4: match overrun");
    for (let k = 0; k < matchLen; k++, o++) out[o] = out[o - offset]!;
  }
  return o;
}

/**
 * Decodes a legacy-format LZ4 stream (what the kernel's `CONFIG_KERNEL_LZ4` uses). Stops at the
 * first chunk header that cannot be a block (the kernel appends the output size after the stream).
 */
export function decodeLz4Legacy(src: Buffer): Buffer {
  if (!src.subarray(0, 4).equals(LZ4_LEGACY_MAGIC)) throw new Error("lz4: not a legacy stream");
  const chunks: Buffer[] = [];
  let i = 4;
  while (i + 4 <= src.length) {
    const size = src.readUInt32LE(i);
    if (size === 0 || i + 4 + size > src.length || size > LZ4_LEGACY_BLOCK + 65536) break;
    if (size === LZ4_LEGACY_MAGIC.readUInt32LE(0)) {
      i += 4; // concatenated stream: a new magic starts another frame
      continue;
    }
    const out = Buffer.allocUnsafe(LZ4_LEGACY_BLOCK);
    let produced: number;
    try {
      produced = decodeLz4Block(src, i + 4, i + 4 + size, out, 0);
    } catch (err) {
      if (chunks.length > 0) break; // trailing bytes after the last block
      throw err;
    }
    chunks.push(out.subarray(0, produced));
    i += 4 + size;
  }
  return Buffer.concat(chunks);
}

function viaTool(tool: string, args: string[], input: Buffer): Buffer | null {
  const r = spawnSync(tool, args, { input, maxBuffer: 512 * 1024 * 1024 });
  // These tools complain about the kernel's trailing bytes; what matters is the ELF check.
  return r.stdout && r.stdout.length > 0 ? r.stdout : null;
}

type Decoder = { magic: Buffer; decode: (payload: Buffer) => Buffer | null };

const DECODERS: Decoder[] = [
  { magic: LZ4_LEGACY_MAGIC, decode: decodeLz4Legacy },
  { magic: GZIP_MAGIC, decode: (p) => gunzipSync(p, { finishFlush: 2 }) },
  { magic: XZ_MAGIC, decode: (p) => viaTool("xz", ["-dc", "--single-stream"], p) },
  { magic: ZSTD_MAGIC, decode: (p) => viaTool("zstd", ["-dc"], p) },
];

/** Returns the ELF vmlinux inside `bzImage`, or throws saying which formats were tried. */
export function extractVmlinux(bzImage: Buffer): Buffer {
  if (isElf(bzImage)) return bzImage;
  for (const { magic, decode } of DECODERS) {
    let at = bzImage.indexOf(magic);
    while (at >= 0) {
      try {
        const out = decode(bzImage.subarray(at));
        if (out && isElf(out)) return out;
      } catch {
        // not a real payload at this offset; keep looking
      }
      at = bzImage.indexOf(magic, at + 1);
    }
  }
  throw new Error(
    "no ELF kernel found inside the image (tried lz4-legacy, gzip, xz, zstd payloads); " +
      "pass an uncompressed vmlinux instead",
  );
}
