// A console member's key ceiling (src/policy/ceiling.ts), the sweep's test of whether a key still
// admits a live session (src/api/session-policy.ts admits), and the turns password checks take
// (src/store/password-checks.ts): pure, on the policies resolveCallerPolicy gives.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { admits } from "../../src/api/session-policy.js";
import { parseAllowlist } from "../../src/net/allowlist.js";
import { beyondCeiling, refusedFields } from "../../src/policy/ceiling.js";
import { hostCeiling } from "../../src/policy/host.js";
import { parseKeyPolicy, type KeyPolicy } from "../../src/policy/key-policy.js";
import { resolveCallerPolicy } from "../../src/policy/resolve.js";
import { DEFAULT_POLICY } from "../../src/schema/policy.js";
import { PasswordChecks } from "../../src/store/password-checks.js";

const QUOTA = { maxConcurrent: 4, ratePerMinute: 120, burst: 30 };
const ceiling = { ...hostCeiling(), timeoutMs: 900_000, memoryMb: 8192 };
const resolve = (key: Partial<KeyPolicy> | null, serverAllow: string[] | null = null) =>
  resolveCallerPolicy({
    server: DEFAULT_POLICY,
    ceiling,
    quota: QUOTA,
    key: key === null ? null : parseKeyPolicy(key),
    serverAllowlist: serverAllow ? parseAllowlist(serverAllow) : null,
  });
const fields = (key: Partial<KeyPolicy> | null, top: Partial<KeyPolicy> | null, allow?: string[]) =>
  beyondCeiling(resolve(key, allow ?? null), resolve(top, allow ?? null)).map((b) => b.field);

describe("a member's key ceiling (SEC-LIMIT-CEILING)", () => {
  test("unset, it is the server's settings: a key with none is within; any raise is beyond", () => {
    assert.deepEqual(fields(null, null), []);
    assert.deepEqual(fields({ max_timeout_ms: 30_000, max_memory_mb: 512 }, null), []);
    assert.deepEqual(
      fields(
        { max_timeout_ms: 30_001, max_memory_mb: 513, concurrency: 5, rate_per_minute: 121 },
        null,
      ),
      ["max_timeout_ms", "max_memory_mb", "concurrency", "rate_per_minute"],
    );
  });

  test("an admin's narrowing: every wider field is named, with what the ceiling allows", () => {
    const top = { runtimes: ["bash" as const], network: "none" as const, max_timeout_ms: 5000 };
    const b = beyondCeiling(resolve(null), resolve(top));
    assert.deepEqual(
      b.map((x) => x.field),
      ["runtimes", "network", "max_timeout_ms"],
    );
    assert.match(b[0]!.message, /"python3.12".*the ceiling allows "bash"/);
    assert.match(b[2]!.message, /30000 \(the ceiling is 5000\)/);
    assert.deepEqual(fields(top, top), []);
    assert.deepEqual(fields({ ...top, runtimes: ["bash"], max_timeout_ms: 1 + 999 }, top), []);
    assert.deepEqual(fields({ runtimes: ["bash", "node20"], network: "none" }, top), [
      "runtimes",
      "max_timeout_ms",
    ]);
  });

  test("an allowlist ceiling: the key's names must each be inside it; every public name is not", () => {
    const top = { egress_allow: ["pypi.org", "*.github.com"] };
    assert.deepEqual(fields(null, top), ["egress_allow"]);
    assert.deepEqual(fields({ egress_allow: ["pypi.org"] }, top), []);
    assert.deepEqual(fields({ egress_allow: ["api.github.com", "*.x.github.com"] }, top), []);
    for (const wider of [["github.com"], ["*.pypi.org"], ["evilpypi.org"], ["pypi.org.evil.test"]])
      assert.deepEqual(fields({ egress_allow: wider }, top), ["egress_allow"], wider.join());
    // No network at all is within any ceiling.
    assert.deepEqual(fields({ network: "none" }, top), []);
    // On a server with its own allowlist, both are resolved within it first.
    assert.deepEqual(
      fields({ egress_allow: ["pypi.org"] }, { egress_allow: ["pypi.org"] }, ["pypi.org"]),
      [],
    );
  });

  test("a change is held on the fields it names; network and egress_allow go together", () => {
    const b = beyondCeiling(resolve(null), resolve({ runtimes: ["bash"], network: "none" }));
    assert.deepEqual(
      refusedFields(b, "all").map((x) => x.field),
      ["runtimes", "network"],
    );
    assert.deepEqual(refusedFields(b, ["max_timeout_ms"]), []);
    assert.deepEqual(
      refusedFields(b, ["runtimes"]).map((x) => x.field),
      ["runtimes"],
    );
    assert.deepEqual(
      refusedFields(b, ["egress_allow"]).map((x) => x.field),
      ["network"],
    );
    assert.deepEqual(refusedFields(b, ["__proto__", "constructor"]), []);
  });
});

describe("whether a key still admits a live session (SEC-LIMIT-SESSION-POLICY)", () => {
  const s = { runtime: "python3.12", network: "public", memoryMb: 256 };
  test("its runtime, network and memory, each against the key as it is now", () => {
    assert.ok(admits(resolve(null), s));
    assert.ok(!admits(resolve({ runtimes: ["bash"] }), s));
    assert.ok(!admits(resolve({ network: "none" }), s));
    assert.ok(admits(resolve({ network: "none" }), { ...s, network: "none" }));
    assert.ok(!admits(resolve({ max_memory_mb: 255 }), s));
    assert.ok(admits(resolve({ max_memory_mb: 256 }), s));
    // Timeout and rate hold from the next cell, not by ending the session.
    assert.ok(admits(resolve({ max_timeout_ms: 1000, rate_per_minute: 1 }), s));
  });
});

describe("password checks take turns", () => {
  test("one at a time, the rest wait in order up to the bound, past it refused unchecked", async () => {
    const checks = new PasswordChecks(1, 3, 0);
    const order: number[] = [];
    const gates: (() => void)[] = [];
    const runs = Array.from({ length: 6 }, (_, i) =>
      checks.run(
        () =>
          new Promise<number>((done) =>
            gates.push(() => {
              order.push(i);
              done(i);
            }),
          ),
      ),
    );
    await new Promise((r) => setImmediate(r));
    assert.equal(gates.length, 1, "one check started");
    assert.equal(checks.counts.refused, 2, "two past the 3 waiting were refused at once");
    while (order.length < 4) {
      gates[order.length]!();
      await new Promise((r) => setImmediate(r));
    }
    assert.deepEqual(await Promise.all(runs), [0, 1, 2, 3, null, null]);
    assert.deepEqual(order, [0, 1, 2, 3]);
    assert.deepEqual(checks.counts, { done: 4, mostAtOnce: 1, refused: 2 });
    assert.equal(checks.runningNow, 0);
  });

  test("a check that throws gives its turn to the next", async () => {
    const checks = new PasswordChecks(1, 8, 0);
    const a = checks.run(() => Promise.reject(new Error("boom")));
    const b = checks.run(() => Promise.resolve("next"));
    await assert.rejects(a, /boom/);
    assert.equal(await b, "next");
    assert.equal(checks.runningNow, 0);
  });

  test("a waiting check starts only after the last one's rest (as long as it took); one alone at once", async () => {
    const checks = new PasswordChecks(1, 8);
    const busy = (ms: number) => () =>
      new Promise<number>((done) => setTimeout(() => done(performance.now()), ms));
    const t0 = performance.now();
    const [firstEnd, secondStart] = await Promise.all([
      checks.run(busy(40)),
      checks.run(() => Promise.resolve(performance.now())),
    ]);
    assert.ok(secondStart! - firstEnd! >= 35, `rested ${secondStart! - firstEnd!} ms`);
    // Nobody waiting: the next check starts at once, whatever the last one took.
    await new Promise((r) => setTimeout(r, 60));
    const alone = performance.now();
    const started = await checks.run(() => Promise.resolve(performance.now()));
    assert.ok(started! - alone < 20, `${started! - alone} ms`);
    assert.ok(firstEnd! - t0 >= 35);
    assert.equal(checks.runningNow, 0);
  });
});
