// The template key (VM-TEMPLATE-KEPT): a small file enters it by content, so a rebuild that writes
// the same bytes (a new mtime and inode) keeps the kept templates, and one changed byte does not;
// a large file by its stat, so touching it is a new key.
import assert from "node:assert/strict";
import { mkdtempSync, renameSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { templateKey } from "../../src/backends/microvm/template-store.js";

const dir = mkdtempSync(join(tmpdir(), "sr-template-key-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const small = join(dir, "backend.js");
const large = join(dir, "disk.img");
const key = () =>
  templateKey({
    slot: "bash/256/plain",
    memoryMb: 256,
    files: [small, large],
    accel: "tcg",
    tscKhz: null,
    build: { warm: "/bin/bash" },
    version: "0.0.0",
  });

/** Writes `data` to `path` as a build does: a new file renamed over the old (a new inode). */
function rewrite(path: string, data: string | Buffer): void {
  writeFileSync(`${path}.tmp`, data);
  renameSync(`${path}.tmp`, path);
}

test("a small file is known by its content, a large one by its stat", () => {
  rewrite(small, "export const a = 1;\n");
  rewrite(large, Buffer.alloc(5 * 1024 * 1024, 7));
  const k0 = key();
  assert.match(k0, /^[0-9a-f]{64}$/);
  rewrite(small, "export const a = 1;\n");
  utimesSync(small, new Date(0), new Date(0));
  assert.equal(key(), k0, "the same bytes, rewritten, keep the key");
  rewrite(small, "export const a = 2;\n");
  const k1 = key();
  assert.notEqual(k1, k0, "one changed byte changes it");
  utimesSync(large, new Date(1000), new Date(1000));
  assert.notEqual(key(), k1, "a large file's new mtime changes it");
});
