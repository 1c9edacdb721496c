import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { writeCpioNewc, type CpioEntry } from "../../src/images/vm/cpio.js";

interface Parsed {
  name: string;
  ino: number;
  mode: number;
  uid: number;
  gid: number;
  mtime: number;
  body: Buffer;
  rdevMajor: number;
  rdevMinor: number;
}

/** An independent newc reader (the format as the kernel's initramfs unpacker reads it). */
function readNewc(buf: Buffer): Parsed[] {
  const out: Parsed[] = [];
  let at = 0;
  const align = (n: number) => (n + 3) & ~3;
  for (;;) {
    assert.equal(buf.toString("ascii", at, at + 6), "070701", `magic at ${at}`);
    const field = (i: number) =>
      parseInt(buf.toString("ascii", at + 6 + i * 8, at + 14 + i * 8), 16);
    const [ino, mode, uid, gid, , mtime, size, , , rmaj, rmin, namesize] = Array.from(
      { length: 13 },
      (_, i) => field(i),
    ) as number[];
    const nameStart = at + 110;
    const name = buf.toString("utf8", nameStart, nameStart + namesize! - 1);
    assert.equal(buf[nameStart + namesize! - 1], 0, "name is NUL-terminated");
    const bodyStart = align(nameStart + namesize!);
    const body = buf.subarray(bodyStart, bodyStart + size!);
    at = align(bodyStart + size!);
    if (name === "TRAILER!!!") break;
    out.push({
      name,
      ino: ino!,
      mode: mode!,
      uid: uid!,
      gid: gid!,
      mtime: mtime!,
      body,
      rdevMajor: rmaj!,
      rdevMinor: rmin!,
    });
  }
  assert.ok(
    buf.subarray(at).every((b) => b === 0),
    "only zero padding after the trailer",
  );
  return out;
}

const component = fc
  .stringMatching(/^[a-zA-Z0-9_.-]{1,12}$/)
  .filter((s) => s !== "." && s !== "..");
const entry: fc.Arbitrary<CpioEntry> = fc.oneof(
  fc.record({
    kind: fc.constant("file" as const),
    path: fc.array(component, { minLength: 1, maxLength: 3 }).map((p) => p.join("/")),
    mode: fc.integer({ min: 0, max: 0o7777 }),
    content: fc.uint8Array({ maxLength: 300 }),
  }),
  fc.record({
    kind: fc.constant("dir" as const),
    path: component,
    mode: fc.integer({ min: 0, max: 0o7777 }),
  }),
  fc.record({
    kind: fc.constant("symlink" as const),
    path: component,
    target: fc.stringMatching(/^[a-z/]{1,30}$/),
  }),
  fc.record({
    kind: fc.constant("chardev" as const),
    path: component,
    mode: fc.integer({ min: 0, max: 0o7777 }),
    major: fc.integer({ min: 0, max: 255 }),
    minor: fc.integer({ min: 0, max: 255 }),
  }),
);

describe("writeCpioNewc: the initramfs archive (pure)", () => {
  it("round-trips every entry kind through an independent reader, owned by root at time 0", () => {
    fc.assert(
      fc.property(fc.array(entry, { maxLength: 12 }), (entries) => {
        const archive = writeCpioNewc(entries);
        assert.equal(archive.length % 512, 0, "padded to 512-byte blocks");
        const parsed = readNewc(archive);
        assert.equal(parsed.length, entries.length);
        const inodes = new Set(parsed.map((p) => p.ino));
        assert.equal(inodes.size, parsed.length, "every entry has its own inode");
        entries.forEach((e, i) => {
          const p = parsed[i]!;
          assert.equal(p.name, e.path.replace(/^\/+/, ""));
          assert.equal(p.uid, 0);
          assert.equal(p.gid, 0);
          assert.equal(p.mtime, 0);
          const type = p.mode & 0o170000;
          switch (e.kind) {
            case "file":
              assert.equal(type, 0o100000);
              assert.equal(p.mode & 0o7777, e.mode);
              assert.deepEqual(new Uint8Array(p.body), e.content);
              break;
            case "dir":
              assert.equal(type, 0o040000);
              assert.equal(p.mode & 0o7777, e.mode);
              assert.equal(p.body.length, 0);
              break;
            case "symlink":
              assert.equal(type, 0o120000);
              assert.equal(p.body.toString("utf8"), e.target);
              break;
            case "chardev":
              assert.equal(type, 0o020000);
              assert.deepEqual([p.rdevMajor, p.rdevMinor], [e.major, e.minor]);
              break;
          }
        });
      }),
    );
  });

  it("is reproducible: the same entries give the same bytes", () => {
    const entries: CpioEntry[] = [
      { kind: "dir", path: "bin", mode: 0o755 },
      { kind: "file", path: "bin/agent", mode: 0o500, content: Buffer.from("\x7fELF") },
    ];
    assert.ok(writeCpioNewc(entries).equals(writeCpioNewc(entries)));
  });

  it("refuses paths that would unpack outside the archive's root, and empty ones", () => {
    for (const path of ["../etc/passwd", "a/../../b", "a\0b", "", "///"])
      assert.throws(() => writeCpioNewc([{ kind: "dir", path, mode: 0o755 }]), /cpio/, path);
  });

  it("mode bits beyond the permission bits cannot change an entry's type", () => {
    const [p] = readNewc(
      writeCpioNewc([{ kind: "file", path: "f", mode: 0o140777, content: new Uint8Array() }]),
    );
    assert.equal(p!.mode, 0o100777);
  });
});
