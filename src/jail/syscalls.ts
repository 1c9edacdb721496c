/**
 * x86_64 system call numbers for the names the seccomp policy refers to.
 *
 * Taken from the kernel's arch/x86/entry/syscalls/syscall_64.tbl (the same numbers as
 * <asm/unistd_64.h>); test/jail/syscalls.test.ts checks every entry against the installed header.
 * Only the x86_64 ABI is listed: the filter kills every other audit arch and refuses x32 numbers.
 */
export const X86_64_SYSCALLS = {
  read: 0,
  write: 1,
  ioctl: 16,
  getpid: 39,
  clone: 56,
  fork: 57,
  vfork: 58,
  ptrace: 101,
  syslog: 103,
  uselib: 134,
  personality: 135,
  ustat: 136,
  sysfs: 139,
  vhangup: 153,
  pivot_root: 155,
  _sysctl: 156,
  adjtimex: 159,
  chroot: 161,
  acct: 163,
  settimeofday: 164,
  mount: 165,
  umount2: 166,
  swapon: 167,
  swapoff: 168,
  reboot: 169,
  iopl: 172,
  ioperm: 173,
  create_module: 174,
  init_module: 175,
  delete_module: 176,
  get_kernel_syms: 177,
  query_module: 178,
  quotactl: 179,
  nfsservctl: 180,
  lookup_dcookie: 212,
  clock_settime: 227,
  add_key: 248,
  request_key: 249,
  keyctl: 250,
  kexec_load: 246,
  unshare: 272,
  perf_event_open: 298,
  fanotify_init: 300,
  name_to_handle_at: 303,
  open_by_handle_at: 304,
  clock_adjtime: 305,
  setns: 308,
  process_vm_readv: 310,
  process_vm_writev: 311,
  kcmp: 312,
  finit_module: 313,
  kexec_file_load: 320,
  bpf: 321,
  userfaultfd: 323,
  io_uring_setup: 425,
  io_uring_enter: 426,
  io_uring_register: 427,
  open_tree: 428,
  move_mount: 429,
  fsopen: 430,
  fsconfig: 431,
  fsmount: 432,
  fspick: 433,
  clone3: 435,
  mount_setattr: 442,
  quotactl_fd: 443,
  /** Linux 6.15; newer than the Debian 12 header, so the header test cannot check it. */
  open_tree_attr: 467,
} as const;

export type SyscallName = keyof typeof X86_64_SYSCALLS;

/** First syscall number of the x32 ABI (__X32_SYSCALL_BIT); x32 calls enter with it set. */
export const X32_SYSCALL_BIT = 0x40000000;

export function syscallNumber(name: SyscallName): number {
  return X86_64_SYSCALLS[name];
}
