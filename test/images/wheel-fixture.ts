import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

/** CRC-32 (IEEE), as the zip format wants it. */
function crc32(data: Buffer): number {
  let crc = 0xffffffff;
  for (const byte of data) {
    crc ^= byte;
    for (let k = 0; k < 8; k++) crc = crc & 1 ? (crc >>> 1) ^ 0xedb88320 : crc >>> 1;
  }
  return (crc ^ 0xffffffff) >>> 0;
}

/** A zip archive of `entries`, stored (no compression): all a wheel needs to be valid. */
function zipStored(entries: [string, Buffer][]): Buffer {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const [name, data] of entries) {
    const nameBuf = Buffer.from(name, "utf8");
    const crc = crc32(data);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4); // version needed
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(data.length, 18);
    local.writeUInt32LE(data.length, 22);
    local.writeUInt16LE(nameBuf.length, 26);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE(20, 4); // version made by
    central.writeUInt16LE(20, 6);
    central.writeUInt32LE(crc, 16);
    central.writeUInt32LE(data.length, 20);
    central.writeUInt32LE(data.length, 24);
    central.writeUInt16LE(nameBuf.length, 28);
    central.writeUInt32LE(offset, 42);
    locals.push(local, nameBuf, data);
    centrals.push(central, nameBuf);
    offset += local.length + nameBuf.length + data.length;
  }
  const centralBuf = Buffer.concat(centrals);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(centralBuf.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, centralBuf, end]);
}

export interface WheelSpec {
  name: string;
  version: string;
  /** Module files: path inside site-packages -> content. */
  files: Record<string, string>;
  requires?: string[];
  /** The wheel's tag (default py3-none-any, pure Python). */
  tag?: string;
}

/** Writes a valid pure-Python wheel (METADATA, WHEEL, RECORD with sha256) and returns its file name. */
export function writeWheel(dir: string, spec: WheelSpec): string {
  const distInfo = `${spec.name}-${spec.version}.dist-info`;
  const metadata = [
    "Metadata-Version: 2.1",
    `Name: ${spec.name}`,
    `Version: ${spec.version}`,
    ...(spec.requires ?? []).map((r) => `Requires-Dist: ${r}`),
    "",
  ].join("\n");
  const tag = spec.tag ?? "py3-none-any";
  const wheel = `Wheel-Version: 1.0\nGenerator: scratchrun-test\nRoot-Is-Purelib: true\nTag: ${tag}\n`;
  const entries: [string, Buffer][] = [
    ...Object.entries(spec.files).map(([p, c]): [string, Buffer] => [p, Buffer.from(c, "utf8")]),
    [`${distInfo}/METADATA`, Buffer.from(metadata, "utf8")],
    [`${distInfo}/WHEEL`, Buffer.from(wheel, "utf8")],
  ];
  const record = entries.map(([p, data]) => {
    const digest = createHash("sha256").update(data).digest("base64url");
    return `${p},sha256=${digest},${data.length}`;
  });
  record.push(`${distInfo}/RECORD,,`);
  entries.push([`${distInfo}/RECORD`, Buffer.from(`${record.join("\n")}\n`, "utf8")]);
  const file = `${spec.name}-${spec.version}-${tag}.whl`;
  writeFileSync(join(dir, file), zipStored(entries));
  return file;
}
