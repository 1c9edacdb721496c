/**
 * The rendered BPF program, checked two ways: its shape, and its behaviour under an independent
 * classic-BPF interpreter compared with a reference model of the policy written here.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import {
  ALLOWED_ON_PURPOSE,
  AF_NETLINK,
  AUDIT_ARCH_X86_64,
  CLONE_NEW_FLAGS,
  DEFAULT_SECCOMP_POLICY,
  EAFNOSUPPORT,
  ENOSYS,
  EPERM,
  EPROTONOSUPPORT,
  NETLINK_ROUTE,
  PERSONALITY_ALLOWED,
  SECCOMP_RET_ALLOW,
  SECCOMP_RET_ERRNO,
  SECCOMP_RET_KILL_PROCESS,
  SOCKET_FAMILIES,
  TIOCLINUX,
  TIOCSTI,
  compileSeccompPolicy,
  describeSeccompPolicy,
  renderSeccompFilter,
  validateSeccompPolicy,
  type SeccompPolicy,
} from "../../src/jail/seccomp.js";
import { X86_64_SYSCALLS, type SyscallName } from "../../src/jail/syscalls.js";

interface Call {
  nr: number;
  arch?: number;
  args?: bigint[];
}

/**
 * A classic BPF interpreter for seccomp_data, reading the serialised bytes. `loads` collects the
 * seccomp_data offsets the program read.
 */
function runFilter(
  prog: Buffer,
  call: Call,
  loads?: Set<number>,
  stats?: { steps: number },
): number {
  assert.equal(prog.length % 8, 0);
  const n = prog.length / 8;
  const args = call.args ?? [];
  const word = (off: number): number => {
    loads?.add(off);
    if (off === 0) return call.nr >>> 0;
    if (off === 4) return (call.arch ?? AUDIT_ARCH_X86_64) >>> 0;
    assert.ok(off >= 16 && off < 64 && off % 4 === 0, `load offset ${off}`);
    const arg = BigInt.asUintN(64, args[(off - 16) >> 3] ?? 0n);
    return Number(off % 8 === 0 ? arg & 0xffffffffn : arg >> 32n);
  };
  let a = 0;
  let pc = 0;
  for (let steps = 0; steps <= n; steps++) {
    assert.ok(pc < n, `pc ${pc} ran off the end`);
    if (stats) stats.steps = steps + 1;
    const code = prog.readUInt16LE(pc * 8);
    const jt = prog.readUInt8(pc * 8 + 2);
    const jf = prog.readUInt8(pc * 8 + 3);
    const k = prog.readUInt32LE(pc * 8 + 4);
    switch (code) {
      case 0x20:
        a = word(k);
        pc++;
        break;
      case 0x15:
        pc += 1 + (a === k ? jt : jf);
        break;
      case 0x35:
        pc += 1 + (a >= k ? jt : jf);
        break;
      case 0x45:
        pc += 1 + ((a & k) >>> 0 !== 0 ? jt : jf);
        break;
      case 0x06:
        return k;
      default:
        assert.fail(`unexpected opcode 0x${code.toString(16)} at ${pc}`);
    }
  }
  assert.fail("program did not terminate");
}

const errno = (e: number) => (SECCOMP_RET_ERRNO | e) >>> 0;
const ALLOW = SECCOMP_RET_ALLOW;
const NR = X86_64_SYSCALLS;
const CLONE_MASK = 0x7e020000;

/** The policy restated independently of the renderer: what each call must get. */
function expected(call: Call): number {
  const arch = call.arch ?? AUDIT_ARCH_X86_64;
  if (arch >>> 0 !== AUDIT_ARCH_X86_64) return SECCOMP_RET_KILL_PROCESS;
  const nr = call.nr >>> 0;
  if (nr >= 0x40000000) return errno(EPERM);
  const low = (i: number) => Number(BigInt.asUintN(64, call.args?.[i] ?? 0n) & 0xffffffffn);
  const denied: Partial<Record<number, number>> = {};
  for (const d of DEFAULT_SECCOMP_POLICY.deny) denied[NR[d.syscall]] = d.errno;
  if (denied[nr] !== undefined) return errno(denied[nr]);
  if (nr === NR.clone) return (low(0) & CLONE_MASK) >>> 0 !== 0 ? errno(EPERM) : ALLOW;
  if (nr === NR.ioctl) return low(1) === 0x5412 || low(1) === 0x541c ? errno(EPERM) : ALLOW;
  if (nr === NR.personality) {
    return [0, 8, 0x20000, 0x20008, 0xffffffff].includes(low(0)) ? ALLOW : errno(EPERM);
  }
  if (nr === NR.socket || nr === NR.socketpair) {
    // unix, inet, inet6; netlink with protocol NETLINK_ROUTE (0) only.
    if ([1, 2, 10].includes(low(0))) return ALLOW;
    if (low(0) === 16) return low(2) === 0 ? ALLOW : errno(EPROTONOSUPPORT);
    return errno(EAFNOSUPPORT);
  }
  return ALLOW;
}

/** Syscalls whose answer depends on an argument. */
const ARGUMENT_SYSCALLS = new Set<number>([
  NR.clone,
  NR.ioctl,
  NR.personality,
  NR.socket,
  NR.socketpair,
]);

const prog = renderSeccompFilter();

const REQUIRED_DENIALS: [SyscallName, number][] = [
  ...(
    [
      "mount",
      "umount2",
      "pivot_root",
      "chroot",
      "unshare",
      "setns",
      "move_mount",
      "open_tree",
      "fsopen",
      "fsconfig",
      "fsmount",
      "fspick",
      "mount_setattr",
      "bpf",
      "keyctl",
      "add_key",
      "request_key",
      "ptrace",
      "process_vm_readv",
      "process_vm_writev",
      "kexec_load",
      "kexec_file_load",
      "init_module",
      "finit_module",
      "delete_module",
      "open_by_handle_at",
      "name_to_handle_at",
      "perf_event_open",
      "userfaultfd",
      "acct",
      "swapon",
      "swapoff",
      "reboot",
      "syslog",
      "quotactl",
      "settimeofday",
      "clock_settime",
      "clock_adjtime",
      "adjtimex",
      "vhangup",
      "iopl",
      "ioperm",
      "lookup_dcookie",
      "fanotify_init",
      "nfsservctl",
      "uselib",
      "ustat",
      "sysfs",
      "_sysctl",
      "kcmp",
    ] as const
  ).map((n): [SyscallName, number] => [n, EPERM]),
  ["clone3", ENOSYS],
  ["io_uring_setup", ENOSYS],
  ["io_uring_enter", ENOSYS],
  ["io_uring_register", ENOSYS],
];

test("shape: loads arch first, kills foreign arches, ends with ALLOW, fits the kernel", () => {
  const ins = compileSeccompPolicy();
  assert.equal(prog.length, ins.length * 8);
  assert.deepEqual(ins[0], { code: 0x20, jt: 0, jf: 0, k: 4 });
  assert.deepEqual(ins[1], { code: 0x15, jt: 1, jf: 0, k: AUDIT_ARCH_X86_64 });
  assert.deepEqual(ins[2], { code: 0x06, jt: 0, jf: 0, k: SECCOMP_RET_KILL_PROCESS });
  assert.deepEqual(ins[3], { code: 0x20, jt: 0, jf: 0, k: 0 });
  assert.deepEqual(ins.at(-1), { code: 0x06, jt: 0, jf: 0, k: SECCOMP_RET_ALLOW });
  assert.ok(ins.length < 4096);
  ins.forEach((x, i) => {
    if ((x.code & 7) === 5) {
      assert.ok(x.jt <= 255 && x.jf <= 255, `jump range at ${i}`);
      assert.ok(i + 1 + Math.max(x.jt, x.jf) < ins.length, `jump target at ${i}`);
    }
  });
  // Byte layout: u16 code, u8 jt, u8 jf, u32 k, little-endian.
  assert.deepEqual([...prog.subarray(8, 16)], [0x15, 0x00, 0x01, 0x00, 0x3e, 0x00, 0x00, 0xc0]);
});

test("every required syscall is denied with the required errno", () => {
  const ins = compileSeccompPolicy();
  for (const [name, e] of REQUIRED_DENIALS) {
    assert.ok(
      ins.some((x) => x.code === 0x15 && x.k === NR[name]),
      `${name} compared in the program`,
    );
    assert.equal(runFilter(prog, { nr: NR[name] }), errno(e), name);
    // Arguments never rescue a denied syscall.
    assert.equal(runFilter(prog, { nr: NR[name], args: [1n, 2n, 3n, -1n, 5n, 6n] }), errno(e));
  }
});

test("every syscall number 0..1023 gets exactly what the reference model says", () => {
  for (let nr = 0; nr < 1024; nr++) {
    assert.equal(runFilter(prog, { nr }), expected({ nr }), `nr ${nr}`);
  }
  for (const nr of [NR.read, NR.write, NR.getpid, NR.fork, NR.vfork, NR.clone, NR.ioctl]) {
    assert.equal(runFilter(prog, { nr }), ALLOW, `nr ${nr} is allowed`);
  }
});

test("foreign audit arches are killed whatever the syscall", () => {
  const arches = [0x40000003 /* i386 */, 0xc00000b7 /* aarch64 */, 0, 0xffffffff, 0x4000003e];
  for (const arch of arches) {
    for (const nr of [0, 1, 11, 20, 39, 56, 120, 165, 435]) {
      assert.equal(
        runFilter(prog, { nr, arch }),
        SECCOMP_RET_KILL_PROCESS,
        `arch ${arch} nr ${nr}`,
      );
    }
  }
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 0xffffffff }), fc.nat(1023), (arch, nr) => {
      fc.pre(arch !== AUDIT_ARCH_X86_64);
      return runFilter(prog, { nr, arch }) === SECCOMP_RET_KILL_PROCESS;
    }),
  );
});

test("x32 syscall numbers are refused, including x32 forms of allowed calls", () => {
  for (const nr of [0, 1, 39, 56, 165, 435, 512, 547, 0x3fffffff, 0xbfffffff, 0xffffffff]) {
    assert.equal(runFilter(prog, { nr: (0x40000000 | nr) >>> 0 }), errno(EPERM), `nr ${nr}`);
  }
});

test("clone: threads and fork pass, any namespace flag is refused even with high bits set", () => {
  const glibcThread = 0x3d0f00n;
  const glibcFork = 0x1200011n;
  assert.equal(runFilter(prog, { nr: NR.clone, args: [glibcThread] }), ALLOW);
  assert.equal(runFilter(prog, { nr: NR.clone, args: [glibcFork] }), ALLOW);
  assert.equal(runFilter(prog, { nr: NR.clone, args: [0xffffffff00000011n] }), ALLOW);
  for (const [flag, value] of Object.entries(CLONE_NEW_FLAGS)) {
    for (const extra of [0n, glibcFork, glibcThread, 0xffffffff00000000n]) {
      const call = { nr: NR.clone, args: [BigInt(value) | extra] };
      assert.equal(runFilter(prog, call), errno(EPERM), `${flag} with ${extra}`);
    }
  }
  fc.assert(
    fc.property(fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }), (flags) => {
      const call = { nr: NR.clone, args: [flags] };
      return runFilter(prog, call) === expected(call);
    }),
    { numRuns: 2000 },
  );
});

test("ioctl: TIOCSTI and TIOCLINUX refused on any fd, high bits cannot hide them", () => {
  for (const req of [TIOCSTI, TIOCLINUX]) {
    for (const high of [0n, 1n << 32n, 0xffffffffn << 32n]) {
      for (const fd of [0n, 1n, 255n, -1n]) {
        const call = { nr: NR.ioctl, args: [fd, BigInt(req) | high, 0n] };
        assert.equal(runFilter(prog, call), errno(EPERM), `req ${req} high ${high} fd ${fd}`);
      }
    }
  }
  for (const req of [0x5401 /* TCGETS */, 0x5413 /* TIOCGWINSZ */, 0x541b /* FIONREAD */]) {
    assert.equal(runFilter(prog, { nr: NR.ioctl, args: [0n, BigInt(req)] }), ALLOW);
  }
  // The request must be checked in arg1, not arg0 or arg2.
  assert.equal(runFilter(prog, { nr: NR.ioctl, args: [BigInt(TIOCSTI), 0x5401n, 0n] }), ALLOW);
  fc.assert(
    fc.property(fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }), (req) => {
      const call = { nr: NR.ioctl, args: [0n, req] };
      return runFilter(prog, call) === expected(call);
    }),
    { numRuns: 2000 },
  );
});

test("personality: only the documented personas and the query pass", () => {
  for (const v of PERSONALITY_ALLOWED) {
    assert.equal(runFilter(prog, { nr: NR.personality, args: [BigInt(v)] }), ALLOW, `0x${v}`);
  }
  for (const v of [0x0040000 /* ADDR_NO_RANDOMIZE */, 0x0400000 /* READ_IMPLIES_EXEC */, 1, 7]) {
    assert.equal(runFilter(prog, { nr: NR.personality, args: [BigInt(v)] }), errno(EPERM));
  }
  fc.assert(
    fc.property(fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }), (v) => {
      const call = { nr: NR.personality, args: [v] };
      return runFilter(prog, call) === expected(call);
    }),
    { numRuns: 2000 },
  );
});

const AF = {
  AF_UNSPEC: 0,
  AF_UNIX: 1,
  AF_INET: 2,
  AF_AX25: 3,
  AF_INET6: 10,
  AF_KEY: 15,
  AF_NETLINK: 16,
  AF_PACKET: 17,
  AF_CAN: 29,
  AF_TIPC: 30,
  AF_BLUETOOTH: 31,
  AF_ALG: 38,
  AF_VSOCK: 40,
  AF_KCM: 41,
  AF_XDP: 44,
  AF_MCTP: 45,
} as const;

test("socket and socketpair: unix, inet, inet6 and route netlink only; high bits hide nothing", () => {
  assert.deepEqual(Object.values(SOCKET_FAMILIES), [AF.AF_UNIX, AF.AF_INET, AF.AF_INET6]);
  assert.equal(AF_NETLINK, AF.AF_NETLINK);
  assert.equal(NETLINK_ROUTE, 0);
  const SOCK_STREAM_CLOEXEC = 0x80001n;
  for (const nr of [NR.socket, NR.socketpair]) {
    for (const [name, family] of Object.entries(AF)) {
      for (const high of [0n, 1n << 32n, 0xffffffffn << 32n]) {
        // The kernel takes `int family`: only the low 32 bits count, whatever is above them.
        const call = { nr, args: [BigInt(family) | high, SOCK_STREAM_CLOEXEC, 0n, 0n] };
        const want = [1, 2, 10, 16].includes(family) ? ALLOW : errno(EAFNOSUPPORT);
        assert.equal(runFilter(prog, call), want, `${nr} ${name} high ${high}`);
      }
    }
    // Netlink: NETLINK_ROUTE passes; audit (9), sock_diag (4), uevent (15), generic (16) do not.
    for (const [proto, want] of [
      [0n, ALLOW],
      [4n, errno(EPROTONOSUPPORT)],
      [9n, errno(EPROTONOSUPPORT)],
      [15n, errno(EPROTONOSUPPORT)],
      [16n, errno(EPROTONOSUPPORT)],
      [1n << 32n, ALLOW], // int protocol: 0 in the low 32 bits is NETLINK_ROUTE
      [(1n << 32n) | 15n, errno(EPROTONOSUPPORT)],
    ] as const) {
      assert.equal(runFilter(prog, { nr, args: [16n, 3n, proto] }), want, `netlink ${proto}`);
    }
    // The protocol is read only for netlink: inet with any protocol number is inet.
    assert.equal(runFilter(prog, { nr, args: [2n, 2n, 17n] }), ALLOW);
    assert.equal(runFilter(prog, { nr, args: [40n, 1n, 0n] }), errno(EAFNOSUPPORT));
    fc.assert(
      fc.property(
        fc.oneof(
          fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
          fc.constantFrom(...Object.values(AF).map(BigInt)),
        ),
        fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
        fc.oneof(fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }), fc.constantFrom(0n, 4n, 15n)),
        (family, type, proto) => {
          const call = { nr, args: [family, type, proto, 0n] };
          return runFilter(prog, call) === expected(call);
        },
      ),
      { numRuns: 3000 },
    );
  }
  // The x32 and i386 doors to sockets: x32 numbers are refused, any other arch (i386's socketcall
  // 102 and socket 359 included) kills the process before a number is looked at.
  assert.equal(runFilter(prog, { nr: 0x40000000 | NR.socket, args: [40n] }), errno(EPERM));
  for (const nr of [102, 359, 360]) {
    assert.equal(
      runFilter(prog, { nr, arch: 0x40000003, args: [1n, 0n] }),
      SECCOMP_RET_KILL_PROCESS,
      `i386 ${nr}`,
    );
  }
});

test("hot path: only the argument rules' own syscalls read an argument (kernel action cache)", () => {
  // Linux 5.11+ caches the action of every syscall number whose result the program computes from
  // the number and arch alone, and then skips the program for it. Reading an argument anywhere on
  // a number's path would take that number out of the cache.
  for (let nr = 0; nr < 1024; nr++) {
    const loads = new Set<number>();
    runFilter(prog, { nr, args: [1n, 2n, 3n, 4n, 5n, 6n] }, loads);
    const readsArgs = [...loads].some((off) => off >= 16);
    assert.equal(readsArgs, ARGUMENT_SYSCALLS.has(nr), `nr ${nr} reads an argument: ${readsArgs}`);
  }
  const loads = new Set<number>();
  runFilter(prog, { nr: NR.read }, loads);
  assert.deepEqual([...loads].sort(), [0, 4], "read: arch and number, nothing else");
  // The program really runs only for those syscalls: their rules come first, so each is
  // answered within a few instructions (the denylist comes after them).
  for (const nr of ARGUMENT_SYSCALLS) {
    for (const args of [[], [16n, 3n, 15n], [0x10000000n, 0x5412n], [2n, 1n, 0n]]) {
      const stats = { steps: 0 };
      runFilter(prog, { nr, args }, undefined, stats);
      assert.ok(stats.steps <= 20, `nr ${nr} ${args}: ${stats.steps} instructions`);
    }
  }
});

test("random calls: the program and the reference model always agree", () => {
  const arg = fc.oneof(
    fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
    fc.constantFrom(0n, 0x5412n, 0x541cn, 0x10000000n, 0xffffffffn, 1n << 32n),
  );
  fc.assert(
    fc.property(
      fc.oneof(fc.nat(600), fc.integer({ min: 0, max: 0xffffffff })),
      fc.oneof(fc.constant(AUDIT_ARCH_X86_64), fc.integer({ min: 0, max: 0xffffffff })),
      fc.array(arg, { minLength: 6, maxLength: 6 }),
      (nr, arch, args) => runFilter(prog, { nr, arch, args }) === expected({ nr, arch, args }),
    ),
    { numRuns: 5000 },
  );
});

test("a custom policy renders its own errnos (used by the live probe)", () => {
  const marked: SeccompPolicy = {
    deny: DEFAULT_SECCOMP_POLICY.deny.map((d) => ({ ...d, errno: 4000 })),
    argumentRules: DEFAULT_SECCOMP_POLICY.argumentRules.map((r) =>
      r.kind === "allow-only-equal"
        ? { ...r, errno: 4001, narrowed: r.narrowed?.map((n) => ({ ...n, errno: 4003 })) }
        : { ...r, errno: 4001 },
    ),
    x32Errno: 4002,
  };
  const p = renderSeccompFilter(marked);
  assert.equal(runFilter(p, { nr: NR.mount }), errno(4000));
  assert.equal(runFilter(p, { nr: NR.clone, args: [0x10000000n] }), errno(4001));
  assert.equal(runFilter(p, { nr: NR.socket, args: [40n] }), errno(4001));
  assert.equal(runFilter(p, { nr: NR.socket, args: [16n, 3n, 15n] }), errno(4003));
  assert.equal(runFilter(p, { nr: 0x40000027 }), errno(4002));
  assert.equal(runFilter(p, { nr: NR.getpid }), ALLOW);
});

test("invalid policies are rejected instead of rendered wrongly", () => {
  const base = DEFAULT_SECCOMP_POLICY;
  const bad: [string, SeccompPolicy][] = [
    ["duplicate", { ...base, deny: [...base.deny, { syscall: "mount", errno: 1, why: "x" }] }],
    ["deny and rule", { ...base, deny: [...base.deny, { syscall: "clone", errno: 1, why: "x" }] }],
    ["unknown", { ...base, deny: [{ syscall: "nope" as SyscallName, errno: 1, why: "x" }] }],
    ["errno 0", { ...base, deny: [{ syscall: "mount", errno: 0, why: "x" }] }],
    ["errno 4096", { ...base, deny: [{ syscall: "mount", errno: 4096, why: "x" }] }],
    ["x32 errno", { ...base, x32Errno: 0 }],
    [
      "arg 6",
      {
        ...base,
        argumentRules: [
          { syscall: "ioctl", arg: 6, kind: "deny-if-equal", values: [1], errno: 1, why: "x" },
        ],
      },
    ],
    [
      "empty values",
      {
        ...base,
        argumentRules: [
          { syscall: "ioctl", arg: 1, kind: "deny-if-equal", values: [], errno: 1, why: "x" },
        ],
      },
    ],
    [
      "64-bit value",
      {
        ...base,
        argumentRules: [
          {
            syscall: "ioctl",
            arg: 1,
            kind: "deny-if-equal",
            values: [2 ** 32],
            errno: 1,
            why: "x",
          },
        ],
      },
    ],
    [
      "negative mask",
      {
        ...base,
        argumentRules: [
          { syscall: "clone", arg: 0, kind: "deny-if-any-bit", mask: -1, errno: 1, why: "x" },
        ],
      },
    ],
  ];
  for (const [label, policy] of bad) {
    assert.throws(() => validateSeccompPolicy(policy), Error, label);
    assert.throws(() => renderSeccompFilter(policy), Error, label);
  }
  const socketRule = base.argumentRules.find((r) => r.syscall === "socket");
  assert.ok(socketRule?.kind === "allow-only-equal" && socketRule.narrowed?.[0]);
  const narrowed = socketRule.narrowed[0];
  const withNarrowed = (n: Partial<typeof narrowed>): SeccompPolicy => ({
    ...base,
    argumentRules: base.argumentRules.map((r) =>
      r === socketRule ? { ...socketRule, narrowed: [{ ...narrowed, ...n }] } : r,
    ),
  });
  for (const [label, policy] of [
    ["narrowed on its own argument", withNarrowed({ arg: 0 })],
    ["narrowed argument 6", withNarrowed({ arg: 6 })],
    ["narrowed errno 0", withNarrowed({ errno: 0 })],
    ["narrowed without values", withNarrowed({ values: [] })],
    ["narrowed 64-bit value", withNarrowed({ values: [2 ** 32] })],
    ["narrowed value also allowed outright", withNarrowed({ value: 2 })],
  ] as const) {
    assert.throws(() => renderSeccompFilter(policy), Error, label);
  }
  // A value list too long for 8-bit jump offsets must be refused, not wrapped around.
  const long: SeccompPolicy = {
    ...base,
    argumentRules: [
      {
        syscall: "personality",
        arg: 0,
        kind: "allow-only-equal",
        values: [...Array(300).keys()],
        errno: 1,
        why: "x",
      },
    ],
  };
  assert.throws(() => renderSeccompFilter(long), /out of range/);
});

test("the description names every denied syscall and every argument rule", () => {
  const text = describeSeccompPolicy();
  for (const d of DEFAULT_SECCOMP_POLICY.deny)
    assert.ok(text.includes(`\`${d.syscall}\``), d.syscall);
  for (const r of DEFAULT_SECCOMP_POLICY.argumentRules)
    assert.ok(text.includes(`\`${r.syscall}\``));
  assert.match(text, /ENOSYS/);
  assert.match(text, /x86_64/);
  assert.match(text, /`socket` unless arg0 is one of 0x1, 0x2, 0xa: EAFNOSUPPORT/);
  assert.match(text, /arg0 0x10 only if arg2 is one of 0x0, else EPROTONOSUPPORT/);
});

test("SEC-SYSCALLS-NEW: memfd_secret is refused; Landlock and mseal are allowed on purpose, each with its reason", () => {
  const denied = new Set(DEFAULT_SECCOMP_POLICY.deny.map((d) => d.syscall));
  assert.ok(denied.has("memfd_secret"));
  assert.equal(DEFAULT_SECCOMP_POLICY.deny.find((d) => d.syscall === "memfd_secret")?.errno, EPERM);
  const allowed = ALLOWED_ON_PURPOSE.map((a) => a.syscall);
  assert.deepEqual(allowed, [
    "landlock_create_ruleset",
    "landlock_add_rule",
    "landlock_restrict_self",
    "mseal",
  ]);
  for (const name of allowed) assert.ok(!denied.has(name), name);
  const text = describeSeccompPolicy();
  assert.match(
    text,
    /`landlock_create_ruleset`, `landlock_add_rule`, `landlock_restrict_self`: allowed on purpose \(Landlock only narrows/,
  );
  assert.match(text, /`mseal`: allowed on purpose/);
  assert.match(text, /`memfd_secret`: EPERM \(secret memory/);
  // A policy cannot both refuse one and keep it on the allowed list.
  const both: SeccompPolicy = {
    ...DEFAULT_SECCOMP_POLICY,
    deny: [...DEFAULT_SECCOMP_POLICY.deny, { syscall: "mseal", errno: EPERM, why: "x" }],
  };
  assert.throws(() => renderSeccompFilter(both), /mseal is both refused and allowed on purpose/);
});
