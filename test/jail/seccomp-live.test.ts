import { skipOutsideCi } from "../helpers/ci.js";
/**
 * The seccomp program installed by real bubblewrap: probes inside the jail try each refused call
 * and report errno; ordinary programs must still work under the same filter.
 *
 * bwrap already drops capabilities, so the kernel alone would answer many of these calls with
 * EPERM. The first probe therefore runs under the same policy with marker errnos (4000+) that no
 * kernel returns: seeing the marker proves the filter, not the missing capability, refused it.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import {
  DEFAULT_SECCOMP_POLICY,
  ENOSYS,
  EPERM,
  TIOCLINUX,
  TIOCSTI,
  renderSeccompFilter,
  type SeccompPolicy,
} from "../../src/jail/seccomp.js";
import { X86_64_SYSCALLS as NR } from "../../src/jail/syscalls.js";
import { PYTHON311, hostCanJail, runJailed } from "./jail-run.js";

const skip = skipOutsideCi(hostCanJail());
const DENY_MARK = 4000;
const ARG_MARK = 4001;
const X32_MARK = 4002;
const NARROW_MARK = 4003;
const MARKED: SeccompPolicy = {
  deny: DEFAULT_SECCOMP_POLICY.deny.map((d) => ({ ...d, errno: DENY_MARK })),
  argumentRules: DEFAULT_SECCOMP_POLICY.argumentRules.map((r) =>
    r.kind === "allow-only-equal"
      ? { ...r, errno: ARG_MARK, narrowed: r.narrowed?.map((n) => ({ ...n, errno: NARROW_MARK })) }
      : { ...r, errno: ARG_MARK },
  ),
  x32Errno: X32_MARK,
};

/** Calls libc syscall() for each [label, nr, ...args] and prints {label: {ret, errno}}. */
const PROBE = `
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.syscall.argtypes = [ctypes.c_long] * 7
out = {}
for label, nr, *args in json.loads(sys.argv[1]):
    args = (args + [0] * 6)[:6]
    ctypes.set_errno(0)
    r = libc.syscall(nr, *args)
    e = ctypes.get_errno() if r == -1 else 0
    if label.startswith("clone"):
        if r == 0:
            os._exit(0)  # the child of a raw clone leaves at once
        if r > 0:
            os.waitpid(r, 0)
    if label.startswith("socket") and r >= 0:
        os.close(r)
        r = 0
    out[label] = {"ret": r, "errno": e}
print(json.dumps(out))
`;

type Probe = [label: string, nr: number, ...args: number[]];
type ProbeResult = Record<string, { ret: number; errno: number }>;

const SIGCHLD = 17;
const CLONE_NEWUSER = 0x10000000;
const CLONE_NEWNET = 0x40000000;
const ADDR_NO_RANDOMIZE = 0x0040000;
const SOCK_STREAM = 1;
const SOCK_DGRAM = 2;
const SOCK_SEQPACKET = 5;
const AF_NETLINK = 16;
const AF_PACKET = 17;
const AF_ALG = 38;
const AF_VSOCK = 40;
const NETLINK_ROUTE = 0;
const NETLINK_KOBJECT_UEVENT = 15;
const EFAULT = 14;
const EPROTONOSUPPORT = 93;
const EAFNOSUPPORT = 97;

const PROBES: Probe[] = [
  ...DEFAULT_SECCOMP_POLICY.deny.map((d): Probe => [d.syscall, NR[d.syscall]]),
  ["clone-newuser", NR.clone, CLONE_NEWUSER | SIGCHLD],
  ["clone-newnet-highbits", NR.clone, 2 ** 32 + CLONE_NEWNET + SIGCHLD],
  ["clone-plain", NR.clone, SIGCHLD],
  ["ioctl-tiocsti", NR.ioctl, 0, TIOCSTI, 0],
  ["ioctl-tiocsti-highbits", NR.ioctl, 0, 2 ** 32 + TIOCSTI, 0],
  ["ioctl-tioclinux", NR.ioctl, 0, TIOCLINUX, 0],
  ["ioctl-tcgets", NR.ioctl, 0, 0x5401, 0],
  ["personality-query", NR.personality, 0xffffffff],
  ["personality-no-aslr", NR.personality, ADDR_NO_RANDOMIZE],
  ["x32-getpid", 0x40000000 + NR.getpid],
  ["getpid", NR.getpid],
  ["socket-vsock", NR.socket, AF_VSOCK, SOCK_STREAM, 0],
  ["socket-vsock-highbits", NR.socket, 2 ** 32 + AF_VSOCK, SOCK_STREAM, 0],
  ["socket-packet", NR.socket, AF_PACKET, SOCK_DGRAM, 0],
  ["socket-alg", NR.socket, AF_ALG, SOCK_SEQPACKET, 0],
  ["socketpair-vsock", NR.socketpair, AF_VSOCK, SOCK_STREAM, 0, 0],
  ["socket-netlink-uevent", NR.socket, AF_NETLINK, SOCK_DGRAM, NETLINK_KOBJECT_UEVENT],
  ["socket-netlink-route", NR.socket, AF_NETLINK, SOCK_DGRAM, NETLINK_ROUTE],
  ["socket-unix", NR.socket, 1, SOCK_STREAM, 0],
  ["socket-inet6", NR.socket, 10, SOCK_DGRAM, 0],
  ["socketpair-unix-nobuffer", NR.socketpair, 1, SOCK_STREAM, 0, 0],
  // Allowed on purpose (ALLOWED_ON_PURPOSE): the kernel answers. The ABI version; a no-op seal.
  ["landlock-abi", NR.landlock_create_ruleset, 0, 0, 1],
  ["mseal-nothing", NR.mseal, 0, 0, 0],
];
const EOPNOTSUPP = 95;

async function probe(seccomp: Buffer): Promise<ProbeResult> {
  const r = await runJailed({
    argv: [PYTHON311, "-c", PROBE, JSON.stringify(PROBES)],
    seccomp,
    killAfterMs: 30_000,
  });
  assert.equal(r.code, 0, `probe failed: ${r.stderr}`);
  return JSON.parse(r.stdout) as ProbeResult;
}

test(
  "the filter itself refuses every denied call and argument rule (marker errnos)",
  { skip },
  async () => {
    const out = await probe(renderSeccompFilter(MARKED));
    for (const d of DEFAULT_SECCOMP_POLICY.deny) {
      assert.deepEqual(out[d.syscall], { ret: -1, errno: DENY_MARK }, d.syscall);
    }
    for (const label of [
      "clone-newuser",
      "clone-newnet-highbits",
      "ioctl-tiocsti",
      "ioctl-tiocsti-highbits",
      "ioctl-tioclinux",
      "personality-no-aslr",
    ]) {
      assert.deepEqual(out[label], { ret: -1, errno: ARG_MARK }, label);
    }
    assert.deepEqual(out["x32-getpid"], { ret: -1, errno: X32_MARK });
    for (const label of [
      "socket-vsock",
      "socket-vsock-highbits",
      "socket-packet",
      "socket-alg",
      "socketpair-vsock",
    ]) {
      assert.deepEqual(out[label], { ret: -1, errno: ARG_MARK }, label);
    }
    assert.deepEqual(out["socket-netlink-uevent"], { ret: -1, errno: NARROW_MARK });
    // Not refused by the filter: the kernel answers.
    for (const label of ["socket-netlink-route", "socket-unix", "socket-inet6"]) {
      assert.deepEqual(out[label], { ret: 0, errno: 0 }, label);
    }
    assert.deepEqual(out["socketpair-unix-nobuffer"], { ret: -1, errno: EFAULT });
    // Allowed on purpose: the ABI version (or Landlock off in this kernel), a no-op seal (or a
    // kernel before 6.10); never a marker.
    const landlock = out["landlock-abi"];
    assert.ok(
      (landlock?.ret ?? 0) >= 1 || landlock?.errno === EOPNOTSUPP,
      JSON.stringify(landlock),
    );
    const mseal = out["mseal-nothing"];
    assert.ok(mseal?.ret === 0 || mseal?.errno === ENOSYS, JSON.stringify(mseal));
    assert.ok((out["clone-plain"]?.ret ?? 0) > 0, "plain clone (fork) works");
    assert.deepEqual(out["ioctl-tcgets"], { ret: -1, errno: 25 /* ENOTTY: stdin is a pipe */ });
    assert.equal(out["personality-query"]?.errno, 0);
    assert.ok((out["getpid"]?.ret ?? 0) > 0);
  },
);

test("the default policy answers EPERM, and ENOSYS for clone3 and io_uring", { skip }, async () => {
  const out = await probe(renderSeccompFilter());
  const enosys = new Set(["clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"]);
  for (const d of DEFAULT_SECCOMP_POLICY.deny) {
    const want = enosys.has(d.syscall) ? ENOSYS : EPERM;
    assert.deepEqual(out[d.syscall], { ret: -1, errno: want }, d.syscall);
  }
  for (const label of [
    "clone-newuser",
    "clone-newnet-highbits",
    "ioctl-tiocsti",
    "ioctl-tioclinux",
  ]) {
    assert.deepEqual(out[label], { ret: -1, errno: EPERM }, label);
  }
  assert.deepEqual(out["x32-getpid"], { ret: -1, errno: EPERM });
  for (const label of ["socket-vsock", "socket-packet", "socket-alg", "socketpair-vsock"]) {
    assert.deepEqual(out[label], { ret: -1, errno: EAFNOSUPPORT }, label);
  }
  assert.deepEqual(out["socket-netlink-uevent"], { ret: -1, errno: EPROTONOSUPPORT });
});

test("without the filter the same probe gets through (the probe can tell)", { skip }, async () => {
  const wanted = new Set(["clone-newuser", "socket-netlink-uevent", "memfd_secret"]);
  const r = await runJailed({
    argv: [PYTHON311, "-c", PROBE, JSON.stringify(PROBES.filter((p) => wanted.has(p[0])))],
    killAfterMs: 30_000,
  });
  assert.equal(r.code, 0, r.stderr);
  const out = JSON.parse(r.stdout) as ProbeResult;
  assert.ok(
    (out["clone-newuser"]?.ret ?? -1) > 0,
    "an unfiltered jail can create a user namespace",
  );
  assert.deepEqual(
    out["socket-netlink-uevent"],
    { ret: 0, errno: 0 },
    "an unfiltered jail can open a uevent netlink socket",
  );
  // Secret memory where the kernel has it (an fd), else ENOSYS: never the filter's EPERM.
  const secret = out["memfd_secret"];
  assert.ok((secret?.ret ?? -1) >= 0 || secret?.errno === ENOSYS, JSON.stringify(secret));
});

const INT80 = `
#include <stdio.h>
int main(void) {
  long ret;
  printf("before\\n");
  fflush(stdout);
  __asm__ volatile ("int $0x80" : "=a"(ret) : "a"(20L) : "memory"); /* i386 getpid */
  printf("after %ld\\n", ret);
  return 0;
}
`;

test(
  "a 32-bit syscall (int 0x80) kills the process",
  { skip: skip ?? skipOutsideCi(existsSync("/usr/bin/gcc") ? undefined : "gcc missing") },
  async (t) => {
    const dir = mkdtempSync(join(tmpdir(), "jailtest-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, "int80.c"), INT80);
    execFileSync("/usr/bin/gcc", ["-O0", "-o", join(dir, "int80"), join(dir, "int80.c")]);
    const bind = ["--ro-bind", dir, "/tmp/probe"];
    const control = await runJailed({
      argv: ["/tmp/probe/int80"],
      bwrapExtra: bind,
      killAfterMs: 30_000,
    });
    assert.match(control.stdout, /^before\n/, control.stderr);
    const r = await runJailed({
      argv: ["/tmp/probe/int80"],
      bwrapExtra: bind,
      seccomp: renderSeccompFilter(),
      killAfterMs: 30_000,
    });
    assert.match(r.stdout, /^before\n$/);
    if (/after \d+/.test(control.stdout)) {
      assert.equal(r.code, 128 + 31, `SIGSYS via bwrap's exit status: ${r.code} ${r.stderr}`);
      return;
    }
    // A host kernel without IA32 emulation (this CI host's 6.18 kernel, 2026-12-02) has no 32-bit
    // entry: int 0x80 faults (SIGSEGV) before any syscall, with the filter as without it, so
    // there is no call for the filter to see. Its i386 rule is proven
    // live in the microVM guest, whose kernel has the entry (test/microvm/guest-security.test.ts
    // SEC-VM-IA32), and against the program in test/jail/seccomp-program.unit.test.ts.
    assert.equal(control.code, 128 + 11, `unfiltered: SIGSEGV, not a call: ${control.code}`);
    assert.equal(r.code, 128 + 11, `filtered: the same fault: ${r.code} ${r.stderr}`);
  },
);

const WORKLOADS: [string, string[], RegExp][] = [
  ["python3.11 -c", [PYTHON311, "-c", "print(sum(range(101)))"], /^5050\n$/],
  [
    "python threads and subprocess",
    [
      PYTHON311,
      "-c",
      [
        "import threading, subprocess, concurrent.futures as cf",
        "with cf.ThreadPoolExecutor(8) as ex: r = sum(ex.map(lambda i: i * i, range(100)))",
        "out = subprocess.run(['/bin/echo', 'sub'], capture_output=True, text=True).stdout",
        "print(r, out.strip(), threading.active_count())",
      ].join("\n"),
    ],
    /^328350 sub 1\n$/,
  ],
  [
    "python multiprocessing",
    [
      PYTHON311,
      "-c",
      "import multiprocessing as mp\nif __name__ == '__main__':\n  with mp.get_context('fork').Pool(2) as p: print(sum(p.map(abs, range(-5, 5))))",
    ],
    /^25\n$/,
  ],
  ["node -e", [process.execPath, "-e", "console.log(6 * 7)"], /^42\n$/],
  [
    "node fs, worker_threads and child_process",
    [
      process.execPath,
      "-e",
      [
        "const { Worker } = require('node:worker_threads');",
        "const cp = require('node:child_process');",
        "const fs = require('node:fs');",
        "(async () => {",
        "  const host = (await fs.promises.readFile('/etc/hostname', 'utf8')).length > 0;",
        "  const w = await new Promise((res, rej) => {",
        "    const wk = new Worker('require(\"node:worker_threads\").parentPort.postMessage(21 * 2)', { eval: true });",
        "    wk.on('message', res); wk.on('error', rej);",
        "  });",
        "  const sync = cp.execFileSync('/bin/echo', ['sync']).toString().trim();",
        "  const async_ = await new Promise((res) => cp.exec('echo a | tr a b', (e, out) => res(out.trim())));",
        "  console.log(host, w, sync, async_);",
        "  process.exit(0);",
        "})();",
      ].join("\n"),
    ],
    /^true 42 sync b\n$/,
  ],
  [
    "bash pipes, subshells, substitution, background jobs",
    [
      "/bin/bash",
      "-c",
      "x=$(echo abc | tr a-c x-z | rev); (echo sub-$x) | cat; { sleep 0.01 & wait; }; echo done",
    ],
    /^sub-zyx\ndone\n$/,
  ],
];

WORKLOADS.push([
  "python sockets: unix pair, inet and inet6 on loopback, route netlink, getaddrinfo",
  [
    PYTHON311,
    "-c",
    [
      "import socket",
      "a, b = socket.socketpair(); a.send(b'p'); r = b.recv(1)",
      "for fam, host in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::1')):",
      "    s = socket.socket(fam, socket.SOCK_DGRAM); s.bind((host, 0))",
      "    c = socket.socket(fam, socket.SOCK_DGRAM); c.sendto(b'u', s.getsockname()); r += s.recv(1)",
      "names = [n for _, n in socket.if_nameindex()]",
      "ai = socket.getaddrinfo('localhost', 80, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]",
      "print(r.decode(), names, ai)",
    ].join("\n"),
  ],
  /^puu \['lo'\] 127\.0\.0\.1\n$/,
]);

const PYTHON312 = "/root/.pyenv/versions/3.12.1/bin/python3.12";
if (existsSync(PYTHON312)) {
  WORKLOADS.push([
    "python3.12 threads",
    [
      PYTHON312,
      "-c",
      "import threading as t\nth = [t.Thread(target=int) for _ in range(4)]\n[x.start() for x in th]\n[x.join() for x in th]\nprint('ok')",
    ],
    /^ok\n$/,
  ]);
}

for (const [label, argv, want] of WORKLOADS) {
  test(`ordinary programs still work under the filter: ${label}`, { skip }, async () => {
    const r = await runJailed({ argv, seccomp: renderSeccompFilter(), killAfterMs: 60_000 });
    assert.equal(r.code, 0, `exit ${r.code} ${r.signal}: ${r.stderr}`);
    assert.match(r.stdout, want);
  });
}
