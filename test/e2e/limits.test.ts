import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { assertNoLeaks } from "../helpers/leaks.js";
import { textOf } from "../helpers/mcp-client.js";
import { serverForSuite } from "../helpers/suite.js";
import { LIMITS } from "../../src/schema/limits.js";
import { PY } from "../helpers/pythons.js";

/**
 * Resource limits. The bounded proofs come first in this file (node:test runs a file's tests in
 * order); the hostile programs refuse to run unless the proof before them passed, because an
 * unjailed fork bomb or memory bomb takes the whole machine down.
 */
for (const backend of TEST_BACKENDS) {
  describe(`limits [${backend}]`, () => {
    const h = serverForSuite(backend);
    const proven = { pids: false, memory: false };

    test("bounded: the process limit holds (children start one by one until refused)", async () => {
      const { s } = await h.exec({
        runtime: PY,
        code: [
          "import subprocess",
          "procs = []",
          "try:",
          "    for i in range(400):",
          "        procs.append(subprocess.Popen(['/bin/sleep', '30']))",
          "except (OSError, BlockingIOError) as e:",
          "    print('refused', type(e).__name__)",
          "print('started', len(procs))",
          "for p in procs: p.kill()",
        ].join("\n"),
        timeout_ms: 30000,
      });
      assert.equal(s.exit_reason, "ok", s.stderr);
      const started = Number(/started (\d+)/.exec(s.stdout)?.[1]);
      assert.match(s.stdout, /refused/);
      assert.ok(started > 10 && started < 128, `started ${started} processes`);
      proven.pids = true;
    });

    test("bounded: the memory limit holds (allocation past memory_mb is OOM-killed)", async () => {
      const { s } = await h.exec({
        runtime: PY,
        code: [
          "chunks = []",
          "for i in range(40):",
          "    chunks.append(b'x' * (8 << 20))",
          "    print(i, flush=True)",
        ].join("\n"),
        memory_mb: 64,
        timeout_ms: 20000,
      });
      assert.equal(s.exit_reason, "oom", JSON.stringify(s));
      const reached = s.stdout.trim().split("\n").length;
      assert.ok(reached < 8, `allocated ${reached} x 8 MiB under a 64 MiB limit`);
      proven.memory = true;
    });

    test("a program within memory_mb is not killed", async () => {
      const { s } = await h.exec({
        runtime: PY,
        code: "b = b'x' * (100 << 20)\nprint(len(b))",
        memory_mb: 256,
      });
      assert.equal(s.exit_reason, "ok", s.stderr);
    });

    test("hostile: a fork bomb is contained and leaves nothing", async () => {
      assert.ok(
        proven.pids && proven.memory,
        "limits were not proven first; refusing to run a fork bomb",
      );
      // The bomb runs behind a shell that sleeps 2 s without using CPU (read on a FIFO), counts
      // the processes it owns with builtins only (no fork needed) and shows the first fork
      // failure: the limit was reached and held, and the call still ends on its own.
      const { s } = await h.exec({
        runtime: "bash",
        code: [
          "mkfifo /tmp/wait",
          "bomb() { bomb | bomb & }",
          "bomb 2>/tmp/bomb.err",
          "read -t 2 <>/tmp/wait",
          "n=0; for p in /proc/[0-9]*; do [[ -O $p ]] && n=$((n+1)); done",
          "read -r first < /tmp/bomb.err",
          'echo "mine=$n"; echo "first=$first"',
        ].join("\n"),
        timeout_ms: 10_000,
      });
      assert.equal(s.exit_reason, "ok", JSON.stringify(s));
      const mine = Number(/^mine=(\d+)$/m.exec(s.stdout)?.[1]);
      assert.ok(mine > 1 && mine <= LIMITS.pids, `${mine} processes, at most ${LIMITS.pids}`);
      assert.match(s.stdout, /^first=.*fork.*Resource temporarily unavailable/m);
      assert.ok(s.duration_ms < 10_000, `${s.duration_ms} ms`);
      await assertNoLeaks(h.base(), 3000, { whileServing: true });
      const after = await h.exec({ runtime: "bash", code: "echo alive" });
      assert.equal(after.s.stdout, "alive\n");
    });

    test("hostile: a 1 GB allocation is OOM-killed", async () => {
      assert.ok(proven.memory, "memory limit not proven first");
      const { s } = await h.exec({
        runtime: PY,
        code: "b = b'x' * (1 << 30)\nprint('survived')",
      });
      assert.equal(s.exit_reason, "oom");
      assert.doesNotMatch(s.stdout, /survived/);
    });

    test("hostile: a `yes` flood is cut at the output cap and flagged", async () => {
      const { result, s } = await h.exec({ runtime: "bash", code: "yes", timeout_ms: 20000 });
      // A verdict other than the cap's says why in the result's last text lines.
      assert.equal(s.exit_reason, "output_limit", textOf(result).slice(-600));
      assert.equal(s.stdout_truncated, true);
      // What a model sees is the head and tail of the first MiB, with the cut said.
      const marker = /\n\[\.\.\. (\d+) bytes omitted \.\.\.\]\n/;
      assert.match(s.stdout, marker);
      assert.match(s.stdout.replace(marker, ""), /^(y\n)+y?(y\n)*y?$/);
      const omitted = Number(marker.exec(s.stdout)?.[1]);
      assert.ok(omitted + Buffer.byteLength(s.stdout.replace(marker, "")) <= 1024 * 1024);
    });

    test("hostile: a stderr flood is cut too", async () => {
      const { s } = await h.exec({ runtime: "bash", code: "yes err >&2", timeout_ms: 20000 });
      assert.equal(s.exit_reason, "output_limit");
      assert.equal(s.stderr_truncated, true);
      assert.equal(s.stdout_truncated, false);
    });

    test("hostile: filling /tmp hits the size cap, not the host", async () => {
      assert.ok(proven.memory, "memory limit not proven first");
      const { s } = await h.exec({
        runtime: "bash",
        code: "dd if=/dev/zero of=/tmp/fill bs=1M count=1000 2>&1 | grep -o 'No space left on device'; df -m /tmp | tail -1",
        memory_mb: 512,
        timeout_ms: 20000,
      });
      assert.match(s.stdout, /No space left on device/);
      assert.match(s.stdout, /\s128\s+128\s+0 100% \/tmp/, "the cap is the 128 MiB scratch size");
    });

    test("hostile: filling /tmp past memory_mb ends as oom, not at the deadline (H20)", async () => {
      assert.ok(proven.memory, "memory limit not proven first");
      // The 128 MiB /tmp is larger than memory_mb: its pages count against the code's memory
      // (the namespace backend's cgroup; in a microVM, the guest's cgroup for the code), so the
      // writer is OOM-killed long before the deadline.
      const { s } = await h.exec({
        runtime: "bash",
        code: "dd if=/dev/zero of=/tmp/fill bs=1M count=120 2>&1; echo survived",
        memory_mb: 32,
        timeout_ms: 30_000,
      });
      assert.equal(s.exit_reason, "oom", JSON.stringify(s));
      assert.doesNotMatch(s.stdout, /survived/);
    });

    test("hostile: a background process does not outlive its call", async () => {
      const { s } = await h.exec({
        runtime: "bash",
        code: "(sleep 300 &); nohup sleep 301 >/dev/null 2>&1 & setsid sleep 302 & echo started",
      });
      assert.equal(s.stdout, "started\n");
      await assertNoLeaks(h.base(), 3000, { whileServing: true });
      const next = await h.exec({
        runtime: "bash",
        code: "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c '[s]leep 30' || true",
      });
      assert.equal(next.s.stdout.trim(), "0");
    });
  });
}
