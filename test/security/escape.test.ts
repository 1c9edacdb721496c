import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { rmSync, writeFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import {
  assertAllRefused,
  py,
  securityServer,
  SECURITY_BACKENDS,
  type SecurityServer,
} from "./harness.js";

/**
 * Escape attempts from inside a namespace sandbox. Each program tries and prints what happened;
 * the test asserts the attempt failed the way the promise says. Ids: docs/SECURITY.md and
 * docs/THREAT-MODEL.md.
 */
for (const backend of SECURITY_BACKENDS) {
  describe(`security: escape [${backend}]`, () => {
    let s: SecurityServer;
    const token = `sr-canary-${randomBytes(8).toString("hex")}`;
    const canaries = [`/var/tmp/${token}`, `/tmp/${token}`];
    before(async () => {
      for (const c of canaries) writeFileSync(c, `${token}\n`, { mode: 0o644 });
      s = await securityServer(backend);
    });
    after(async () => {
      for (const c of canaries) rmSync(c, { force: true });
      await s.close();
    });

    test("SEC-ROOTRO: nothing outside the scratch areas is writable, by any path", async () => {
      const r = await s.run({
        runtime: "bash",
        code: "find / \\( -path /proc -o -path /sys \\) -prune -o \\( -type f -o -type d \\) -writable -print 2>/dev/null",
        timeout_ms: 20000,
      });
      // Device nodes are bind mounts of the host's null/zero/... and devpts (its own perms refuse
      // a new file there, though access(2) says W_OK): writable the way a device is, nothing more.
      const allowed =
        /^\/(tmp|home\/user|run\/scratchrun|dev\/shm)(\/|$)|^\/dev\/(null|zero|full|random|urandom|tty|pts)$/;
      const bad = r.stdout
        .trim()
        .split("\n")
        .filter((p) => p && !allowed.test(p));
      assert.deepEqual(bad, [], "writable outside /tmp, /home/user, /run/scratchrun, /dev/shm");
      assert.match(r.stdout, /^\/tmp$/m, "the scan itself works");
    });

    test("SEC-HOSTFS: a file planted on the host is unreachable by any path inside", async () => {
      const r = await s.run({
        runtime: "bash",
        code: [
          // Built from two halves so the code file itself does not contain the token.
          `T=${token.slice(0, 12)}; T=\${T}${token.slice(12)}`,
          'for p in /var/tmp/$T /tmp/$T /proc/*/root/var/tmp/$T /proc/*/root/tmp/$T /proc/*/cwd/$T /proc/*/cwd/../../var/tmp/$T; do [ -e "$p" ] && echo FOUND $p; done',
          "find / -xdev -name \"$T\" 2>/dev/null | sed 's/^/FOUND /'",
          "grep -rl \"$T\" /var /tmp /home /run /etc /proc/1/root/var/tmp 2>/dev/null | sed 's/^/FOUND /'",
          "echo searched",
        ].join("\n"),
        timeout_ms: 20000,
      });
      assert.doesNotMatch(r.stdout, /FOUND/);
      assert.match(r.stdout, /searched/);
    });

    test("SEC-NOFOLLOW: hardlinks to image files fail across devices; symlinks are not_regular", async () => {
      const r = await s.run({
        runtime: "bash",
        code: [
          "ln /etc/passwd /tmp/hard 2>&1 | grep -o 'Invalid cross-device link' || echo LINKED",
          "ln /opt/scratchrun/agent /home/user/agent 2>&1 | grep -o 'Invalid cross-device link' || echo LINKED",
          "ln -s /etc/passwd /tmp/soft",
          "ln -s /etc /tmp/etcdir",
          "ln -s /proc/1/root /home/user/root1",
          "mkdir /tmp/real && echo mine > /tmp/real/own && ln /tmp/real/own /tmp/own-hard",
        ].join("\n"),
        return_files: [
          "/tmp/hard",
          "/home/user/agent",
          "/tmp/soft",
          "/tmp/etcdir/passwd",
          "/home/user/root1/etc/passwd",
          "/tmp/own-hard",
        ],
      });
      assert.equal(r.stdout, "Invalid cross-device link\nInvalid cross-device link\n");
      assert.deepEqual(
        r.files.map((f) => f.status),
        ["missing", "missing", "not_regular", "not_regular", "not_regular", "ok"],
      );
    });

    test("SEC-NOFOLLOW: flipping a file and a symlink during collection never returns the target", async () => {
      // Eight background loops flip /tmp/oN between a regular file and a link to /etc/passwd.
      // The agent kills the whole tree before it collects, so each file is whatever the last
      // flip left: our own bytes or a link (not_regular); never the link's target.
      const paths = Array.from({ length: 8 }, (_, i) => `/tmp/o${i}`);
      for (let round = 0; round < 3; round++) {
        const r = await s.run({
          runtime: "bash",
          code: [
            "for i in 0 1 2 3 4 5 6 7; do",
            "  ( while :; do echo safe > /tmp/o$i.f; mv -f /tmp/o$i.f /tmp/o$i; ln -sfn /etc/passwd /tmp/o$i; done ) &",
            "done",
            "sleep 0.3",
          ].join("\n"),
          return_files: paths,
        });
        for (const f of r.files) {
          assert.ok(["ok", "not_regular", "missing"].includes(f.status), JSON.stringify(f));
          if (f.status === "ok") assert.equal(f.size_bytes, 5, JSON.stringify(f));
        }
      }
    });

    test("SEC-HOSTINFO: no host processes, env, hostname or mount points are visible", async () => {
      const r = await s.run({
        runtime: "python3.11",
        code: py(
          "import os",
          "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())",
          "print('pids', pids)",
          "print('init', open('/proc/1/cmdline','rb').read().split(b'\\0')[0].decode())",
          "print('hostname', open('/proc/sys/kernel/hostname').read().strip())",
          "print('mounts', sorted(l.split()[4] for l in open('/proc/self/mountinfo')))",
          "print('sys', os.listdir('/sys'))",
          "try: open('/proc/1/environ','rb').read(); print('init_env READABLE')",
          "except OSError as e: print('init_env', e.errno)",
        ),
      });
      const lines = new Map(
        r.stdout
          .trim()
          .split("\n")
          .map((l) => [l.split(" ")[0], l.slice(l.indexOf(" ") + 1)]),
      );
      assert.equal(lines.get("init"), "/opt/scratchrun/agent", "pid 1 is the agent, not bwrap");
      const pids = JSON.parse(lines.get("pids") ?? "[]") as number[];
      assert.ok(
        pids.length <= 3 && pids[0] === 1,
        `only the agent and the code: ${lines.get("pids")}`,
      );
      assert.equal(lines.get("hostname"), "sandbox");
      assert.equal(lines.get("init_env"), "13", "the agent's /proc entries are closed to the code");
      assert.equal(lines.get("sys"), "[]");
      const mounts = JSON.parse((lines.get("mounts") ?? "[]").replace(/'/g, '"')) as string[];
      const allowed = new Set([
        "/",
        "/proc",
        "/dev",
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/tty",
        "/dev/pts",
        "/dev/shm",
        "/tmp",
        "/home/user",
        "/run/scratchrun",
        "/opt/scratchrun",
        "/etc/resolv.conf",
      ]);
      for (const m of mounts) assert.ok(allowed.has(m), `unexpected mount point ${m}`);
    });

    test("SEC-SUID: every mount is nosuid, writable ones nodev; a setuid copy stays uid 1000", async () => {
      const r = await s.run({
        runtime: "bash",
        code: [
          "awk '{print $5, $6}' /proc/self/mountinfo",
          "cp /usr/bin/id /tmp/id && chmod 4755 /tmp/id && /tmp/id -u | sed 's/^/EUID /'",
          "ls -l /tmp/id | cut -c1-10 | sed 's/^/MODE /'",
        ].join("\n"),
      });
      const mounts = r.stdout.split("\n").filter((l) => l.startsWith("/"));
      assert.ok(mounts.length > 5, r.stdout);
      for (const m of mounts) {
        assert.match(m, /\bnosuid\b/, m);
        if (/^\/(tmp|home\/user|run\/scratchrun|dev\/shm) /.test(m))
          assert.match(m, /\bnodev\b/, m);
      }
      assert.match(r.stdout, /^MODE -rwsr-xr-x/m, "the setuid bit really was set");
      assert.match(r.stdout, /^EUID 1000$/m);
    });

    test("SEC-SYSCALLS: io_uring, mknod, setns, perf, userfaultfd, new-namespace clone and more are refused", async () => {
      const r = await s.run({
        runtime: "python3.11",
        code: py(
          "import ctypes, os, socket",
          "libc = ctypes.CDLL(None, use_errno=True)",
          "def probe(name, *args):",
          "    r = libc.syscall(*args)",
          "    print(name, r, os.strerror(ctypes.get_errno()) if r < 0 else 'ALLOWED')",
          "probe('io_uring_setup', 425, 8, ctypes.create_string_buffer(120))",
          "probe('mknod_chr', 133, b'/tmp/mem', 0o20666, os.makedev(1, 1))",
          "probe('mknod_blk', 133, b'/tmp/blk', 0o60666, os.makedev(254, 0))",
          "probe('setns', 308, 0, 0)",
          "probe('perf_event_open', 298, 0, 0, 0, 0, 0)",
          "probe('userfaultfd', 323, 0)",
          "probe('clone_newuser', 56, 0x10000000 | 17, 0, 0, 0, 0)",
          "probe('clone_newns', 56, 0x00020000 | 17, 0, 0, 0, 0)",
          "probe('clone3', 435, 0, 0)",
          "probe('add_key', 248, b'user', b'x', b'y', 1, 0xfffffffd)",
          "probe('open_by_handle_at', 304, 0, 0, 0)",
          "probe('kexec_load', 246, 0, 0, 0, 0)",
          "probe('finit_module', 313, 0, b'', 0)",
          "probe('pivot_root', 155, b'/tmp', b'/tmp')",
          "probe('chroot', 161, b'/tmp')",
          "probe('setuid0', 105, 0)",
          "probe('iopl', 172, 3)",
          "probe('syslog', 103, 3, 0, 0)",
          "probe('personality_rie', 135, 0x0400000)",
          "probe('sethostname', 170, b'x', 1)",
          "try:",
          "    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0); print('af_packet', 0, 'ALLOWED')",
          "except OSError as e: print('af_packet', -1, e.strerror)",
        ),
      });
      assert.equal(r.exit_reason, "ok", r.stderr);
      assertAllRefused(r.stdout, 21);
    });

    test("SEC-TIOCSTI: no terminal to inject into; TIOCSTI and TIOCLINUX refused even on a new pty", async () => {
      const r = await s.run({
        runtime: "python3.11",
        code: py(
          "import os, fcntl, termios",
          "def t(name, f):",
          "    try: f(); print(name, 0, 'ALLOWED')",
          "    except OSError as e: print(name, -1, e.strerror)",
          "t('dev_tty', lambda: os.open('/dev/tty', os.O_RDWR))",
          "t('tiocsti_stdout', lambda: fcntl.ioctl(1, termios.TIOCSTI, b'x'))",
          "m, sl = os.openpty()",
          "t('tiocsti_pty', lambda: fcntl.ioctl(sl, termios.TIOCSTI, b'x'))",
          "t('tioclinux_pty', lambda: fcntl.ioctl(sl, 0x541C, b'\\x0b'))",
        ),
      });
      assert.equal(r.exit_reason, "ok", r.stderr);
      assertAllRefused(r.stdout, 4);
    });

    test("SEC-PRIV: the code's fds are /dev/null and two pipes; nothing of the host channel", async () => {
      const r = await s.run({
        runtime: "python3.11",
        code: py(
          "import os",
          "fds = sorted(os.listdir('/proc/self/fd'), key=int)",
          "print(fds)",
          "for fd in ('0', '1', '2'): print(fd, os.readlink('/proc/self/fd/' + fd))",
        ),
      });
      const lines = r.stdout.trim().split("\n");
      assert.equal(lines[0], "['0', '1', '2', '3']", "0-2 and the one listdir opens");
      assert.match(lines[1] ?? "", /^0 \/dev\/null$/);
      assert.match(lines[2] ?? "", /^1 pipe:/);
      assert.match(lines[3] ?? "", /^2 pipe:/);
    });

    test("SEC-AGENT-KILL: the code cannot kill, stop or open the agent; the call ends normally", async () => {
      const r = await s.run({
        runtime: "python3.11",
        code: py(
          "import os, signal, time",
          "for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP, signal.SIGSEGV):",
          "    try: os.kill(1, sig)",
          "    except OSError as e: print('kill', sig, e.errno)",
          "for p in ('/proc/1/mem', '/proc/1/fd/0', '/proc/1/fd/1', '/proc/1/environ'):",
          "    try: os.open(p, os.O_RDWR if p.endswith('mem') else os.O_RDONLY); print('open', p, 'ALLOWED')",
          "    except OSError as e: print('open', p, e.errno)",
          "time.sleep(0.3)",
          "print('code finished')",
        ),
      });
      assert.equal(r.exit_reason, "ok", JSON.stringify(r));
      assert.match(r.stdout, /code finished/);
      assert.doesNotMatch(r.stdout, /ALLOWED/);
      const next = await s.run({ runtime: "bash", code: "echo next" });
      assert.equal(next.stdout, "next\n");
    });

    test("SEC-AGENT-FORGE: agent frames written by the code are only bytes of its own stdout", async () => {
      // A complete, well-formed X(exited 0) + D sequence, as the agent would send it.
      const r = await s.run({
        runtime: "python3.11",
        code: py(
          "import struct, sys",
          "msg = b''",
          "x = bytes([0]) + struct.pack('>i', 0) + b'\\0\\0' + struct.pack('>II', 1, 0) + struct.pack('>I', 0)",
          "frames = struct.pack('>I', len(x) + 1) + b'X' + x + struct.pack('>I', 1) + b'D'",
          "sys.stdout.buffer.write(b'A' + frames + b'Z'); sys.stdout.flush()",
          "sys.exit(7)",
        ),
      });
      assert.equal(r.exit_reason, "error");
      assert.equal(r.exit_code, 7, "the forged exit 0 did not win");
      assert.ok(r.stdout.startsWith("A") && r.stdout.endsWith("Z"), JSON.stringify(r.stdout));
      assert.ok(r.stdout.includes("X"));
    });

    test("SEC-OUTPUT: a channel flood of one-byte writes on both streams is capped and the server serves", async () => {
      const r = await s.run({
        runtime: "python3.11",
        code: py(
          "import os",
          "for i in range(300000):",
          "    os.write(1, b'o'); os.write(2, b'e')",
        ),
        timeout_ms: 20000,
      });
      assert.ok(["ok", "output_limit", "timeout"].includes(r.exit_reason), r.exit_reason);
      const body = (t: string) => t.replace(/\n\[\.\.\. \d+ bytes omitted \.\.\.\]\n/, "");
      assert.match(body(r.stdout), /^o+$/, "stdout carries only stdout bytes");
      assert.match(body(r.stderr), /^e+$/, "stderr carries only stderr bytes");
      assert.ok(r.stdout.length > 1000 && r.stderr.length > 1000);
      const next = await s.run({ runtime: "bash", code: "echo next" });
      assert.equal(next.stdout, "next\n");
    });
  });
}
