import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { after, describe, it } from "node:test";
import type { AgentEvent } from "../../src/protocol/types.js";
import {
  AGENT,
  hostPidsWith,
  killLeftovers,
  request,
  runJailed,
  sh,
  spawnJailedAgent,
  uniqueSleepArg,
} from "./agent-harness.js";
import { encodeKill, encodeRequest, FrameDecoder } from "../../src/protocol/codec.js";

/** Shell snippet: wait until `sleep <marker>` has exec'd (setsid forks before it execs). */
const untilSleeping = (marker: string) =>
  `until grep -qaP 'sleep\\x00${marker}' /proc/[0-9]*/cmdline 2>/dev/null; do sleep 0.01; done`;

after(() => {
  killLeftovers();
  assert.deepEqual(hostPidsWith(AGENT), [], "a jailed agent outlived its test");
});

describe("agent: running code", () => {
  it("captures stdout, stderr and the exit code", async () => {
    const r = await runJailed(sh("echo out; echo err >&2; exit 3"));
    assert.equal(r.failure, null);
    assert.equal(r.text.stdout, "out\n");
    assert.equal(r.text.stderr, "err\n");
    assert.deepEqual([r.exit?.reason, r.exit?.value], ["exited", 3]);
    assert.equal(r.exit?.stdoutTruncated, false);
    assert.equal(r.exit?.oomKills, 0); // shared kernel: the host counts OOM kills
    assert.equal(r.agentExitCode, 0);
  });

  it("runs /bin/echo with argv as given, no shell", async () => {
    const r = await runJailed(request(["/bin/echo", "a  b", "$HOME", "*"]));
    assert.equal(r.text.stdout, "a  b $HOME *\n");
  });

  it("runs python3.11", async () => {
    const r = await runJailed(
      request(["/usr/bin/python3.11", "-c", "import sys; print(sys.version_info[:2])"]),
    );
    assert.equal(r.text.stdout, "(3, 11)\n");
  });

  it("reports a signal death", async () => {
    const r = await runJailed(sh("kill -TERM $$"));
    assert.deepEqual([r.exit?.reason, r.exit?.value], ["signaled", 15]);
  });

  it("passes the environment exactly as given", async () => {
    const r = await runJailed(request(["/usr/bin/env"], { env: { A: "1", B: "x=y", EMPTY: "" } }));
    assert.equal(r.text.stdout, "A=1\nB=x=y\nEMPTY=\n");
  });

  it("runs in cwd with stdin at /dev/null", async () => {
    const r = await runJailed(sh("pwd; cat; readlink /proc/self/fd/0", { cwd: "/proc" }));
    assert.equal(r.exit?.reason, "exited");
    assert.equal(r.text.stdout, "/proc\n/dev/null\n");
  });

  it("gives the code only fds 0-2, its own session, no_new_privs and PDEATHSIG", async () => {
    const py = [
      "import os, ctypes",
      "fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))",
      "print(fds[:3], len(fds))", // the 4th is listdir's own
      "print(os.getsid(0) == os.getpid())",
      "print([l for l in open('/proc/self/status') if l.startswith('NoNewPrivs')][0].split()[1])",
      "sig = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(sig)); print(sig.value)",
      "print(oct(os.umask(0)))",
    ].join("\n");
    const r = await runJailed(request(["/usr/bin/python3.11", "-c", py]));
    assert.equal(r.text.stderr, "");
    assert.equal(r.text.stdout, "[0, 1, 2] 4\nTrue\n1\n9\n0o22\n");
  });

  it("starts the code with no signal ignored or blocked (the agent ignores SIGPIPE)", async () => {
    const r = await runJailed(request(["/bin/grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"]));
    assert.equal(r.text.stdout, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
  });

  it("reports spawn_failed for a missing program and a missing cwd, with no F frames", async () => {
    const a = await runJailed(request(["/nonexistent/prog"], { returnFiles: ["/tmp/x"] }));
    assert.equal(a.failure, null);
    assert.equal(a.exit?.reason, "spawn_failed");
    assert.match(a.exit?.message ?? "", /execve \/nonexistent\/prog: No such file/);
    assert.deepEqual(a.files, []);
    const b = await runJailed(request(["/bin/true"], { cwd: "/nonexistent" }));
    assert.equal(b.exit?.reason, "spawn_failed");
    assert.match(b.exit?.message ?? "", /chdir \/nonexistent/);
    const c = await runJailed(request(["/etc/passwd"]));
    assert.match(c.exit?.message ?? "", /Permission denied/);
  });
});

describe("agent: output caps", () => {
  it("stops a flood at the stdout cap: exactly cap bytes, truncated, output_limit", async () => {
    const r = await runJailed(request(["/usr/bin/yes"], { maxStdoutBytes: 100_000 }));
    assert.equal(r.failure, null);
    assert.equal(r.exit?.reason, "output_limit");
    assert.equal(r.exit?.stdoutTruncated, true);
    assert.equal(r.exit?.stderrTruncated, false);
    assert.equal(r.stdout.length, 100_000);
    assert.ok(r.text.stdout.startsWith("y\ny\n"));
  });

  it("stops a flood at the stderr cap", async () => {
    const r = await runJailed(sh("yes >&2", { maxStderrBytes: 1000 }));
    assert.deepEqual(
      [r.exit?.reason, r.exit?.stderrTruncated, r.stderr.length],
      ["output_limit", true, 1000],
    );
  });

  it("treats a zero cap as 'no output allowed'", async () => {
    const r = await runJailed(sh("echo x", { maxStdoutBytes: 0 }));
    assert.deepEqual(
      [r.exit?.reason, r.exit?.stdoutTruncated, r.stdout.length],
      ["output_limit", true, 0],
    );
  });

  it("accepts output exactly at the cap without truncation", async () => {
    const r = await runJailed(sh("printf 0123456789", { maxStdoutBytes: 10 }));
    assert.deepEqual(
      [r.exit?.reason, r.exit?.stdoutTruncated, r.text.stdout],
      ["exited", false, "0123456789"],
    );
  });

  it("delivers large output under the cap intact, in chunks of at most 64 KiB", async () => {
    const chunks: number[] = [];
    const r = await runJailed(
      request([
        "/usr/bin/python3.11",
        "-c",
        "import sys; sys.stdout.buffer.write(bytes(range(256)) * 4000)",
      ]),
      { onEvent: (e: AgentEvent) => void (e.type === "stdout" && chunks.push(e.chunk.length)) },
    );
    assert.equal(r.exit?.reason, "exited");
    assert.equal(r.stdout.length, 1_024_000);
    const pattern = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    assert.ok(Buffer.from(r.stdout).equals(Buffer.concat(Array<Buffer>(4000).fill(pattern))));
    assert.ok(chunks.length > 1 && Math.max(...chunks) <= 65536);
  });
});

describe("agent: ending the tree", () => {
  it("kills `sleep 100` at the timeout", async () => {
    const r = await runJailed(request(["/bin/sleep", "100"], { timeoutMs: 300 }));
    assert.equal(r.failure, null);
    assert.deepEqual([r.exit?.reason, r.exit?.value], ["timeout", 0]);
    assert.ok((r.exit?.durationMs ?? 0) >= 300);
  });

  for (const asPid1 of [false, true])
    it(`kills a double-forked setsid daemon on K before reporting X${asPid1 ? " (agent is pid 1)" : ""}`, async () => {
      const marker = uniqueSleepArg();
      const ac = new AbortController();
      let seenWhileRunning: number[] = [];
      let seenAtExit: number[] | null = null;
      const r = await runJailed(
        sh(
          `sh -c "setsid sleep ${marker} >/dev/null 2>&1 &"; head -c 4194304 /dev/zero > /tmp/big; ${untilSleeping(marker)}; echo spawned; exec sleep 1000`,
          {
            maxFileBytes: 16 * 1024 * 1024,
            maxTotalFileBytes: 16 * 1024 * 1024,
            returnFiles: ["/tmp/big"],
          },
        ),
        {
          asPid1,
          signal: ac.signal,
          onEvent: (e) => {
            if (e.type === "stdout") {
              seenWhileRunning = hostPidsWith(marker);
              ac.abort();
            }
            // X is in; the agent is still blocked sending the 4 MiB F frame, so the pid namespace
            // is alive: anything found now is a process the agent failed to kill.
            if (e.type === "exited") seenAtExit = hostPidsWith(marker);
          },
        },
      );
      assert.equal(r.failure, null);
      assert.equal(r.exit?.reason, "killed");
      assert.equal(seenWhileRunning.length, 1, "the daemon was running before K (control)");
      assert.deepEqual(seenAtExit, []);
      assert.equal(r.files[0]?.size, 4194304);
    });

  it("kills background processes left when the main process exits normally", async () => {
    const marker = uniqueSleepArg();
    let seenAtExit: number[] | null = null;
    const r = await runJailed(
      sh(
        `(setsid sleep ${marker} &); sleep ${marker} & head -c 4194304 /dev/zero > /tmp/big; exit 0`,
        {
          maxFileBytes: 16 * 1024 * 1024,
          maxTotalFileBytes: 16 * 1024 * 1024,
          returnFiles: ["/tmp/big"],
        },
      ),
      { onEvent: (e) => void (e.type === "exited" && (seenAtExit = hostPidsWith(marker))) },
    );
    assert.deepEqual([r.exit?.reason, r.exit?.value], ["exited", 0]);
    assert.deepEqual(seenAtExit, []);
  });

  it("does not wait for pipe EOF when a grandchild holds stdout open", async () => {
    const r = await runJailed(sh("sleep 1000 & echo done", { timeoutMs: 20_000 }));
    assert.deepEqual([r.exit?.reason, r.text.stdout], ["exited", "done\n"]);
  });

  it("kills the tree and exits when the host closes the channel", async () => {
    const marker = uniqueSleepArg();
    const { child, closed } = spawnJailedAgent();
    const decoder = new FrameDecoder();
    let sawStdout = false;
    const running = new Promise<void>((resolve) =>
      child.stdout!.on("data", (b: Buffer) => {
        for (const f of decoder.push(b).frames)
          if (f.type === "stdout") {
            sawStdout = true;
            resolve();
          }
      }),
    );
    child.stdin!.write(
      encodeRequest(
        sh(`setsid sleep ${marker} & ${untilSleeping(marker)}; echo up; exec sleep 1000`),
      ),
    );
    await running;
    assert.equal(hostPidsWith(marker).length, 1);
    child.stdin!.end();
    assert.equal(await closed, 3);
    assert.ok(sawStdout);
    assert.deepEqual(hostPidsWith(marker), []);
  });

  it("exits quietly when the host closes the channel before Q", async () => {
    const { child, closed } = spawnJailedAgent();
    child.stdin!.end();
    assert.equal(await closed, 0);
  });

  it("answers a garbage first frame with X setup_failed and D", async () => {
    const { child, closed } = spawnJailedAgent();
    const decoder = new FrameDecoder();
    const frames: string[] = [];
    child.stdout!.on("data", (b: Buffer) =>
      frames.push(...decoder.push(b).frames.map((f) => f.type)),
    );
    child.stdin!.end(encodeKill());
    await closed;
    assert.deepEqual(frames, ["ready", "exit", "done"]);
  });
});

describe("agent: privileges", () => {
  it("runs code and writes files as the requested uid/gid with no supplementary groups", async () => {
    const r = await runJailed(
      sh(
        "id -u; id -g; id -G; stat -c '%u:%g %a' /tmp/sub/f /tmp/sub; cat /etc/shadow >/dev/null 2>&1 || echo denied",
        {
          uid: 65534,
          gid: 65534,
          files: [{ path: "/tmp/sub/f", mode: 0o600, content: Buffer.from("x") }],
          returnFiles: ["/etc/shadow", "/tmp/sub/f"],
        },
      ),
      { realRoot: true },
    );
    assert.equal(r.failure, null);
    assert.equal(r.text.stdout, "65534\n65534\n65534\n65534:65534 600\n65534:65534 755\ndenied\n");
    // Return files are read after the drop too: root-only files stay unreadable.
    assert.deepEqual(
      r.files.map((f) => f.status),
      ["error", "ok"],
    );
  });

  it("refuses to run outside a pid namespace (kill(-1) would reach the host)", () => {
    // Safe to run directly: the agent checks before sending READY or reading anything.
    const r = spawnSync(AGENT, [], { input: "", encoding: "utf8" });
    assert.equal(r.status, 2);
    assert.equal(r.stdout, "");
    assert.match(r.stderr, /refusing to run/);
  });
});
