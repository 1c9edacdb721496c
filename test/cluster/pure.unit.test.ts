import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import { decideQuota } from "../../src/policy/quota.js";
import { better, choose, type Candidate } from "../../src/cluster/choose.js";
import { parseWorkersSpec } from "../../src/cluster/discovery.js";
import { tokenMatches, workerEventSchema, workerStatusSchema } from "../../src/cluster/protocol.js";
import { parseWorkerToken, settingsFrom } from "../../src/schema/settings/values.js";

const candidate = fc.record({
  id: fc.string({ minLength: 1, maxLength: 6 }),
  warm: fc.nat(3),
  room: fc.integer({ min: -2, max: 4 }),
  load: fc.double({ min: 0, max: 4, noNaN: true }),
});
const unique = fc.uniqueArray(candidate, { selector: (c) => c.id, maxLength: 8 });
const randoms = fc.array(fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }), {
  minLength: 2,
  maxLength: 2,
});

describe("choosing a worker (power of two choices, warm first)", () => {
  test("never a worker already tried; one with room whenever there is one, else the least loaded", () => {
    fc.assert(
      fc.property(unique, randoms, fc.array(fc.string({ maxLength: 6 })), (cs, rs, tried) => {
        const exclude = new Set(tried);
        let i = 0;
        const pick = choose(cs, () => rs[i++ % rs.length]!, exclude);
        const untried = cs.filter((c) => !exclude.has(c.id));
        const open = untried.filter((c) => c.room > 0);
        if (untried.length === 0) return pick === null;
        if (open.length > 0) return pick !== null && open.includes(pick);
        return pick !== null && untried.every((c) => c.load >= pick.load);
      }),
    );
  });

  test("of the two drawn, a warm one beats a cold one, then the lighter load wins", () => {
    const c = (id: string, warm: number, load: number): Candidate => ({ id, warm, room: 1, load });
    assert.equal(better(c("a", 0, 0), c("b", 1, 3)).id, "b");
    assert.equal(better(c("a", 2, 3), c("b", 0, 0)).id, "a");
    assert.equal(better(c("a", 1, 2), c("b", 1, 1)).id, "b");
    assert.equal(better(c("a", 0, 1), c("b", 0, 1)).id, "a");
  });

  test("over many calls: the warm worker gets most, equal workers share evenly (no herd on one)", () => {
    let seed = 1;
    const rnd = () => ((seed = (seed * 16807) % 2147483647) - 1) / 2147483646;
    const tally = (cs: Candidate[], n: number) => {
      const counts = new Map<string, number>();
      for (let k = 0; k < n; k++) {
        const p = choose(cs, rnd)!;
        counts.set(p.id, (counts.get(p.id) ?? 0) + 1);
      }
      return counts;
    };
    const mixed = tally(
      [
        { id: "warm", warm: 1, room: 4, load: 0.5 },
        { id: "cold1", warm: 0, room: 4, load: 0 },
        { id: "cold2", warm: 0, room: 4, load: 0.25 },
        { id: "full", warm: 1, room: 0, load: 2 },
      ],
      3000,
    );
    assert.equal(
      mixed.get("full"),
      undefined,
      "a worker without room is not chosen while others have room",
    );
    // Drawn pairs: {warm, cold1} and {warm, cold2} go to warm, {cold1, cold2} to the lighter.
    assert.ok(Math.abs(mixed.get("warm")! / 3000 - 2 / 3) < 0.05, JSON.stringify([...mixed]));
    assert.ok(Math.abs(mixed.get("cold1")! / 3000 - 1 / 3) < 0.05);
    assert.equal(mixed.get("cold2"), undefined, "the worse of every pair it is in");
    const equal = tally(
      ["a", "b", "c", "d"].map((id) => ({ id, warm: 1, room: 2, load: 0 })),
      4000,
    );
    for (const id of ["a", "b", "c", "d"])
      assert.ok(Math.abs(equal.get(id)! / 4000 - 0.25) < 0.05, JSON.stringify([...equal]));
  });
});

describe("worker discovery and the shared secret", () => {
  test("--workers takes NAME:PORT lists and names the bad part", () => {
    assert.deepEqual(parseWorkersSpec("scratchrun-workers.ns.svc.cluster.local:8788"), [
      { host: "scratchrun-workers.ns.svc.cluster.local", port: 8788 },
    ]);
    assert.deepEqual(parseWorkersSpec("10.0.0.1:1, [fd00::1]:8788"), [
      { host: "10.0.0.1", port: 1 },
      { host: "fd00::1", port: 8788 },
    ]);
    for (const bad of ["", "host", "host:0", "host:70000", "http://host:1", "a b:1", "host:1:2"])
      assert.throws(() => parseWorkersSpec(bad), /--workers/, bad);
  });

  test("the token must be long enough and match exactly", () => {
    const secret = "s".repeat(16) + "x";
    assert.equal(tokenMatches(secret, secret), true);
    for (const wrong of [null, "", secret.slice(0, -1), secret + "x", secret.toUpperCase()])
      assert.equal(tokenMatches(wrong, secret), false, String(wrong));
    assert.throws(() => settingsFrom({}).workerToken, /SCRATCHRUN_WORKER_TOKEN/);
    assert.throws(() => settingsFrom({ SCRATCHRUN_WORKER_TOKEN: "short" }).workerToken);
    assert.equal(settingsFrom({ SCRATCHRUN_WORKER_TOKEN: ` ${secret}\n` }).workerToken, secret);
    assert.equal(
      parseWorkerToken("/x", "ignored-when-a-file-is-named", () => `${secret}\n`),
      secret,
    );
  });

  test("the wire schemas reject what a worker must never send", () => {
    const ok = { t: "progress", stage: "running" };
    assert.equal(workerEventSchema.safeParse(ok).success, true);
    for (const bad of [
      { ...ok, extra: 1 },
      { t: "progress", stage: "exploded" },
      { t: "error", code: "NOPE", message: "x" },
      { t: "output", stream: "stdin", data_base64: "" },
    ])
      assert.equal(workerEventSchema.safeParse(bad).success, false, JSON.stringify(bad));
    assert.equal(workerStatusSchema.safeParse({ version: "1" }).success, false);
  });
});

describe("per-key quota rule", () => {
  test("a bucket's time never runs backwards (replicas stamp calls before taking the key's lock)", () => {
    const limits = { maxConcurrent: 10, ratePerMinute: 60_000, burst: 5 };
    const first = decideQuota(limits, 0, undefined, 1000);
    assert.ok(first.ok);
    // A call stamped 50 ms earlier wins the lock later: it must not drain the bucket.
    const late = decideQuota(limits, 0, first.bucket!, 950);
    assert.ok(late.ok, JSON.stringify(late));
    assert.equal(late.bucket!.at, 1000);
    assert.equal(late.bucket!.tokens, 3);
  });
});
