import assert from "node:assert/strict";
import { posix } from "node:path";
import { describe, it } from "node:test";
import fc from "fast-check";
import { BLOCKED_CIDRS, classifyAddress, parseStrict } from "../../src/net/addresses.js";
import { execInputSchema, execInputShape, RUNTIMES } from "../../src/schema/exec.js";
import { LIMITS, WRITABLE_ROOTS } from "../../src/schema/limits.js";
import { checkEnvName, normaliseSandboxPath } from "../../src/schema/paths.js";
import { parseExecRequest } from "../../src/schema/validate.js";

/**
 * Property tests for the pure security checks (SEC-INPUT-*, SEC-PATHS, SEC-NET-BLOCK): whatever
 * is accepted satisfies every limit, whatever the generator throws at it.
 */
const bytes = (s: string) => Buffer.byteLength(s, "utf8");

// Paths built from hostile pieces: dots, empty parts, roots, unicode, controls, surrogates.
const segment = fc.oneof(
  fc.constantFrom(
    "",
    ".",
    "..",
    "...",
    "tmp",
    "home",
    "user",
    "etc",
    "passwd",
    "\u0000",
    "\u009b",
    "\ud800",
    "é",
    "a b",
    "~",
  ),
  fc.string({ maxLength: 12 }),
  fc.string({ unit: "binary", maxLength: 6 }),
);
const hostilePath = fc.oneof(
  fc.array(segment, { maxLength: 8 }).map((p) => p.join("/")),
  fc.array(segment, { maxLength: 8 }).map((p) => `/${p.join("/")}`),
  fc
    .tuple(
      fc.constantFrom("/tmp", "/home/user", "/home/user/", "/tmp/"),
      fc.array(segment, { maxLength: 6 }),
    )
    .map(([r, p]) => `${r}/${p.join("/")}`),
  fc.string({ unit: "binary", maxLength: 40 }),
  fc.integer({ min: 1000, max: 1100 }).map((n) => `/tmp/${"x".repeat(n)}`),
);

function assertGoodPath(path: string): void {
  assert.ok(
    WRITABLE_ROOTS.some((r) => path.startsWith(`${r}/`)),
    path,
  );
  assert.equal(posix.normalize(path), path, "normalised");
  const parts = path.split("/").slice(1);
  for (const part of parts) {
    assert.notEqual(part, "", `no empty component: ${JSON.stringify(path)}`);
    assert.notEqual(part, ".", path);
    assert.notEqual(part, "..", path);
  }
  assert.doesNotMatch(path, /\p{Cc}|\p{Cs}/u, "no control characters or lone surrogates");
  assert.ok(bytes(path) <= LIMITS.pathBytes.max + "/home/user/".length, path);
}

describe("properties: sandbox path validation (SEC-PATHS)", () => {
  it("any accepted path is absolute, normalised, inside a writable root, clean", () => {
    fc.assert(
      fc.property(hostilePath, (input) => {
        const r = normaliseSandboxPath(input);
        if (!r.ok) return;
        assertGoodPath(r.path);
        // Stable: validating the result again gives the same path.
        assert.deepEqual(normaliseSandboxPath(r.path), r);
      }),
      { numRuns: 5000 },
    );
  });

  it("any input with '..', NUL, a control character or a lone surrogate is refused", () => {
    fc.assert(
      fc.property(
        hostilePath,
        fc.constantFrom(
          "/../",
          "\u0000",
          "\u0007",
          "\u007f",
          "\u0085",
          "\u009b",
          "\ud800",
          "\udfff",
        ),
        fc.nat(40),
        (p, bad, at) => {
          const i = Math.min(at, p.length);
          const input = `/tmp/${p.slice(0, i)}x${bad}x${p.slice(i)}`;
          assert.equal(normaliseSandboxPath(input).ok, false, JSON.stringify(input));
        },
      ),
      { numRuns: 3000 },
    );
  });
});

// Requests from arbitrary values, biased towards the edges of each limit.
const edgeInt = (min: number, max: number) =>
  fc.oneof(
    fc.constantFrom(min - 1, min, max, max + 1, 0, -1, 1.5, 2 ** 53, Number.MAX_VALUE),
    fc.integer({ min: min - 10, max: max + 10 }),
  );
const requestArb = fc.record(
  {
    runtime: fc.oneof(fc.constantFrom(...RUNTIMES), fc.string({ maxLength: 12 }), fc.anything()),
    code: fc.oneof(
      fc.string({ maxLength: 50 }),
      fc.nat(3).map((n) => "x".repeat(LIMITS.codeBytes.max - 1 + n)),
      fc.anything(),
    ),
    timeout_ms: fc.oneof(edgeInt(LIMITS.timeoutMs.min, LIMITS.timeoutMs.max), fc.anything()),
    memory_mb: fc.oneof(edgeInt(LIMITS.memoryMb.min, LIMITS.memoryMb.max), fc.anything()),
    env: fc.oneof(
      fc.dictionary(
        fc.oneof(
          fc.string({ maxLength: 6 }),
          fc.constantFrom("A", "_x", "1A", "A-B", "N".repeat(129), "constructor"),
        ),
        fc.oneof(fc.string({ maxLength: 8 }), fc.constant("x\u0000")),
      ),
      fc
        .integer({ min: 60, max: 70 })
        .map((n) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`E${i}`, ""]))),
      fc.anything(),
    ),
    files: fc.oneof(
      fc.dictionary(hostilePath, fc.string({ maxLength: 8 }), { maxKeys: 4 }),
      fc.dictionary(
        fc.constantFrom("a", "b.bin", "/tmp/c"),
        fc.oneof(
          fc
            .uint8Array({ maxLength: 12 })
            .map((b) => ({ base64: Buffer.from(b).toString("base64") })),
          fc.record({ base64: fc.string({ maxLength: 12 }) }),
          fc.record({ base64: fc.anything() }),
          fc.record({ base64: fc.constant("QQ=="), extra: fc.anything() }),
          fc.constant({ base64: Buffer.alloc(LIMITS.files.maxFileBytes + 1).toString("base64") }),
        ),
        { maxKeys: 3 },
      ),
      fc
        .integer({ min: 62, max: 66 })
        .map((n) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`f${i}`, ""]))),
      fc.constant({
        a: "x".repeat(LIMITS.files.maxFileBytes),
        b: "x".repeat(LIMITS.files.maxFileBytes),
        c: "x",
      }),
      fc.anything(),
    ),
    return_files: fc.oneof(
      fc.array(hostilePath, { maxLength: 4 }),
      fc.integer({ min: 30, max: 34 }).map((n) => Array.from({ length: n }, (_, i) => `/tmp/${i}`)),
      fc.anything(),
    ),
    network: fc.oneof(fc.constantFrom("public", "none", "private"), fc.anything()),
    extra: fc.anything(),
  },
  { requiredKeys: [] },
);

describe("properties: the exec input schema (SEC-INPUT-LIMITS, SEC-INPUT-TYPES)", () => {
  it("anything accepted satisfies every limit, and nothing unknown gets through", () => {
    fc.assert(
      fc.property(requestArb, (input) => {
        const r = execInputSchema.safeParse(input);
        if (!r.success) return;
        const q = r.data;
        for (const key of Object.keys(q)) assert.ok(key in execInputShape, `unknown key ${key}`);
        assert.ok((RUNTIMES as readonly string[]).includes(q.runtime));
        assert.ok(bytes(q.code) <= LIMITS.codeBytes.max);
        for (const [v, l] of [
          [q.timeout_ms, LIMITS.timeoutMs],
          [q.memory_mb, LIMITS.memoryMb],
        ] as const) {
          assert.ok(Number.isInteger(v) && v >= l.min && v <= l.max, `${v}`);
        }
        const env = Object.entries(q.env);
        assert.ok(env.length <= LIMITS.env.maxEntries);
        for (const [name, value] of env) {
          assert.equal(checkEnvName(name), null, name);
          assert.ok(!value.includes("\0") && bytes(value) <= LIMITS.env.maxValueBytes);
        }
        const files = Object.entries(q.files);
        assert.ok(files.length <= LIMITS.files.maxCount);
        let total = 0;
        for (const [path, content] of files) {
          const p = normaliseSandboxPath(path);
          assert.ok(p.ok, path);
          assertGoodPath(p.path);
          const size = content.length;
          assert.ok(size <= LIMITS.files.maxFileBytes);
          total += size;
        }
        assert.ok(total <= LIMITS.files.maxTotalBytes);
        assert.ok(q.return_files.length <= LIMITS.returnFiles.maxCount);
        for (const path of q.return_files) {
          const p = normaliseSandboxPath(path);
          assert.ok(p.ok, path);
          assertGoodPath(p.path);
        }
        assert.ok(["public", "none"].includes(q.network));
      }),
      { numRuns: 3000 },
    );
  });

  it("a __proto__ key in env or files is refused, never dropped, and pollutes nothing", () => {
    const protoNames = Object.getOwnPropertyNames(Object.prototype);
    fc.assert(
      fc.property(fc.constantFrom("env", "files"), fc.string({ maxLength: 8 }), (field, value) => {
        const input = JSON.parse(
          `{"runtime":"bash","code":"x","${field}":{"__proto__":${JSON.stringify(value)}}}`,
        ) as unknown;
        assert.throws(() => parseExecRequest(input), /__proto__/);
        assert.deepEqual(Object.getOwnPropertyNames(Object.prototype), protoNames);
      }),
      { numRuns: 200 },
    );
  });
});

describe("properties: address classification (SEC-NET-BLOCK), what test/net does not cover", () => {
  it("arbitrary text never throws, and anything unparsable is blocked", () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ maxLength: 45 }),
          fc.string({ unit: "binary", maxLength: 45 }),
          fc.ipV4Extended(),
          fc.ipV6(),
        ),
        (text) => {
          const c = classifyAddress(text);
          if (!c.valid) assert.equal(c.blocked, true);
        },
      ),
      { numRuns: 5000 },
    );
  });

  it("every address inside every blocked range, IPv6 included, is blocked", () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...BLOCKED_CIDRS),
        fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }),
        (cidr, r) => {
          const net = parseStrict(cidr.network);
          assert.ok(net, cidr.network);
          const bits = cidr.family === 4 ? 32 : 128;
          const host = r & ((1n << BigInt(bits - cidr.prefix)) - 1n);
          const value = net.value | host;
          const text =
            cidr.family === 4
              ? [24n, 16n, 8n, 0n].map((s) => String((value >> s) & 255n)).join(".")
              : Array.from({ length: 8 }, (_, i) =>
                  ((value >> BigInt(112 - 16 * i)) & 0xffffn).toString(16),
                ).join(":");
          assert.equal(
            classifyAddress(text).blocked,
            true,
            `${text} in ${cidr.network}/${cidr.prefix}`,
          );
        },
      ),
      { numRuns: 5000 },
    );
  });
});
