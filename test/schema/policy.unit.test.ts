import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import fc from "fast-check";
import { z } from "zod";
import { drainBoundMs } from "../../src/api/server.js";
import { DEFAULT_KEY_LIMITS } from "../../src/api/server.js";
import { limitsToWire, policyFromWire } from "../../src/api/wire.js";
import { execToolDefinition } from "../../src/mcp/exec-tool.js";
import { checkDomainPattern, checkDomainPatterns } from "../../src/policy/domains.js";
import { hostCeiling, RECORDABLE_CEILING, type Ceiling } from "../../src/policy/host.js";
import {
  applyPatch,
  describeKeyPolicy,
  parseKeyPolicy,
  patchFromFlags,
  policyFromColumn,
  policyToColumn,
  type KeyPolicy,
} from "../../src/policy/key-policy.js";
import { ceilingPolicyOf, resolveCallerPolicy } from "../../src/policy/resolve.js";
import { parseAllowlist } from "../../src/net/allowlist.js";
import {
  serverLimitsWithin,
  serverPolicy,
  withServerLimits,
} from "../../src/policy/server-policy.js";
import {
  execInputSchema,
  execInputSchemaFor,
  execInputShapeFor,
  NETWORK_MODES,
  RUNTIMES,
} from "../../src/schema/exec.js";
import { LIMITS, RAISE_CEILINGS } from "../../src/schema/limits.js";
import { DEFAULT_POLICY, policyViolations, type CallPolicy } from "../../src/schema/policy.js";
import { parseExecRequest } from "../../src/schema/validate.js";
import { settingsFrom } from "../../src/schema/settings/values.js";

/**
 * The schema built from a policy (POL-SCHEMA), a key's policy and how it resolves against the
 * server's and the host's (POL-KEY, POL-RAISE), and the key policy's stored form and flags
 * (POL-KEYS-CLI): pure, no sandbox.
 */
const REPO = join(import.meta.dirname, "..", "..", "..");
const GIB = 1024 * 1024 * 1024;
const HOST: Ceiling = hostCeiling(24 * GIB);

const narrow = (
  o: Partial<Omit<CallPolicy, "sources">> & { sources?: Partial<CallPolicy["sources"]> },
) =>
  ({
    ...DEFAULT_POLICY,
    ...o,
    sources: { ...DEFAULT_POLICY.sources, ...o.sources },
  }) as CallPolicy;

const BASH_5S = narrow({
  runtimes: ["bash"],
  timeoutMs: { default: 5000, max: 5000 },
  sources: { runtimes: "key", timeoutMs: "key" },
});

type JsonSchema = {
  properties: Record<string, { enum?: string[]; maximum?: number; default?: unknown }>;
};
const jsonOf = (p: CallPolicy) =>
  z.toJSONSchema(execInputSchemaFor(p), { io: "input" }) as unknown as JsonSchema;

const message = (input: unknown, p: CallPolicy): string => {
  try {
    parseExecRequest(input, p);
  } catch (e) {
    return (e as Error).message;
  }
  return "accepted";
};

describe("the scratchrun_exec schema built from a policy (POL-SCHEMA)", () => {
  it("the product's policy gives the product's schema: the checked-in ExecRequest, byte for byte", () => {
    const openapi = JSON.parse(readFileSync(join(REPO, "openapi/openapi.json"), "utf8")) as {
      components: { schemas: { ExecRequest: unknown } };
    };
    // A fresh build from a copy of the policy, not the cached product schema.
    const fresh = z.strictObject(execInputShapeFor(structuredClone(DEFAULT_POLICY)));
    const { $schema: _s, ...built } = z.toJSONSchema(fresh, { io: "input" });
    assert.deepEqual(JSON.parse(JSON.stringify(built)), openapi.components.schemas.ExecRequest);
    assert.deepEqual(z.toJSONSchema(execInputSchema, { io: "input" }), jsonOf(DEFAULT_POLICY));
  });

  it("a key limited to bash with a 5 s maximum: its schema's enum, maximum and default are the key's", () => {
    const props = jsonOf(BASH_5S).properties;
    assert.deepEqual(props.runtime?.enum, ["bash"]);
    assert.equal(props.timeout_ms?.maximum, 5000);
    assert.equal(props.timeout_ms?.default, 5000, "a default above the maximum is cut to it");
    assert.equal(props.memory_mb?.maximum, LIMITS.memoryMb.max);
    assert.equal(props.memory_mb?.default, LIMITS.memoryMb.default);
    const tool = execToolDefinition("namespace", "none", BASH_5S);
    assert.match(tool.description, /Runtimes allowed to you: bash\./);
    assert.match(tool.description, /timeout_ms default 5000, max 5000/);
    assert.doesNotMatch(tool.description, /python/);
  });

  it("refusals name the limit and whose it is", () => {
    const ok = { runtime: "bash", code: "true" };
    assert.match(
      message({ ...ok, runtime: "python3.11" }, BASH_5S),
      /^Invalid request: runtime: "python3.11" is not allowed for this API key \(allowed: bash\)$/,
    );
    assert.match(
      message({ ...ok, runtime: "ruby" }, BASH_5S),
      /runtime: "ruby" is not one of bash/,
    );
    assert.match(
      message({ ...ok, timeout_ms: 5001 }, BASH_5S),
      /timeout_ms: at most 5000 ms for this API key/,
    );
    assert.equal(message({ ...ok, timeout_ms: 5000 }, BASH_5S), "accepted");
    assert.match(
      message({ ...ok, timeout_ms: 30001 }, DEFAULT_POLICY),
      /timeout_ms: at most 30000 ms on this server/,
    );
    const host = narrow({ memoryMb: { default: 256, max: 1000 }, sources: { memoryMb: "host" } });
    assert.match(
      message({ ...ok, memory_mb: 1001 }, host),
      /memory_mb: at most 1000 MB on this host/,
    );
    const offline = narrow({ networks: ["none"], sources: { networks: "key" } });
    assert.equal(jsonOf(offline).properties.network?.default, "none");
    assert.deepEqual(jsonOf(offline).properties.network?.enum, ["none"]);
    assert.match(
      message({ ...ok, network: "public" }, offline),
      /network: "public" is not allowed for this API key \(allowed: "none"\)/,
    );
    assert.equal(parseExecRequest(ok, offline).network, "none");
  });

  it("a raised policy accepts up to its maximum and no further", () => {
    const raised = serverPolicy({ maxTimeoutMs: RAISE_CEILINGS.timeoutMs, maxMemoryMb: 4096 });
    const props = jsonOf(raised).properties;
    assert.equal(props.timeout_ms?.maximum, 900_000);
    assert.equal(props.timeout_ms?.default, LIMITS.timeoutMs.default, "the default stays");
    assert.equal(props.memory_mb?.maximum, 4096);
    const r = parseExecRequest(
      { runtime: "bash", code: "true", timeout_ms: 900_000, memory_mb: 4096 },
      raised,
    );
    assert.deepEqual([r.timeout_ms, r.memory_mb], [900_000, 4096]);
    assert.match(message({ runtime: "bash", code: "x", timeout_ms: 900_001 }, raised), /900000/);
  });

  it("property: the schema of any policy accepts exactly what the policy check (the authority) allows", () => {
    const policy = fc
      .record({
        runtimes: fc.subarray([...RUNTIMES], { minLength: 1 }),
        offline: fc.boolean(),
        timeout: fc.integer({ min: LIMITS.timeoutMs.min, max: RAISE_CEILINGS.timeoutMs }),
        memory: fc.integer({ min: LIMITS.memoryMb.min, max: 64 * 1024 }),
        src: fc.constantFrom("server", "key", "host" as const),
      })
      .map((o): CallPolicy =>
        narrow({
          runtimes: o.runtimes,
          networks: o.offline ? ["none"] : NETWORK_MODES,
          timeoutMs: { default: Math.min(10_000, o.timeout), max: o.timeout },
          memoryMb: { default: Math.min(256, o.memory), max: o.memory },
          sources: { runtimes: o.src, timeoutMs: o.src, memoryMb: o.src, networks: o.src },
        }),
      );
    const request = fc.record(
      {
        runtime: fc.constantFrom(...RUNTIMES),
        network: fc.constantFrom(...NETWORK_MODES),
        timeout_ms: fc.integer({ min: LIMITS.timeoutMs.min, max: RAISE_CEILINGS.timeoutMs + 5 }),
        memory_mb: fc.integer({ min: LIMITS.memoryMb.min, max: 70 * 1024 }),
      },
      { requiredKeys: ["runtime"] },
    );
    const everything = ceilingPolicyOf({
      timeoutMs: 10 ** 7,
      memoryMb: 10 ** 6,
      memorySource: "host",
    });
    fc.assert(
      fc.property(policy, request, (p, q) => {
        const input = { ...q, code: "true" };
        const mine = execInputSchemaFor(p).safeParse(input);
        // What the request asks, with whatever defaults are the policy's when it names none.
        const asked = parseExecRequest(input, everything);
        const filled = {
          ...asked,
          timeout_ms: q.timeout_ms ?? p.timeoutMs.default,
          memory_mb: q.memory_mb ?? p.memoryMb.default,
          network: q.network ?? p.networks[0]!,
        };
        const violations = policyViolations(filled, p);
        assert.equal(mine.success, violations.length === 0, violations.join("; "));
        if (mine.success) assert.deepEqual(policyViolations(mine.data, p), []);
      }),
      { numRuns: 400 },
    );
  });
});

describe("a key's policy over the server's, capped by the ceiling (POL-KEY, POL-RAISE)", () => {
  const server = DEFAULT_POLICY;
  const resolve = (key: KeyPolicy | null, ceiling: Ceiling = HOST) =>
    resolveCallerPolicy({ server, ceiling, quota: DEFAULT_KEY_LIMITS, key });

  it("no policy: the server's", () => {
    const r = resolve(null);
    assert.deepEqual(r.call, DEFAULT_POLICY);
    assert.deepEqual(r.quota, DEFAULT_KEY_LIMITS);
    assert.equal(r.egressAllow, null);
    assert.equal(r.networkNote, null);
  });

  it("a key may narrow and raise; the host caps memory and says so", () => {
    const r = resolve(
      parseKeyPolicy({
        runtimes: ["bash", "python3.12"],
        max_timeout_ms: 900_000,
        max_memory_mb: 100_000,
        concurrency: 2,
        rate_per_minute: 10,
      }),
    );
    assert.deepEqual(r.call.runtimes, ["python3.12", "bash"], "in the product's order");
    assert.deepEqual(r.call.timeoutMs, { default: 10_000, max: 900_000 });
    assert.deepEqual(r.call.memoryMb, { default: 256, max: 12_288 });
    assert.deepEqual(r.call.sources, {
      runtimes: "key",
      networks: "server",
      timeoutMs: "key",
      memoryMb: "host",
    });
    assert.deepEqual(r.quota, { maxConcurrent: 2, ratePerMinute: 10, burst: 10 });
  });

  it("a key's egress allowlist travels with public network and is named in the note", () => {
    const key = parseKeyPolicy({ egress_allow: ["PyPI.org.", "*.github.com"] });
    assert.deepEqual(key.egress_allow, ["pypi.org", "*.github.com"]);
    const open = resolve(key);
    assert.deepEqual(open.call.networks, NETWORK_MODES);
    assert.deepEqual(open.egressAllow, ["pypi.org", "*.github.com"]);
    assert.match(open.networkNote ?? "", /to these domains only: pypi\.org, \*\.github\.com/);
    const none = resolve({ ...key, network: "none" });
    assert.deepEqual(none.call.networks, ["none"]);
    assert.equal(none.egressAllow, null);
  });

  it("POL-KEY-ALLOWLIST: on a server with its own allowlist, a key's shows (note, /v1/info's limits) what applies: the intersection", () => {
    const serverAllowlist = parseAllowlist("pypi.org, *.github.com, files.example.com");
    const withServer = (key: KeyPolicy) =>
      resolveCallerPolicy({
        server,
        ceiling: HOST,
        quota: DEFAULT_KEY_LIMITS,
        key,
        serverAllowlist,
      });
    const r = withServer(
      parseKeyPolicy({
        egress_allow: ["pypi.org", "evil.example", "*.example.com", "api.github.com"],
      }),
    );
    assert.deepEqual([...(r.egressAllow ?? [])].sort(), [
      "api.github.com",
      "files.example.com",
      "pypi.org",
    ]);
    assert.match(r.networkNote ?? "", /to these domains only: /);
    assert.doesNotMatch(
      r.networkNote ?? "",
      /evil\.example|\*\.example\.com/,
      "not what the key wrote",
    );
    assert.deepEqual(limitsToWire(r).egress_allow?.sort(), [
      "api.github.com",
      "files.example.com",
      "pypi.org",
    ]);
    // Nothing in common: said so, and nothing is reachable.
    const none = withServer(parseKeyPolicy({ egress_allow: ["evil.example"] }));
    assert.deepEqual(none.egressAllow, []);
    assert.match(none.networkNote ?? "", /to no domain/);
    // Without a server list the key's own applies, as written.
    assert.deepEqual(resolve(parseKeyPolicy({ egress_allow: ["evil.example"] })).egressAllow, [
      "evil.example",
    ]);
  });

  it("property: every maximum is at most the ceiling and at least what both allow; defaults within", () => {
    const key = fc.record(
      {
        runtimes: fc.subarray([...RUNTIMES], { minLength: 1 }),
        network: fc.constantFrom(...NETWORK_MODES),
        max_timeout_ms: fc.integer({ min: 100, max: RAISE_CEILINGS.timeoutMs }),
        max_memory_mb: fc.integer({ min: 32, max: RAISE_CEILINGS.memoryMb }),
        concurrency: fc.integer({ min: 1, max: 1000 }),
        rate_per_minute: fc.integer({ min: 1, max: 1_000_000 }),
      },
      { requiredKeys: [] },
    );
    const ceiling = fc.record({
      timeoutMs: fc.integer({ min: 100, max: RAISE_CEILINGS.timeoutMs }),
      memoryMb: fc.integer({ min: 32, max: 256 * 1024 }),
      memorySource: fc.constantFrom("host", "server" as const),
    });
    fc.assert(
      fc.property(key, ceiling, (k, c) => {
        const r = resolve(parseKeyPolicy(k), c);
        const p = r.call;
        assert.ok(p.timeoutMs.max <= c.timeoutMs && p.memoryMb.max <= c.memoryMb);
        assert.equal(p.timeoutMs.max, Math.min(k.max_timeout_ms ?? 30_000, c.timeoutMs));
        assert.equal(p.memoryMb.max, Math.min(k.max_memory_mb ?? 512, c.memoryMb));
        assert.ok(p.timeoutMs.default <= p.timeoutMs.max && p.memoryMb.default <= p.memoryMb.max);
        for (const rt of p.runtimes) assert.ok(!k.runtimes || k.runtimes.includes(rt));
        assert.ok(p.runtimes.length >= 1 && p.networks.includes("none"));
        assert.equal(p.networks.includes("public"), k.network !== "none");
        assert.ok(r.quota.burst <= r.quota.ratePerMinute || k.rate_per_minute === undefined);
        // What /v1/info reports is what remote mode rebuilds.
        assert.deepEqual(policyFromWire(limitsToWire(r)), p);
      }),
      { numRuns: 300 },
    );
  });

  it("a worker takes whatever its host can give, and nothing more", () => {
    const w = ceilingPolicyOf(HOST);
    assert.deepEqual(w.runtimes, RUNTIMES);
    assert.equal(w.timeoutMs.max, 900_000);
    assert.equal(w.memoryMb.max, 12_288);
    assert.equal(w.timeoutMs.default, LIMITS.timeoutMs.default);
    assert.equal(RECORDABLE_CEILING.memoryMb, RAISE_CEILINGS.memoryMb);
  });
});

describe("server-wide maxima (POL-RAISE)", () => {
  const read = (env: Record<string, string>) =>
    serverLimitsWithin(settingsFrom(env).serverMaxima, HOST);

  it("raised within the ceiling; defaults stay the product's", () => {
    assert.deepEqual(read({}), {});
    const env = withServerLimits({}, { maxTimeoutMs: "600000", maxMemoryMb: "2048" });
    const p = serverPolicy(read(env as Record<string, string>));
    assert.deepEqual(p.timeoutMs, { default: 10_000, max: 600_000 });
    assert.deepEqual(p.memoryMb, { default: 256, max: 2048 });
    assert.deepEqual(serverPolicy({ maxTimeoutMs: 5000 }).timeoutMs, { default: 5000, max: 5000 });
  });

  it("out of range or not a number refuses the start, naming the variable and the bound", () => {
    const cases: [Record<string, string>, RegExp][] = [
      [{ SCRATCHRUN_MAX_TIMEOUT_MS: "900001" }, /SCRATCHRUN_MAX_TIMEOUT_MS.*from 100 to 900000 ms/],
      [{ SCRATCHRUN_MAX_TIMEOUT_MS: "99" }, /from 100 to 900000/],
      [{ SCRATCHRUN_MAX_TIMEOUT_MS: "1e6" }, /not a whole number/],
      [
        { SCRATCHRUN_MAX_MEMORY_MB: "12289" },
        /--max-memory-mb.*from 32 to 12288 MB.*50% of this host's RAM/,
      ],
      [{ SCRATCHRUN_MAX_MEMORY_MB: "-5" }, /not a whole number/],
    ];
    for (const [env, re] of cases)
      assert.throws(
        () => read(env),
        (e: Error & { code?: string }) => {
          assert.equal(e.code, "NOT_READY");
          assert.match(e.message, re);
          return true;
        },
      );
    assert.deepEqual(read({ SCRATCHRUN_MAX_MEMORY_MB: "12288" }), { maxMemoryMb: 12_288 });
  });

  it("this host's ceiling is half of its RAM", () => {
    assert.equal(hostCeiling(24 * GIB).memoryMb, 12 * 1024);
    assert.equal(hostCeiling(1 * GIB + 3).memoryMb, 512);
  });

  it("a drain waits as long as the latest call in flight may run", () => {
    const now = 1_000_000;
    assert.equal(drainBoundMs(0, now), 90_000);
    assert.equal(drainBoundMs(now + 30_000, now), 90_000);
    assert.equal(drainBoundMs(now + 900_000 + 60_000, now), 975_000);
  });
});

describe("a key's stored policy and its command-line flags (POL-KEYS-CLI)", () => {
  it("flags become a checked policy; `default` clears a field", () => {
    const patch = patchFromFlags({
      runtimes: "bash, python3.11,bash",
      "max-timeout-ms": "5000",
      rate: "30",
      network: "public",
      "egress-allow": "pypi.org,*.Files.PythonHosted.org",
    });
    const p = applyPatch(null, patch)!;
    assert.deepEqual(p, {
      runtimes: ["python3.11", "bash"],
      network: "public",
      egress_allow: ["pypi.org", "*.files.pythonhosted.org"],
      max_timeout_ms: 5000,
      rate_per_minute: 30,
    });
    assert.equal(
      describeKeyPolicy(p),
      "runtimes=python3.11,bash network=public egress-allow=pypi.org,*.files.pythonhosted.org max-timeout-ms=5000 rate=30/min",
    );
    const cleared = applyPatch(
      p,
      patchFromFlags({ runtimes: "default", "max-timeout-ms": "900000" }),
    );
    assert.equal(cleared?.runtimes, undefined);
    assert.equal(cleared?.max_timeout_ms, 900_000);
    const all = Object.fromEntries(
      ["runtimes", "network", "egress-allow", "max-timeout-ms", "rate"].map((f) => [f, "default"]),
    );
    assert.equal(applyPatch(p, patchFromFlags(all)), null, "nothing left: the server's settings");
    assert.equal(policyToColumn(null), null);
    assert.deepEqual(policyFromColumn(policyToColumn(p)), p);
    assert.equal(policyFromColumn("{}"), null);
  });

  it("bad values are refused naming the field and its range", () => {
    const refuse = (flags: Record<string, string>, re: RegExp) =>
      assert.throws(() => applyPatch(null, patchFromFlags(flags)), re);
    refuse({ "max-timeout-ms": "abc" }, /--max-timeout-ms: "abc" is not a whole number/);
    refuse({ "max-timeout-ms": "900001" }, /max_timeout_ms: must be from 100 to 900000 ms/);
    refuse({ "max-timeout-ms": "99" }, /max_timeout_ms: must be from 100/);
    refuse({ "max-memory-mb": "31" }, /max_memory_mb: must be from 32 to 1048576 MB/);
    refuse({ concurrency: "0" }, /concurrency: must be from 1 to 1000/);
    refuse({ rate: "1.5" }, /--rate: "1.5" is not a whole number/);
    refuse({ runtimes: "ruby" }, /runtimes\.0: /);
    refuse({ runtimes: "," }, /runtimes: names no runtime/);
    refuse({ network: "private" }, /network: /);
    refuse({ network: "none", "egress-allow": "pypi.org" }, /egress_allow: needs network "public"/);
    refuse({ "egress-allow": "https://pypi.org/simple" }, /not a URL/);
    assert.throws(() => parseKeyPolicy({ max_timeout_ms: 5000, colour: "red" }), /colour/);
    assert.throws(() => policyFromColumn('{"max_timeout_ms": 1e9}'), /max_timeout_ms/);
  });

  it("domain patterns: names and *. wildcards only, normalised", () => {
    const good: [string, string][] = [
      ["pypi.org", "pypi.org"],
      ["PyPI.ORG.", "pypi.org"],
      [" *.github.com ", "*.github.com"],
      ["a-b.c_d.example", "a-b.c_d.example"],
      ["xn--bcher-kva.example", "xn--bcher-kva.example"],
    ];
    for (const [raw, want] of good)
      assert.deepEqual(checkDomainPattern(raw), { ok: true, pattern: want });
    const bad = [
      "",
      "*",
      "*.",
      "*.com",
      "localhost",
      "*.*.example.com",
      "exa*mple.com",
      "example.*",
      "https://example.com",
      "example.com/path",
      "example.com:443",
      "1.2.3.4",
      "10.0.0.1.",
      "2130706433",
      "0x7f.1",
      "[::1]",
      "::1",
      "-bad.example.com",
      "bad-.example.com",
      "a..b.com",
      "bücher.example",
      `${"a".repeat(64)}.com`,
      `${"a.".repeat(127)}com`,
    ];
    for (const raw of bad) assert.equal(checkDomainPattern(raw).ok, false, raw);
    assert.deepEqual(checkDomainPatterns(["a.com", "A.com", "b.com"]), {
      ok: true,
      patterns: ["a.com", "b.com"],
    });
    assert.equal(checkDomainPatterns([]).ok, false);
    assert.equal(
      checkDomainPatterns(Array.from({ length: 257 }, (_, i) => `h${i}.example.com`)).ok,
      false,
    );
  });

  it("property: what the check accepts is a lower-case dotted name, never an address or URL", () => {
    const piece = fc.oneof(
      fc.constantFrom("*", "*.", ".", "-", "_", ":", "/", "@", "1", "0x", "[", "]", "xn--", "A"),
      fc.string({ maxLength: 6 }),
      fc.stringMatching(/^[a-z0-9-]{1,8}$/),
    );
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 8 }), (parts) => {
        const c = checkDomainPattern(parts.join(""));
        if (!c.ok) return;
        const name = c.pattern.replace(/^\*\./, "");
        assert.match(name, /^[a-z0-9_-]+(\.[a-z0-9_-]+)+$/);
        assert.ok(!/^[0-9]+$/.test(name.split(".").pop()!), c.pattern);
        assert.ok(!name.includes("*"));
      }),
      { numRuns: 2000 },
    );
  });
});
