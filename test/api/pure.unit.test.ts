import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import { FailureLimiter, parseBearer } from "../../src/http/auth.js";
import { requestIds } from "../../src/api/mcp-http.js";
import { checkHostOrigin, isLoopbackBind, splitHostPort } from "../../src/api/origin.js";
import { KeyQuota } from "../../src/policy/quota.js";
import { isOwned, type ProcInfo } from "../../src/jail/reap.js";
import { outcomeToWire, wireToError, wireToOutcome } from "../../src/api/wire.js";
import type { ExecOutcome } from "../../src/engine/result.js";

const LOOP = { bindHost: "127.0.0.1", port: 8787 };

describe("Host/Origin checks against DNS rebinding", () => {
  test("loopback names with our port pass", () => {
    for (const host of ["127.0.0.1:8787", "localhost:8787", "[::1]:8787", "LOCALHOST:8787"])
      assert.deepEqual(checkHostOrigin({ host }, LOOP), { ok: true }, host);
    for (const origin of ["http://localhost:8787", "http://127.0.0.1:8787", "https://[::1]:8787"])
      assert.deepEqual(checkHostOrigin({ host: "localhost:8787", origin }, LOOP), { ok: true });
  });

  test("rebinding hosts, wrong ports and odd origins are refused", () => {
    const hosts = [
      undefined,
      "",
      "evil.example:8787",
      "evil.example",
      "127.0.0.1.evil.example:8787",
      "localhost.evil:8787",
      "127.0.0.1:8788",
      "127.0.0.1",
      "localhost:80",
      "127.0.0.1:8787@evil",
      "127.0.0.1:8787/x",
      "0.0.0.0:8787",
      "[::ffff:127.0.0.1]:8787",
      "127.0.0.1:08787x",
      "127.0.0.1:99999",
      " 127.0.0.1:8787",
    ];
    for (const host of hosts)
      assert.equal(checkHostOrigin({ host }, LOOP).ok, false, `Host ${String(host)}`);
    const origins = [
      "null",
      "http://evil.example",
      "http://evil.example:8787",
      "http://localhost:8788",
      "http://localhost",
      "file://",
      "http://localhost:8787/path",
      "http://user@localhost:8787",
      "ws://localhost:8787",
      "http://127.0.0.1.nip.io:8787",
      "",
    ];
    for (const origin of origins)
      assert.equal(
        checkHostOrigin({ host: "localhost:8787", origin }, LOOP).ok,
        false,
        `Origin ${origin}`,
      );
  });

  test("a non-loopback bind leaves the decision to the API key", () => {
    assert.deepEqual(
      checkHostOrigin({ host: "evil.example", origin: "null" }, { bindHost: "0.0.0.0", port: 1 }),
      { ok: true },
    );
    assert.equal(isLoopbackBind("127.0.0.1"), true);
    assert.equal(isLoopbackBind("::1"), true);
    assert.equal(isLoopbackBind("[::1]"), true);
    assert.equal(isLoopbackBind("0.0.0.0"), false);
    assert.equal(isLoopbackBind("10.0.0.1"), false);
  });

  test("port 80 is the default only when the Host has no port", () => {
    const srv = { bindHost: "localhost", port: 80 };
    assert.equal(checkHostOrigin({ host: "localhost" }, srv).ok, true);
    assert.equal(checkHostOrigin({ host: "localhost", origin: "http://localhost" }, srv).ok, true);
    assert.equal(
      checkHostOrigin({ host: "localhost", origin: "https://localhost" }, srv).ok,
      false,
    );
  });

  test("no random Host header that is not a loopback name passes (property)", () => {
    fc.assert(
      fc.property(fc.string(), (host) => {
        const hp = splitHostPort(host);
        const loopback =
          hp !== null &&
          /^(localhost|127\.\d{1,3}\.\d{1,3}\.\d{1,3}|\[::1\])$/.test(hp.name) &&
          hp.port === 8787;
        return checkHostOrigin({ host }, LOOP).ok === loopback;
      }),
      { numRuns: 2000 },
    );
  });
});

describe("bearer parsing", () => {
  test("takes exactly one bearer token", () => {
    assert.equal(parseBearer("Bearer abc"), "abc");
    assert.equal(parseBearer("bearer abc"), "abc");
    for (const h of [
      undefined,
      "",
      "Bearer",
      "Bearer ",
      "Bearer  abc",
      "Basic abc",
      "Bearer abc def",
      "Bearer abc\n",
      `Bearer ${"a".repeat(8193)}`,
      "Bearer ab\u00e9",
      "xBearer abc",
    ])
      assert.equal(parseBearer(h), null, JSON.stringify(h));
    assert.equal(parseBearer(["Bearer a", "Bearer b"]), null);
    // An external issuer's JWT fits.
    assert.equal(parseBearer(`Bearer ${"a".repeat(8192)}`)?.length, 8192);
  });
});

describe("per-key quota", () => {
  test("concurrency is capped per key, and a release frees a slot once", () => {
    const q = new KeyQuota({ maxConcurrent: 2, ratePerMinute: 1000, burst: 1000 });
    const a1 = q.tryAcquire("a", 0);
    const a2 = q.tryAcquire("a", 0);
    const a3 = q.tryAcquire("a", 0);
    assert.ok(a1.ok && a2.ok);
    assert.deepEqual(a3, { ok: false, reason: "concurrency", retryAfterS: 1 });
    assert.ok(q.tryAcquire("b", 0).ok, "another key is not affected");
    if (a1.ok) {
      a1.release();
      a1.release();
    }
    assert.equal(q.active("a"), 1);
    assert.ok(q.tryAcquire("a", 0).ok);
    assert.equal(q.tryAcquire("a", 0).ok, false);
  });

  test("the rate bucket refills at ratePerMinute and says when to retry", () => {
    const q = new KeyQuota({ maxConcurrent: 100, ratePerMinute: 6, burst: 2 });
    assert.ok(q.tryAcquire("k", 0).ok);
    assert.ok(q.tryAcquire("k", 0).ok);
    const r = q.tryAcquire("k", 0);
    assert.deepEqual(r, { ok: false, reason: "rate", retryAfterS: 10 });
    assert.equal(q.tryAcquire("k", 9_000).ok, false);
    assert.ok(q.tryAcquire("k", 10_001).ok);
  });
});

describe("failed-authentication limiter", () => {
  test("blocks an address after its burst and lets it back after the refill", () => {
    const f = new FailureLimiter(3, 1000);
    for (let i = 0; i < 3; i++) {
      assert.equal(f.retryAfterS("a", 0), 0);
      f.recordFailure("a", 0);
    }
    assert.equal(f.retryAfterS("a", 0), 1);
    assert.equal(f.retryAfterS("b", 0), 0, "other addresses are not blocked");
    assert.equal(f.retryAfterS("a", 1000), 0);
  });

  test("memory stays bounded under many addresses", () => {
    const f = new FailureLimiter(1, 1000, 100);
    for (let i = 0; i < 1000; i++) f.recordFailure(`10.0.${i >> 8}.${i & 255}`, 0);
    assert.equal(f.retryAfterS("10.0.3.231", 0), 1, "the newest is still tracked");
    assert.equal(f.retryAfterS("10.0.0.0", 0), 0, "the oldest was dropped");
  });
});

describe("orphan ownership", () => {
  const NODE = "/usr/bin/node";
  /** Owners as an older server knew them: by running the same executable. */
  const byExe = (p: ProcInfo) => p.exe === NODE;
  const table = (rows: [number, number, string | null][]) => {
    const m = new Map<number, ProcInfo>(
      rows.map(([pid, ppid, exe]) => [pid, { pid, ppid, uid: 0, exe, zombie: false }]),
    );
    return (pid: number) => m.get(pid) ?? null;
  };

  test("a sandbox whose top process is a live server's child is owned", () => {
    const procs = table([
      [100, 1, NODE],
      [200, 100, "/usr/bin/bwrap"],
      [201, 200, "/usr/bin/bwrap"],
    ]);
    assert.equal(isOwned([200, 201], procs, byExe), true);
  });

  test("a live server on another Node binary owns its sandboxes when known by identity, not by path", () => {
    const procs = table([
      [100, 1, "/opt/node24/bin/node"],
      [200, 100, "/usr/bin/bwrap"],
      [201, 200, "/usr/bin/bwrap"],
    ]);
    // By path, the other binary's sandboxes looked orphaned (and were killed).
    assert.equal(isOwned([200, 201], procs, byExe), false);
    const servers = new Set([100]);
    assert.equal(
      isOwned([200, 201], procs, (p) => servers.has(p.pid)),
      true,
    );
    // A recorded server that died: its sandbox, re-parented to init, is an orphan.
    const dead = table([
      [200, 1, "/usr/bin/bwrap"],
      [201, 200, "/usr/bin/bwrap"],
    ]);
    assert.equal(
      isOwned([200, 201], dead, (p) => servers.has(p.pid)),
      false,
    );
  });

  test("after the server dies the sandbox is re-parented to init and is an orphan", () => {
    const procs = table([
      [200, 1, "/usr/bin/bwrap"],
      [201, 200, "/usr/bin/bwrap"],
    ]);
    assert.equal(isOwned([200, 201], procs, byExe), false);
  });

  test("node inside the sandbox does not make it owned; a non-node parent does not either", () => {
    const inside = table([
      [200, 1, "/usr/bin/bwrap"],
      [201, 200, NODE],
      [202, 201, NODE],
    ]);
    assert.equal(isOwned([200, 201, 202], inside, byExe), false);
    const foreign = table([
      [50, 1, "/usr/sbin/sshd"],
      [200, 50, "/usr/bin/bwrap"],
    ]);
    assert.equal(isOwned([200], foreign, byExe), false);
    const cycle = table([
      [200, 201, "/usr/bin/bwrap"],
      [201, 200, "/usr/bin/bwrap"],
    ]);
    assert.equal(isOwned([200], cycle, byExe), false);
  });
});

describe("wire format", () => {
  const outcome: ExecOutcome = {
    result: {
      stdout: "hi\n",
      stderr: "",
      exit_code: 0,
      exit_reason: "ok",
      signal: null,
      duration_ms: 5,
      isolation: "namespace",
      network: "none",
      stdout_truncated: false,
      stderr_truncated: false,
      stdout_omitted_bytes: 0,
      stderr_omitted_bytes: 0,
      files: [
        { path: "/tmp/a.png", status: "ok", size_bytes: 3, mime_type: "image/png" },
        { path: "/tmp/none", status: "missing", size_bytes: 0, mime_type: "text/plain" },
        { path: "/tmp/b.bin", status: "ok", size_bytes: 2, mime_type: "application/octet-stream" },
      ],
    } as ExecOutcome["result"],
    files: [
      { path: "/tmp/a.png", mimeType: "image/png", content: Buffer.from([1, 2, 3]) },
      { path: "/tmp/b.bin", mimeType: "application/octet-stream", content: Buffer.from([0, 255]) },
    ],
    images: [],
  };

  test("round trips an outcome exactly, files in order", () => {
    const wire = outcomeToWire(outcome);
    assert.equal(wire.files[0]?.content_base64, "AQID");
    assert.equal(wire.files[1]?.content_base64, undefined);
    assert.deepEqual(wireToOutcome(JSON.parse(JSON.stringify(wire))), outcome);
  });

  test("a malformed or extended server answer is refused", () => {
    const wire = outcomeToWire(outcome);
    assert.throws(() => wireToOutcome({ ...wire, extra: 1 }), /malformed/);
    assert.throws(() => wireToOutcome({ ...wire, exit_reason: "exploded" }), /malformed/);
    assert.throws(() => wireToOutcome(null), /malformed/);
  });

  test("error bodies become the engine's errors", () => {
    const busy = wireToError(429, { error: { code: "BUSY", message: "full" } });
    assert.equal(busy.code, "BUSY");
    assert.equal(busy.message, "full");
    assert.equal(
      wireToError(401, { error: { code: "UNAUTHORIZED", message: "x" } }).code,
      "NOT_READY",
    );
    assert.equal(wireToError(502, "<html>").code, "INTERNAL");
  });

  test("request ids are read from single and batch bodies only where a method is present", () => {
    assert.deepEqual(requestIds({ jsonrpc: "2.0", id: 3, method: "tools/call" }), [3]);
    assert.deepEqual(
      requestIds([
        { id: "a", method: "x" },
        { id: 4, result: {} },
        { method: "notifications/x" },
        null,
      ]),
      ["a"],
    );
    assert.deepEqual(requestIds("x"), []);
  });
});
