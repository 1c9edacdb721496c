import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { ensureRootDisk, pruneVmCache } from "../../src/images/vm/build.js";
import { takeLease } from "../../src/images/lease.js";

/**
 * The microVM's root disk is the runtime rootfs as erofs. Python trusts a .pyc only while the
 * mtime recorded in it is its source's, so the disk must keep every file's mtime (a disk built
 * with one fixed time made every import compile from source).
 */
describe("microvm root disk", () => {
  test("keeps each file's mtime, and replaces earlier formats of the same rootfs", () => {
    const work = mkdtempSync(join(tmpdir(), "scratchrun-disk-"));
    const mnt = join(work, "mnt");
    try {
      const rootfs = join(work, "rootfs-0123456789abcdef");
      mkdirSync(join(rootfs, "lib"), { recursive: true });
      writeFileSync(join(rootfs, "lib", "mod.py"), "x = 1\n");
      writeFileSync(join(rootfs, "lib", "other.py"), "y = 2\n");
      utimesSync(join(rootfs, "lib", "mod.py"), 1_675_617_227, 1_675_617_227);
      utimesSync(join(rootfs, "lib", "other.py"), 1_600_000_000, 1_600_000_000);
      const cache = join(work, "cache");
      mkdirSync(join(cache, "disks"), { recursive: true });
      const stale = join(cache, "disks", "rootfs-0123456789abcdef.erofs");
      const staleV2 = join(cache, "disks", "rootfs-0123456789abcdef-v2.erofs");
      const otherRootfs = join(cache, "disks", "rootfs-fedcba9876543210-v2.erofs");
      writeFileSync(stale, "old format");
      writeFileSync(staleV2, "old format, no tree stamp");
      writeFileSync(otherRootfs, "another image's disk");

      const disk = ensureRootDisk(rootfs, cache);
      assert.ok(existsSync(disk));
      assert.ok(!existsSync(stale), "the earlier format of this rootfs is removed");
      assert.ok(!existsSync(staleV2), "the unstamped disk of this rootfs is removed");
      assert.ok(existsSync(otherRootfs), "another rootfs's disk is not touched");

      mkdirSync(mnt);
      execFileSync("mount", ["-t", "erofs", "-o", "ro,loop", disk, mnt]);
      try {
        assert.equal(statSync(join(mnt, "lib", "mod.py")).mtimeMs, 1_675_617_227_000);
        assert.equal(statSync(join(mnt, "lib", "other.py")).mtimeMs, 1_600_000_000_000);
      } finally {
        execFileSync("umount", [mnt]);
      }
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });
});

describe("microvm root disk follows its image", () => {
  test("an image rebuilt under the same name gets a new disk with the new content", () => {
    const work = mkdtempSync(join(tmpdir(), "scratchrun-disk-follow-"));
    const mnt = join(work, "mnt");
    mkdirSync(mnt);
    const read = (disk: string) => {
      execFileSync("mount", ["-t", "erofs", "-o", "ro,loop", disk, mnt]);
      try {
        return readFileSync(join(mnt, "marker"), "utf8");
      } finally {
        execFileSync("umount", [mnt]);
      }
    };
    try {
      const cache = join(work, "cache");
      const rootfs = join(work, "rootfs-00000000000000f0");
      mkdirSync(rootfs);
      writeFileSync(join(rootfs, "marker"), "first build");
      const old = Date.now() / 1000 - 60;
      utimesSync(rootfs, old, old);
      const first = ensureRootDisk(rootfs, cache);
      assert.equal(read(first), "first build");
      assert.equal(
        ensureRootDisk(rootfs, cache, false),
        first,
        "cached while the image is unchanged",
      );
      // A rebuild renames a new tree into place under the same name (recipe hash).
      rmSync(rootfs, { recursive: true });
      mkdirSync(rootfs);
      writeFileSync(join(rootfs, "marker"), "second build");
      // Its mtime is the clock's now, maybe within one tick of the first disk's: not a reason to
      // take the first disk for current (CI once saw exactly that).
      assert.throws(
        () => ensureRootDisk(rootfs, cache, false),
        /not built/,
        "the old disk is stale",
      );
      // A live server still serves the first disk: the rebuild leaves it for the prune.
      const lease = takeLease(cache, [first]);
      let second: string;
      try {
        second = ensureRootDisk(rootfs, cache);
        assert.equal(read(second), "second build");
        assert.ok(existsSync(first), "a leased earlier disk is kept");
      } finally {
        lease.release();
      }
      // The kept first build renamed back (older than the second): its own disk again, not the
      // second's.
      rmSync(rootfs, { recursive: true });
      mkdirSync(rootfs);
      writeFileSync(join(rootfs, "marker"), "first build");
      utimesSync(rootfs, old, old);
      assert.equal(ensureRootDisk(rootfs, cache, false), first, "the kept first disk serves it");
      assert.equal(read(first), "first build");
      assert.notEqual(second, first);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });
});

describe("microvm cache pruning", () => {
  test("removes old artifacts and disks, sparing what is kept, in use or recently touched", () => {
    const cache = mkdtempSync(join(tmpdir(), "scratchrun-vmcache-"));
    try {
      const old = Date.now() / 1000 - 2 * 3600;
      const make = (rel: string, dir: boolean, recent = false) => {
        const path = join(cache, rel);
        if (dir) {
          mkdirSync(path, { recursive: true });
          writeFileSync(join(path, "vmlinux"), "k");
        } else {
          mkdirSync(join(cache, "disks"), { recursive: true });
          writeFileSync(path, "d");
        }
        if (!recent) utimesSync(path, old, old);
        return path;
      };
      const current = make("00000000000000aa", true);
      const stale = make("00000000000000bb", true);
      const running = make("00000000000000cc", true);
      const touched = make("00000000000000dd", true, true);
      const foreign = make("not-an-artifact", true);
      const disk = make("disks/rootfs-1111111111111111-v2.erofs", false);
      const oldDisk = make("disks/rootfs-2222222222222222-v2.erofs", false);
      const liveDisk = make("disks/rootfs-3333333333333333-v2.erofs", false);
      // What a live VM's jail shows on its command line: bwrap binding the files by path.
      const jail = `bwrap\0--ro-bind\0${running}/vmlinux\0/vm/kernel\0--ro-bind\0${liveDisk}\0/vm/disk`;

      const removed = pruneVmCache([join(current, "vmlinux"), disk], cache, 3_600_000, [jail]);

      assert.deepEqual(removed.sort(), [oldDisk, stale].sort());
      for (const kept of [current, running, touched, foreign, disk, liveDisk])
        assert.ok(existsSync(kept), `${kept} is kept`);
      assert.deepEqual(
        pruneVmCache([join(current, "vmlinux"), disk], cache, 3_600_000, [jail]),
        [],
      );
    } finally {
      rmSync(cache, { recursive: true, force: true });
    }
  });
});
