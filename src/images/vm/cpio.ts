/**
 * Writes an initramfs: a cpio archive in the "newc" format the kernel unpacks at boot.
 * Pure: entries in, bytes out (no host paths, owners or timestamps leak into the image).
 */

export type CpioEntry =
  | { kind: "dir"; path: string; mode: number }
  | { kind: "file"; path: string; mode: number; content: Uint8Array }
  | { kind: "symlink"; path: string; target: string }
  | { kind: "chardev"; path: string; mode: number; major: number; minor: number };

const S_IFDIR = 0o040000;
const S_IFREG = 0o100000;
const S_IFLNK = 0o120000;
const S_IFCHR = 0o020000;

function hex8(n: number): string {
  if (!Number.isInteger(n) || n < 0 || n > 0xffffffff)
    throw new Error(`cpio: field ${n} out of range`);
  return n.toString(16).padStart(8, "0");
}

function pad4(n: number): number {
  return (4 - (n % 4)) % 4;
}

function checkPath(path: string): string {
  const p = path.replace(/^\/+/, "");
  if (p === "" && path !== ".") throw new Error("cpio: empty path");
  if (p.split("/").includes("..") || p.includes("\0")) throw new Error(`cpio: bad path ${path}`);
  return p;
}

function record(ino: number, name: string, mode: number, body: Uint8Array, rdev = [0, 0]) {
  const nameBytes = Buffer.from(`${name}\0`, "utf8");
  const header =
    "070701" +
    [
      ino,
      mode,
      0, // uid: root
      0, // gid
      1, // nlink
      0, // mtime: fixed, so the image is reproducible
      body.length,
      0,
      0,
      rdev[0] ?? 0,
      rdev[1] ?? 0,
      nameBytes.length,
      0, // check
    ]
      .map(hex8)
      .join("");
  const head = Buffer.from(header, "ascii");
  return [
    head,
    nameBytes,
    Buffer.alloc(pad4(head.length + nameBytes.length)),
    Buffer.from(body),
    Buffer.alloc(pad4(body.length)),
  ];
}

/** Serialises `entries` in order (parents must come before children) plus the trailer. */
export function writeCpioNewc(entries: readonly CpioEntry[]): Buffer {
  const parts: Buffer[] = [];
  let ino = 1;
  for (const e of entries) {
    const name = checkPath(e.path);
    switch (e.kind) {
      case "dir":
        parts.push(...record(ino++, name, S_IFDIR | (e.mode & 0o7777), new Uint8Array()));
        break;
      case "file":
        parts.push(...record(ino++, name, S_IFREG | (e.mode & 0o7777), e.content));
        break;
      case "symlink":
        parts.push(...record(ino++, name, S_IFLNK | 0o777, Buffer.from(e.target, "utf8")));
        break;
      case "chardev":
        parts.push(
          ...record(ino++, name, S_IFCHR | (e.mode & 0o7777), new Uint8Array(), [e.major, e.minor]),
        );
        break;
    }
  }
  parts.push(...record(0, "TRAILER!!!", 0, new Uint8Array()));
  const out = Buffer.concat(parts);
  return Buffer.concat([
    out,
    Buffer.alloc(pad4(out.length) + ((512 - ((out.length + pad4(out.length)) % 512)) % 512)),
  ]);
}
