import { deflateSync } from "node:zlib";

/**
 * The site's icon, drawn here: a 32x32 rounded square in the console's blue with a white prompt
 * (">_"), encoded as a PNG inside an ICO file, so `/favicon.ico` answers what every browser asks
 * for first. Made once, on first use; pure.
 */
const SIZE = 32;
const BLUE = [0x1b, 0x4f, 0xd6] as const;

/** Whether pixel (x, y) is inside the rounded square (corner radius 6). */
function inSquare(x: number, y: number): boolean {
  const r = 6;
  const cx = x < r ? r : x > SIZE - 1 - r ? SIZE - 1 - r : x;
  const cy = y < r ? r : y > SIZE - 1 - r ? SIZE - 1 - r : y;
  return (x - cx) ** 2 + (y - cy) ** 2 <= r * r;
}

/** Whether pixel (x, y) is part of the white ">_". */
function inPrompt(x: number, y: number): boolean {
  // ">": two strokes 3 px thick meeting at (16, 15); "_": a bar under the right half.
  const upper = y >= 8 && y <= 15 && Math.abs(x - 8 - (y - 8)) <= 1.5;
  const lower = y >= 15 && y <= 22 && Math.abs(x - 8 - (22 - y)) <= 1.5;
  const bar = y >= 21 && y <= 23 && x >= 17 && x <= 25;
  return upper || lower || bar;
}

function crc32(buf: Buffer): number {
  let c = ~0;
  for (const b of buf) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
  }
  return ~c >>> 0;
}

function chunk(type: string, data: Buffer): Buffer {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, "ascii"), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([len, body, crc]);
}

function png(): Buffer {
  const rows: Buffer[] = [];
  for (let y = 0; y < SIZE; y++) {
    const row = Buffer.alloc(1 + SIZE * 4); // filter byte 0, then RGBA
    for (let x = 0; x < SIZE; x++) {
      const o = 1 + x * 4;
      if (!inSquare(x, y)) continue; // transparent
      const white = inPrompt(x, y);
      row[o] = white ? 255 : BLUE[0];
      row[o + 1] = white ? 255 : BLUE[1];
      row[o + 2] = white ? 255 : BLUE[2];
      row[o + 3] = 255;
    }
    rows.push(row);
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(SIZE, 0);
  ihdr.writeUInt32BE(SIZE, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 6; // RGBA
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk("IHDR", ihdr),
    chunk("IDAT", deflateSync(Buffer.concat(rows))),
    chunk("IEND", Buffer.alloc(0)),
  ]);
}

/** An ICO of one 32x32 image stored as PNG (allowed since Windows Vista; every browser reads it). */
function ico(): Buffer {
  const image = png();
  const head = Buffer.alloc(6 + 16);
  head.writeUInt16LE(0, 0); // reserved
  head.writeUInt16LE(1, 2); // icon
  head.writeUInt16LE(1, 4); // one image
  head[6] = SIZE;
  head[7] = SIZE;
  head[8] = 0; // no palette
  head[9] = 0;
  head.writeUInt16LE(1, 10); // colour planes
  head.writeUInt16LE(32, 12); // bits per pixel
  head.writeUInt32LE(image.length, 14);
  head.writeUInt32LE(head.length, 18);
  return Buffer.concat([head, image]);
}

let cached: Buffer | undefined;

/** The icon's bytes (image/x-icon). */
export const favicon = (): Buffer => (cached ??= ico());
