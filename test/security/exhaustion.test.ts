import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { assertNoLeaks, snapshot } from "../helpers/leaks.js";
import { textOf } from "../helpers/mcp-client.js";
import { py, securityServer, SECURITY_BACKENDS, type SecurityServer } from "./harness.js";
import { PY } from "../helpers/pythons.js";

const MiB = 1024 * 1024;

/**
 * Exhaustion from inside: every program here tries to take more than its share. The bounded
 * proofs run first (node:test runs a file's tests in order) and the hostile cases refuse to run
 * unless the limit they rely on was just shown to hold here.
 */
for (const backend of SECURITY_BACKENDS) {
  const vm = backend === "microvm";
  describe(`security: exhaustion [${backend}]`, () => {
    let s: SecurityServer;
    const proven = { memory: false, pids: false };
    before(async () => {
      s = await securityServer(backend);
    });
    after(async () => s.close());

    test("bounded [SEC-MEM, SEC-PIDS]: 64 MiB and 128 processes hold before anything hostile", async () => {
      const mem = await s.run({
        runtime: PY,
        code: py(
          "c = []",
          "for i in range(24):",
          "    c.append(b'x' * (8 << 20)); print(i, flush=True)",
        ),
        memory_mb: 64,
      });
      assert.equal(mem.exit_reason, "oom", JSON.stringify(mem));
      assert.ok(mem.stdout.trim().split("\n").length < 8, mem.stdout);
      proven.memory = true;
      const pids = await s.run({
        runtime: PY,
        code: py(
          "import subprocess",
          "ps = []",
          "try:",
          "    for i in range(200): ps.append(subprocess.Popen(['/bin/sleep', '30']))",
          "except OSError as e: print('refused')",
          "print('started', len(ps))",
          "for p in ps: p.kill()",
        ),
      });
      const started = Number(/started (\d+)/.exec(pids.stdout)?.[1]);
      assert.match(pids.stdout, /refused/);
      assert.ok(started > 10 && started < 128, pids.stdout);
      proven.pids = true;
    });

    test("SEC-INODES: filling /tmp with empty files ends in the memory cap, not the host", async () => {
      assert.ok(proven.memory, "memory limit not proven first");
      const r = await s.run({
        runtime: PY,
        code: py(
          "import os",
          "os.mkdir('/tmp/i')",
          "n = 0",
          "try:",
          "    while True:",
          "        open(f'/tmp/i/{n}', 'w').close(); n += 1",
          "        if n % 20000 == 0: print(n, flush=True)",
          "except OSError as e: print('stopped', n, e.errno)",
        ),
        memory_mb: 64,
        timeout_ms: 20000,
      });
      // Each inode and dentry is charged to the sandbox's memory cgroup: the fill is OOM-killed
      // (or refused with ENOSPC/ENOMEM) long before the timeout, and the machine keeps working.
      // In a microVM the guest's own tmpfs inode limit (half its RAM's pages) comes first: the
      // fill ends with ENOSPC after fewer files, inside the VM.
      assert.ok(["oom", "ok"].includes(r.exit_reason), JSON.stringify(r));
      if (r.exit_reason === "ok") assert.match(r.stdout, /stopped \d+ (28|12)/);
      const made = Math.max(...(r.stdout.match(/\d+/g) ?? ["0"]).map(Number));
      assert.ok(made >= (vm ? 5000 : 20000), `it really created files: ${r.stdout}`);
      const next = await s.run({ runtime: "bash", code: "ls -A /tmp | wc -l" });
      assert.equal(next.stdout.trim(), "0");
    });

    test("SEC-CPU: spinning on every core gets one core's worth of CPU time", async () => {
      // Three spinners for 2 s of wall time. Their CPU time (user+sys, measured by the sandbox's
      // own kernel accounting) is at most one core per second of wall time, plus slack.
      const r = await s.run({
        runtime: PY,
        code: py(
          "import os, time",
          "kids = []",
          "for _ in range(3):",
          "    pid = os.fork()",
          "    if pid == 0:",
          "        end = time.monotonic() + 2.0",
          "        while time.monotonic() < end: pass",
          "        os._exit(0)",
          "    kids.append(pid)",
          "w0 = time.monotonic()",
          "for k in kids: os.waitpid(k, 0)",
          "wall = time.monotonic() - w0",
          "t = os.times()",
          "print('ratio', round((t.children_user + t.children_system) / wall, 3))",
        ),
        timeout_ms: 20000,
      });
      assert.equal(r.exit_reason, "ok", r.stderr);
      const ratio = Number(/ratio ([\d.]+)/.exec(r.stdout)?.[1]);
      assert.ok(ratio > 0.02, `spinners ran at all (${ratio})`);
      assert.ok(ratio <= 1.25, `CPU seconds per wall second: ${ratio}; the quota is one core`);
    });

    test("SEC-TIME: ignoring SIGTERM and double-forking past the deadline still dies", async () => {
      assert.ok(proven.pids, "process limit not proven first");
      const base = snapshot();
      const r = await s.run({
        runtime: "bash",
        code: [
          "trap '' TERM HUP INT",
          "( trap '' TERM HUP INT; setsid bash -c 'trap \"\" TERM HUP INT; while :; do sleep 0.05; done' & ) &",
          "( ( trap '' TERM; exec -a sr-orphan sleep 600 ) & ) &",
          "echo spawned",
          "while :; do :; done",
        ].join("\n"),
        timeout_ms: 1500,
      });
      assert.equal(r.exit_reason, "timeout");
      assert.equal(r.stdout, "spawned\n");
      // The server is up: its warm pool (refilled since the snapshot) is not a leak; the
      // orphans this program tried to leave would be.
      await assertNoLeaks(base, 3000, { whileServing: true });
      const next = await s.run({
        runtime: "bash",
        code: "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c '[s]r-orphan\\|[s]leep 0.05' || true",
      });
      assert.equal(next.stdout.trim(), "0");
    });

    test("SEC-FILECAP: 32 return files with some huge: huge ones too_large, the rest returned", async () => {
      const paths = Array.from({ length: 32 }, (_, i) => `/tmp/f${i}`);
      const r = await s.run({
        runtime: "bash",
        code: [
          'for i in $(seq 0 31); do echo "file $i" > /tmp/f$i; done',
          // f3: 12 MiB of real data; f7: a sparse 100 GiB file (st_size far past any cap).
          "head -c 12582912 /dev/urandom > /tmp/f3",
          "truncate -s 100G /tmp/f7",
          "echo made",
        ].join("\n"),
        return_files: paths,
        memory_mb: 128,
      });
      assert.equal(r.exit_reason, "ok", r.stderr);
      assert.equal(r.files.length, 32);
      for (const [i, f] of r.files.entries()) {
        assert.equal(f.path, paths[i]);
        if (i === 3 || i === 7) {
          assert.equal(f.status, "too_large", JSON.stringify(f));
          assert.ok(f.size_bytes > 10 * MiB, JSON.stringify(f));
        } else assert.equal(f.status, "ok", JSON.stringify(f));
      }
    });

    // Hole H3 (docs/THREAT-MODEL.md), closed: returned files are capped at 4 MiB each and 6 MiB
    // together, and one MCP answer stays under 9 MiB, so it always reaches a stdio client.
    test("SEC-FILECAP: files past the 6 MiB total come back total_limit, a later small one ok", async () => {
      const r = await s.run({
        runtime: "bash",
        code: "for f in a b c; do head -c 2621440 /dev/zero > /tmp/$f; done; echo tiny > /tmp/d",
        return_files: ["/tmp/a", "/tmp/b", "/tmp/c", "/tmp/d"],
        memory_mb: 128,
      });
      assert.deepEqual(
        r.files.map((f) => [f.status, f.size_bytes]),
        [
          ["ok", 2.5 * MiB],
          ["ok", 2.5 * MiB],
          ["total_limit", 2.5 * MiB],
          ["ok", 5],
        ],
        // A file lost in transit says why (its message): the first thing to read on a failure.
        JSON.stringify(r.files),
      );
    });

    test("SEC-TRANSPORT: a big returned file or control-byte output never breaks the connection", async () => {
      const big = await s.h.call({
        runtime: "bash",
        code: "head -c 9437184 /dev/urandom > /tmp/big; head -c 4194304 /dev/urandom > /tmp/edge",
        return_files: ["/tmp/big", "/tmp/edge"],
        memory_mb: 128,
      });
      assert.notEqual(big.isError, true, textOf(big));
      const files = (big.structuredContent as { files: { status: string }[] }).files;
      assert.deepEqual(
        files.map((f) => f.status),
        ["too_large", "ok"],
      );
      const ctl = await s.h.call({
        runtime: PY,
        // 1 MB of U+0001 is 6 MB once JSON-escaped, twice (text block + structuredContent).
        code: py("import sys", "sys.stdout.write('\\x01' * 1000000)"),
        max_output_bytes: 256 * 1024,
      });
      assert.notEqual(ctl.isError, true, textOf(ctl));
      const alive = await s.run({ runtime: "bash", code: "echo alive" });
      assert.equal(alive.stdout, "alive\n");
    });

    test("SEC-NOFOLLOW: FIFO, socket, directory, /dev/zero and /proc/self/mem are never read", async () => {
      const r = await s.run({
        runtime: PY,
        code: py(
          "import os, socket",
          "os.mkfifo('/tmp/fifo')",
          "s = socket.socket(socket.AF_UNIX); s.bind('/tmp/sock')",
          "os.mkdir('/tmp/dir')",
          "os.symlink('/dev/zero', '/tmp/zero')",
          "os.symlink('/proc/self/mem', '/tmp/mem')",
          "os.symlink('/proc/1/environ', '/tmp/env')",
          "os.symlink('/dev/urandom', '/home/user/rnd')",
          "print('ok')",
        ),
        return_files: [
          "/tmp/fifo",
          "/tmp/sock",
          "/tmp/dir",
          "/tmp/zero",
          "/tmp/mem",
          "/tmp/env",
          "rnd",
        ],
        timeout_ms: 5000,
      });
      assert.equal(r.exit_reason, "ok", r.stderr);
      for (const f of r.files) assert.equal(f.status, "not_regular", JSON.stringify(f));
      assert.equal(r.files.length, 7);
    });
  });
}
