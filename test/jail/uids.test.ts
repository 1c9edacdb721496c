import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { UidPool } from "../../src/jail/uids.js";

describe("UidPool: host-wide uid reservations", () => {
  const dir = mkdtempSync(join(tmpdir(), "scratchrun-uids-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  test("two pools (two servers) on one host never hand out the same uid", () => {
    const a = new UidPool(7_000_000, 16, dir);
    const b = new UidPool(7_000_000, 16, dir);
    const got = new Set<number>();
    for (let i = 0; i < 8; i++) {
      for (const uid of [a.acquire(), b.acquire()]) {
        assert.ok(!got.has(uid), `uid ${uid} handed out twice`);
        got.add(uid);
      }
    }
    assert.throws(() => a.acquire(), /no free sandbox uid/);
    const some = [...got][0]!;
    (a.owns(some) ? a : b).release(some);
    a.release(some);
    b.release(some);
    assert.equal(existsSync(join(dir, String(some))), false);
    const again = new UidPool(7_000_000, 16, dir).acquire();
    assert.equal(again, some, "a released uid can be taken again");
  });

  test("a reservation whose server died is taken over", () => {
    const dead = spawnSync("/bin/true").pid!;
    writeFileSync(join(dir, String(7_100_000)), String(dead));
    const pool = new UidPool(7_100_000, 1, dir);
    assert.equal(pool.acquire(), 7_100_000);
  });

  test("a reservation held by a live process is respected", () => {
    writeFileSync(join(dir, String(7_200_000)), String(process.pid));
    const pool = new UidPool(7_200_000, 1, dir);
    assert.throws(() => pool.acquire(), /no free sandbox uid/);
  });
});
