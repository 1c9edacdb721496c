/**
 * Seccomp policy for every sandboxed process, rendered as a classic BPF program.
 *
 * The output is the raw array of `struct sock_filter` that `bwrap --seccomp FD` reads from FD and
 * installs (after PR_SET_NO_NEW_PRIVS) right before it execs the sandboxed program; the microVM
 * guest's agent installs the same bytes (rendered into the initramfs at build time) in the code's
 * process before it execs the code. The program is a straight line: arch check, x32 check, one
 * small block per argument rule, one "jeq nr → ret" pair per denied syscall, then ALLOW. Every
 * jump is forward and short (checked when rendering).
 *
 * Only the blocks of argument rules read an argument, and each is entered only when the syscall
 * number matched. So for every other syscall the result depends on the number alone, and the
 * kernel (5.11+) answers it from its per-filter action cache without running the program; the
 * program runs for the argument rules' own syscalls only, which is why they come first.
 */
import { X32_SYSCALL_BIT, X86_64_SYSCALLS, type SyscallName } from "./syscalls.js";

export const EPERM = 1;
export const ENOSYS = 38;
export const EPROTONOSUPPORT = 93;
export const EAFNOSUPPORT = 97;

/** A syscall refused outright; the caller sees -1 with `errno`. */
export interface DeniedSyscall {
  readonly syscall: SyscallName;
  readonly errno: number;
  readonly why: string;
}

/**
 * A syscall allowed unless one argument matches. Only the low 32 bits of the argument are
 * compared: every rule below is on an argument the kernel itself truncates to 32 bits (`unsigned
 * int` ioctl cmd and personality, lower_32_bits(clone flags)), so high bits cannot bypass it.
 */
export type ArgumentRule =
  | (ArgumentRuleBase & { readonly kind: "deny-if-any-bit"; readonly mask: number })
  | (ArgumentRuleBase & { readonly kind: "deny-if-equal"; readonly values: readonly number[] })
  | (ArgumentRuleBase & {
      readonly kind: "allow-only-equal";
      readonly values: readonly number[];
      /** Further values of the argument, each allowed only when a second argument matches. */
      readonly narrowed?: readonly NarrowedValue[];
    });

/**
 * `allow-only-equal` for one more value of the rule's argument, on a condition: allowed only when
 * argument `arg` is one of `values`, else `errno` (e.g. socket(AF_NETLINK, *, protocol) for
 * NETLINK_ROUTE only).
 */
export interface NarrowedValue {
  readonly value: number;
  readonly arg: number;
  readonly values: readonly number[];
  readonly errno: number;
  readonly why: string;
}

interface ArgumentRuleBase {
  readonly syscall: SyscallName;
  /** Argument index, 0..5. */
  readonly arg: number;
  readonly errno: number;
  readonly why: string;
}

export interface SeccompPolicy {
  readonly deny: readonly DeniedSyscall[];
  readonly argumentRules: readonly ArgumentRule[];
  /** errno for any syscall number with the x32 bit set (x32 ABI entry on an x86_64 kernel). */
  readonly x32Errno: number;
}

/** Every CLONE_NEW* flag that legacy clone() accepts (CLONE_NEWTIME, 0x80, is clone3-only). */
export const CLONE_NEW_FLAGS = {
  CLONE_NEWNS: 0x00020000,
  CLONE_NEWCGROUP: 0x02000000,
  CLONE_NEWUTS: 0x04000000,
  CLONE_NEWIPC: 0x08000000,
  CLONE_NEWUSER: 0x10000000,
  CLONE_NEWPID: 0x20000000,
  CLONE_NEWNET: 0x40000000,
} as const;
const CLONE_NEW_MASK = Object.values(CLONE_NEW_FLAGS).reduce((a, b) => a | b, 0);

export const TIOCSTI = 0x5412;
export const TIOCLINUX = 0x541c;

/** personality() values allowed: PER_LINUX, PER_LINUX32, UNAME26 variants, and the 0xffffffff query. */
export const PERSONALITY_ALLOWED = [0x0, 0x8, 0x20000, 0x20008, 0xffffffff] as const;

/** Socket families a sandboxed program may open (arg0 of socket and socketpair). */
export const SOCKET_FAMILIES = { AF_UNIX: 1, AF_INET: 2, AF_INET6: 10 } as const;
/** AF_NETLINK, allowed for one protocol only: NETLINK_ROUTE (addresses, links, routes). */
export const AF_NETLINK = 16;
export const NETLINK_ROUTE = 0;

const socketRule = (syscall: "socket" | "socketpair"): ArgumentRule => ({
  syscall,
  arg: 0,
  kind: "allow-only-equal",
  values: Object.values(SOCKET_FAMILIES),
  narrowed: [
    {
      value: AF_NETLINK,
      arg: 2,
      values: [NETLINK_ROUTE],
      errno: EPROTONOSUPPORT,
      why: "route netlink only (getaddrinfo, getifaddrs, ip); no audit, uevent, diag or generic netlink",
    },
  ],
  errno: EAFNOSUPPORT,
  why: "unix, inet, inet6 and netlink only: vsock is not network-namespaced (host port space, hypervisor services), packet/xdp/alg/key and the rest are kernel surface",
});

const deny = (why: string, errno: number, names: SyscallName[]): DeniedSyscall[] =>
  names.map((syscall) => ({ syscall, errno, why }));

export const DEFAULT_SECCOMP_POLICY: SeccompPolicy = {
  deny: [
    ...deny("mounts and root changes belong to the jail, not the program", EPERM, [
      "mount",
      "umount2",
      "pivot_root",
      "chroot",
      "move_mount",
      "open_tree",
      "open_tree_attr",
      "fsopen",
      "fsconfig",
      "fsmount",
      "fspick",
      "mount_setattr",
    ]),
    ...deny("no new namespaces, no joining others", EPERM, ["unshare", "setns"]),
    ...deny("kernel attack surface no sandboxed program needs", EPERM, [
      "bpf",
      "perf_event_open",
      "userfaultfd",
      "lookup_dcookie",
      "fanotify_init",
      "open_by_handle_at",
      "name_to_handle_at",
    ]),
    ...deny(
      "secret memory is taken out of the kernel's direct map (splitting it costs the whole host) and is unevictable; no sandboxed program needs it",
      EPERM,
      ["memfd_secret"],
    ),
    ...deny("kernel keyrings are not namespaced", EPERM, ["keyctl", "add_key", "request_key"]),
    ...deny("no inspecting or writing other processes", EPERM, [
      "ptrace",
      "process_vm_readv",
      "process_vm_writev",
      "kcmp",
    ]),
    ...deny("kernel modules and kexec", EPERM, [
      "kexec_load",
      "kexec_file_load",
      "init_module",
      "finit_module",
      "delete_module",
      "create_module",
      "get_kernel_syms",
      "query_module",
    ]),
    ...deny("host administration: clock, swap, reboot, accounting, quotas, logs", EPERM, [
      "acct",
      "swapon",
      "swapoff",
      "reboot",
      "syslog",
      "quotactl",
      "quotactl_fd",
      "settimeofday",
      "clock_settime",
      "clock_adjtime",
      "adjtimex",
      "vhangup",
    ]),
    ...deny("raw I/O port access", EPERM, ["iopl", "ioperm"]),
    ...deny("obsolete interfaces", EPERM, ["nfsservctl", "uselib", "ustat", "sysfs", "_sysctl"]),
    ...deny(
      "clone3 passes flags in memory BPF cannot read; ENOSYS makes libc fall back to clone",
      ENOSYS,
      ["clone3"],
    ),
    ...deny(
      "io_uring bypasses seccomp for the operations it runs; ENOSYS makes libuv fall back",
      ENOSYS,
      ["io_uring_setup", "io_uring_enter", "io_uring_register"],
    ),
  ],
  argumentRules: [
    {
      syscall: "clone",
      arg: 0,
      kind: "deny-if-any-bit",
      mask: CLONE_NEW_MASK,
      errno: EPERM,
      why: "threads and fork are fine; new namespaces are not",
    },
    {
      syscall: "ioctl",
      arg: 1,
      kind: "deny-if-equal",
      values: [TIOCSTI, TIOCLINUX],
      errno: EPERM,
      why: "no faking terminal input on a tty shared with the host",
    },
    {
      syscall: "personality",
      arg: 0,
      kind: "allow-only-equal",
      values: PERSONALITY_ALLOWED,
      errno: EPERM,
      why: "no turning off ASLR (ADDR_NO_RANDOMIZE) or READ_IMPLIES_EXEC",
    },
    socketRule("socket"),
    socketRule("socketpair"),
  ],
  x32Errno: EPERM,
};

/** A newer syscall the filter lets through on purpose, and why (docs/SECURITY.md). */
export interface AllowedSyscall {
  readonly syscall: SyscallName;
  readonly why: string;
}

/**
 * Decided, not overlooked: syscalls newer than most denylists that the filter allows. Each only
 * takes rights away from the caller itself, so a sandboxed program can confine itself further.
 * validateSeccompPolicy refuses a policy that both denies and allows one.
 */
export const ALLOWED_ON_PURPOSE: readonly AllowedSyscall[] = [
  ...(["landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"] as const).map(
    (syscall) => ({
      syscall,
      why: "Landlock only narrows the caller's own file and network access (it needs no_new_privs, which the jail sets, and grants nothing); programs that sandbox themselves use it",
    }),
  ),
  {
    syscall: "mseal",
    why: "seals the caller's own mappings against change (glibc and browsers use it); it grants nothing and reaches no other process",
  },
];

// Classic BPF opcodes and seccomp constants (linux/filter.h, linux/seccomp.h, linux/audit.h).
export const BPF = {
  LD_W_ABS: 0x20,
  JEQ_K: 0x15,
  JGE_K: 0x35,
  JSET_K: 0x45,
  RET_K: 0x06,
} as const;
const BPF_CLASS_JMP = 0x05;
export const AUDIT_ARCH_X86_64 = 0xc000003e;
export const SECCOMP_RET_KILL_PROCESS = 0x80000000;
export const SECCOMP_RET_ERRNO = 0x00050000;
export const SECCOMP_RET_ALLOW = 0x7fff0000;
/** Offsets into struct seccomp_data. */
export const SECCOMP_DATA = { nr: 0, arch: 4, argLow: (i: number) => 16 + 8 * i } as const;
/** The kernel's BPF_MAXINSNS. */
export const MAX_INSTRUCTIONS = 4096;

export interface SockFilter {
  code: number;
  jt: number;
  jf: number;
  k: number;
}

const stmt = (code: number, k: number): SockFilter => ({ code, jt: 0, jf: 0, k });
const jump = (code: number, k: number, jt: number, jf: number): SockFilter => ({ code, jt, jf, k });
const retErrno = (errno: number): SockFilter => stmt(BPF.RET_K, SECCOMP_RET_ERRNO | errno);
const retAllow = (): SockFilter => stmt(BPF.RET_K, SECCOMP_RET_ALLOW);

/** Throws on a policy that cannot be rendered faithfully (a programming error, not user input). */
export function validateSeccompPolicy(policy: SeccompPolicy): void {
  const seen = new Set<string>();
  const checkErrno = (errno: number, where: string) => {
    if (!Number.isInteger(errno) || errno < 1 || errno > 4095) {
      throw new Error(`seccomp policy: errno ${errno} for ${where} is not in 1..4095`);
    }
  };
  const checkWords = (words: readonly number[], name: SyscallName) => {
    for (const w of words) {
      if (!Number.isInteger(w) || w < 0 || w > 0xffffffff) {
        throw new Error(`seccomp policy: value ${w} for ${name} is not a 32-bit word`);
      }
    }
  };
  const checkOnce = (name: SyscallName) => {
    if (!(name in X86_64_SYSCALLS)) throw new Error(`seccomp policy: unknown syscall ${name}`);
    if (seen.has(name)) throw new Error(`seccomp policy: ${name} appears in more than one rule`);
    seen.add(name);
  };
  for (const d of policy.deny) {
    checkOnce(d.syscall);
    checkErrno(d.errno, d.syscall);
  }
  for (const a of ALLOWED_ON_PURPOSE)
    if (seen.has(a.syscall))
      throw new Error(`seccomp policy: ${a.syscall} is both refused and allowed on purpose`);
  for (const r of policy.argumentRules) {
    checkOnce(r.syscall);
    checkErrno(r.errno, r.syscall);
    if (!Number.isInteger(r.arg) || r.arg < 0 || r.arg > 5) {
      throw new Error(`seccomp policy: argument index ${r.arg} for ${r.syscall} is not in 0..5`);
    }
    const words = r.kind === "deny-if-any-bit" ? [r.mask] : r.values;
    if (words.length === 0) throw new Error(`seccomp policy: rule for ${r.syscall} has no values`);
    checkWords(words, r.syscall);
    const narrowed = r.kind === "allow-only-equal" ? (r.narrowed ?? []) : [];
    checkWords(
      narrowed.map((n) => n.value),
      r.syscall,
    );
    const all = [...words, ...narrowed.map((n) => n.value)];
    if (new Set(all).size !== all.length) {
      throw new Error(`seccomp policy: rule for ${r.syscall} lists a value twice`);
    }
    for (const n of narrowed) {
      checkErrno(n.errno, `${r.syscall} value ${n.value}`);
      if (!Number.isInteger(n.arg) || n.arg < 0 || n.arg > 5 || n.arg === r.arg) {
        throw new Error(`seccomp policy: narrowed argument ${n.arg} for ${r.syscall} is invalid`);
      }
      if (n.values.length === 0) {
        throw new Error(`seccomp policy: narrowed value ${n.value} for ${r.syscall} has no values`);
      }
      checkWords(n.values, r.syscall);
    }
  }
  checkErrno(policy.x32Errno, "x32");
}

function argumentBlock(rule: ArgumentRule): SockFilter[] {
  const load = stmt(BPF.LD_W_ABS, SECCOMP_DATA.argLow(rule.arg));
  if (rule.kind === "deny-if-any-bit") {
    return [load, jump(BPF.JSET_K, rule.mask, 0, 1), retErrno(rule.errno), retAllow()];
  }
  if (rule.kind === "deny-if-equal") return [load, ...equalsBlock(rule.values, true, rule.errno)];
  // The values, then each narrowed value, compared in turn; then the two returns; then one block
  // per narrowed value (its own argument: load, compares, returns), reached by that compare.
  const narrowed = rule.narrowed ?? [];
  const tails = narrowed.map((v) => [
    stmt(BPF.LD_W_ABS, SECCOMP_DATA.argLow(v.arg)),
    ...equalsBlock(v.values, false, v.errno),
  ]);
  const c = rule.values.length + narrowed.length;
  const compares = rule.values.map((v, i) => jump(BPF.JEQ_K, v, c - i, 0));
  let tailStart = c + 2; // from the first compare: c compares, onMiss, onMatch
  narrowed.forEach((v, j) => {
    const i = rule.values.length + j;
    compares.push(jump(BPF.JEQ_K, v.value, tailStart - i - 1, 0));
    tailStart += tails[j]!.length;
  });
  return [load, ...compares, retErrno(rule.errno), retAllow(), ...tails.flat()];
}

/**
 * Compares of the loaded word against each value, then two returns: a match jumps over the
 * fall-through return (a miss) to the second one (a match). `matchDenies`: a match is the errno.
 */
function equalsBlock(values: readonly number[], matchDenies: boolean, errno: number): SockFilter[] {
  const n = values.length;
  const compares = values.map((v, i) => jump(BPF.JEQ_K, v, n - i, 0));
  const [onMatch, onMiss] = matchDenies
    ? [retErrno(errno), retAllow()]
    : [retAllow(), retErrno(errno)];
  return [...compares, onMiss, onMatch];
}

/** The program as instructions; `renderSeccompFilter` is this, serialised. */
export function compileSeccompPolicy(policy: SeccompPolicy = DEFAULT_SECCOMP_POLICY): SockFilter[] {
  validateSeccompPolicy(policy);
  const prog: SockFilter[] = [
    stmt(BPF.LD_W_ABS, SECCOMP_DATA.arch),
    jump(BPF.JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
    stmt(BPF.RET_K, SECCOMP_RET_KILL_PROCESS),
    stmt(BPF.LD_W_ABS, SECCOMP_DATA.nr),
    jump(BPF.JGE_K, X32_SYSCALL_BIT, 0, 1),
    retErrno(policy.x32Errno),
  ];
  // Argument rules first: their syscalls are the only ones the kernel's action cache cannot
  // answer, so theirs are the paths the program really runs (clone, ioctl, socket).
  for (const r of policy.argumentRules) {
    const block = argumentBlock(r);
    prog.push(jump(BPF.JEQ_K, X86_64_SYSCALLS[r.syscall], 0, block.length), ...block);
  }
  for (const d of policy.deny) {
    prog.push(jump(BPF.JEQ_K, X86_64_SYSCALLS[d.syscall], 0, 1), retErrno(d.errno));
  }
  prog.push(retAllow());
  for (const [i, ins] of prog.entries()) {
    const isJump = (ins.code & 0x07) === BPF_CLASS_JMP;
    if (
      isJump &&
      (ins.jt > 255 || ins.jf > 255 || i + 1 + Math.max(ins.jt, ins.jf) >= prog.length)
    ) {
      throw new Error(`seccomp: jump out of range at instruction ${i}`);
    }
  }
  if (prog.length > MAX_INSTRUCTIONS) throw new Error(`seccomp: ${prog.length} instructions`);
  return prog;
}

/** The raw `struct sock_filter[]` (8 bytes each, little-endian) for `bwrap --seccomp FD`. */
export function renderSeccompFilter(policy: SeccompPolicy = DEFAULT_SECCOMP_POLICY): Buffer {
  const prog = compileSeccompPolicy(policy);
  const buf = Buffer.alloc(prog.length * 8);
  prog.forEach((ins, i) => {
    buf.writeUInt16LE(ins.code, i * 8);
    buf.writeUInt8(ins.jt, i * 8 + 2);
    buf.writeUInt8(ins.jf, i * 8 + 3);
    buf.writeUInt32LE(ins.k >>> 0, i * 8 + 4);
  });
  return buf;
}

const ERRNO_NAMES: Record<number, string> = {
  [EPERM]: "EPERM",
  [ENOSYS]: "ENOSYS",
  [EPROTONOSUPPORT]: "EPROTONOSUPPORT",
  [EAFNOSUPPORT]: "EAFNOSUPPORT",
};
const errnoName = (errno: number) => ERRNO_NAMES[errno] ?? `errno ${errno}`;
const hex = (v: number) => `0x${v.toString(16)}`;

/** Markdown for docs/SECURITY.md: what the filter refuses and why. */
export function describeSeccompPolicy(policy: SeccompPolicy = DEFAULT_SECCOMP_POLICY): string {
  const lines = [
    "- Any audit arch other than x86_64: the process is killed (SECCOMP_RET_KILL_PROCESS).",
    `- Any x32 syscall number (>= ${hex(X32_SYSCALL_BIT)}): ${errnoName(policy.x32Errno)}.`,
  ];
  const byWhy = new Map<string, DeniedSyscall[]>();
  for (const d of policy.deny) byWhy.set(d.why, [...(byWhy.get(d.why) ?? []), d]);
  for (const [why, group] of byWhy) {
    const names = group.map((d) => `\`${d.syscall}\``).join(", ");
    const errnos = [...new Set(group.map((d) => errnoName(d.errno)))].join("/");
    lines.push(`- ${names}: ${errnos} (${why}).`);
  }
  for (const r of policy.argumentRules) {
    const what =
      r.kind === "deny-if-any-bit"
        ? `if arg${r.arg} has any bit of ${hex(r.mask)}`
        : r.kind === "deny-if-equal"
          ? `if arg${r.arg} is one of ${r.values.map(hex).join(", ")}`
          : `unless arg${r.arg} is one of ${r.values.map(hex).join(", ")}`;
    lines.push(`- \`${r.syscall}\` ${what}: ${errnoName(r.errno)} (${r.why}).`);
    for (const n of r.kind === "allow-only-equal" ? (r.narrowed ?? []) : []) {
      lines.push(
        `  - arg${r.arg} ${hex(n.value)} only if arg${n.arg} is one of ${n.values.map(hex).join(", ")}, else ${errnoName(n.errno)} (${n.why}).`,
      );
    }
  }
  const byReason = new Map<string, string[]>();
  for (const a of ALLOWED_ON_PURPOSE)
    byReason.set(a.why, [...(byReason.get(a.why) ?? []), `\`${a.syscall}\``]);
  for (const [why, names] of byReason)
    lines.push(`- ${names.join(", ")}: allowed on purpose (${why}).`);
  lines.push("- Everything else: allowed.");
  return lines.join("\n");
}
