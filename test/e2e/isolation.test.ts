import assert from "node:assert/strict";
import { createServer, type Server } from "node:net";
import { after, before, describe, test } from "node:test";
import { SERVER_SECRET, TEST_BACKENDS } from "../helpers/backends.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import { startServer, type McpHarness } from "../helpers/mcp-client.js";
import { PY } from "../helpers/pythons.js";

/** Isolation promises, proven from inside: each program tries the escape and reports. */
for (const backend of TEST_BACKENDS) {
  describe(`isolation [${backend}]`, () => {
    let h: McpHarness;
    let base: HostSnapshot;
    let listener: Server;
    let port = 0;
    before(async () => {
      base = snapshot();
      h = await startServer({
        SCRATCHRUN_ISOLATION: backend,
        SCRATCHRUN_TEST_SECRET: SERVER_SECRET,
      });
      listener = createServer((s) => s.end("host-listener\n"));
      await new Promise<void>((r) => listener.listen(0, "127.0.0.1", r));
      port = (listener.address() as { port: number }).port;
    });
    after(async () => {
      listener.close();
      await h.close();
      await assertNoLeaks(base);
    });

    test("nothing persists: a marker written by one call is gone in the next", async () => {
      const first = await h.exec({
        runtime: "bash",
        code: "echo m > /tmp/marker; echo m > ~/marker; echo ok",
      });
      assert.equal(first.s.stdout, "ok\n");
      const second = await h.exec({
        runtime: "bash",
        code: "ls -A /tmp ~; cat /tmp/marker ~/marker 2>&1 || true",
      });
      assert.doesNotMatch(second.s.stdout, /^m$/m);
      assert.match(second.s.stdout, /No such file/);
    });

    test("the server's secrets are not readable through /proc", async () => {
      const { s } = await h.exec({
        runtime: PY,
        code: [
          "import os, glob",
          "hits = []",
          "for p in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline'):",
          "    try:",
          "        data = open(p, 'rb').read()",
          "    except OSError:",
          "        continue",
          `    if b'${SERVER_SECRET}' in data or b'SCRATCHRUN_TEST_SECRET' in data: hits.append(p)`,
          "print('pids', sorted(int(x) for x in os.listdir('/proc') if x.isdigit()))",
          "print('hits', hits)",
        ].join("\n"),
      });
      assert.equal(s.exit_reason, "ok", s.stderr);
      assert.match(s.stdout, /hits \[\]/);
      assert.doesNotMatch(s.stdout + s.stderr, new RegExp(SERVER_SECRET));
    });

    test("the code runs as an unprivileged user with only fds 0-2 and no capabilities", async () => {
      const { s } = await h.exec({
        runtime: "bash",
        code: "id -u; ls /proc/self/fd | sort -n | tr '\\n' ' '; echo; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status",
      });
      const [uid, fds, ...status] = s.stdout.trim().split("\n");
      assert.equal(uid, "1000");
      assert.equal(fds?.trim(), "0 1 2 3", "only 0-2 plus the fd ls itself opens");
      assert.match(status.join("\n"), /CapEff:\s+0000000000000000/);
      assert.match(status.join("\n"), /NoNewPrivs:\s+1/);
    });

    test("H22: a minimal /dev, an empty capability bounding set; microVM: the code first for the OOM killer", async () => {
      const { s } = await h.exec({
        runtime: "bash",
        code: [
          "ls -A /dev | tr '\\n' ' '; echo",
          "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status | tr -s '\\t' ' '",
          'echo "code $(cat /proc/self/oom_score_adj) agent $(cat /proc/$PPID/oom_score_adj)"',
          "(echo 0 >/proc/self/oom_score_adj) 2>/dev/null && echo lowered || echo kept",
        ].join("\n"),
      });
      assert.equal(s.exit_reason, "ok", s.stderr);
      const [dev, ...rest] = s.stdout.trim().split("\n");
      // One comparison, so a failure shows every part that differs.
      assert.deepEqual(
        {
          dev: dev?.trim(),
          caps: rest.slice(0, 5),
          oom: [rest[5]?.replace(/^code (-?\d+) agent \1$/, "same"), rest[6]],
        },
        {
          // What bwrap --dev gives (src/backends/namespace/bwrap-args.ts); guest/init the same.
          dev: "core fd full null ptmx pts random shm stderr stdin stdout tty urandom zero",
          caps: ["Inh", "Prm", "Eff", "Bnd", "Amb"].map((c) => `Cap${c}: 0000000000000000`),
          // microVM: the agent ($PPID) is never the OOM killer's choice, the code always first and
          // unable to lower itself. The namespace backend's jail is one memory cgroup whose OOM
          // ends it whole, agent included (memory.oom.group), and the host reports it: its
          // scores are whatever the server's were, the same for both.
          oom: backend === "microvm" ? ["code 1000 agent -1000", "kept"] : ["same", rest[6]],
        },
      );
    });

    test("the root filesystem is read-only", async () => {
      const { s } = await h.exec({
        runtime: "bash",
        code: "for f in /usr/bin/x /etc/x /x /opt/scratchrun/agent; do (echo > $f) 2>&1 | grep -o 'Read-only file system\\|Permission denied' || echo WROTE $f; done",
      });
      assert.doesNotMatch(s.stdout, /WROTE/);
    });

    test("no network: the host's loopback listener is unreachable", async () => {
      const { s } = await h.exec({
        runtime: PY,
        network: "none",
        code: [
          "import socket, os",
          "print(sorted(os.listdir('/sys/class/net')) if os.path.exists('/sys/class/net') else 'no-sys')",
          "try:",
          `    socket.create_connection(('127.0.0.1', ${port}), timeout=2).recv(100)`,
          "    print('CONNECTED')",
          "except OSError as e:",
          "    print('refused', e.errno)",
        ].join("\n"),
      });
      assert.equal(s.exit_reason, "ok", s.stderr);
      assert.doesNotMatch(s.stdout, /CONNECTED/);
      assert.match(s.stdout, /refused/);
    });

    test("mount, unshare and ptrace are refused by the jail", async () => {
      const { s } = await h.exec({
        runtime: PY,
        code: [
          "import ctypes, os",
          "libc = ctypes.CDLL(None, use_errno=True)",
          "def probe(name, *args):",
          "    r = libc.syscall(*args)",
          "    print(name, r, os.strerror(ctypes.get_errno()) if r < 0 else 'ALLOWED')",
          "probe('unshare', 272, 0x10000000)",
          "probe('mount', 165, b'none', b'/tmp', b'tmpfs', 0, None)",
          // Made so they succeed without the filter: attach to its own child (pid 1 is root on a
          // microVM, EPERM anyway), and the session keyring (keyctl(0, 0, 0) is EINVAL anyway).
          "child = os.fork()",
          "if child == 0: os.pause()",
          "probe('ptrace', 101, 16, child, 0, 0)",
          "os.kill(child, 9); os.waitpid(child, 0)",
          "probe('bpf', 321, 0, 0, 0)",
          "probe('keyctl', 250, 0, ctypes.c_long(-3), 1)",
        ].join("\n"),
      });
      assert.equal(s.exit_reason, "ok", s.stderr);
      assert.doesNotMatch(s.stdout, /ALLOWED/);
      assert.equal(s.stdout.trim().split("\n").length, 5);
    });

    test("two calls at once do not see each other's files or processes", async () => {
      const code = (tag: string) =>
        `echo ${tag} > /tmp/who; sleep 2 & sleep 0.7; cat /tmp/who; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -c '^sleep$' || true`;
      const [a, b] = await Promise.all([
        h.exec({ runtime: "bash", code: code("A") }),
        h.exec({ runtime: "bash", code: code("B") }),
      ]);
      assert.equal(a.s.stdout, "A\n1\n", "sees only its own file and its own sleep");
      assert.equal(b.s.stdout, "B\n1\n");
    });
  });
}
