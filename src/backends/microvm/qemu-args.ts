/**
 * The QEMU command line for one microVM, as a pure function of its spec. Paths are the ones the
 * jail (jail-args.ts) makes visible inside QEMU's private mount namespace.
 */
import type { Accel } from "./accel.js";

/** Where the jail mounts things for QEMU. */
export const IN_JAIL = {
  kernel: "/vm/vmlinux",
  initramfs: "/vm/initramfs",
  disk: "/vm/disk",
  /** The template's RAM: a memfd QEMU inherits as fd 3 (snapshot modes only). */
  memFd: "/proc/self/fd/3",
  runDir: "/run/vm",
  channel: "/run/vm/channel.sock",
  seed: "/run/vm/seed.sock",
  qmp: "/run/vm/qmp.sock",
  /** Migration stream (device state only, RAM is shared): QEMU connects (save) or listens. */
  state: "/run/vm/state.sock",
} as const;

export const CHANNEL_PORT_NAME = "scratchrun.0";
export const SEED_PORT_NAME = "scratchrun.seed";

export interface QemuSpec {
  accel: Accel;
  /** Guest RAM, MiB. */
  guestMb: number;
  /** The call's memory_mb: memory.max of the code's cgroup in the guest (guest/init). */
  memoryMb: number;
  tscKhz: number | null;
  /** tmpfs size of the guest's writable layers (overlay upper and /tmp), MiB. */
  scratchMb: number;
  /** TCG translation cache, MiB (QEMU's default is 1 GiB of address space). */
  tcgCacheMb: number;
  /**
   * Snapshot support; both modes take guest RAM from the memfd on fd 3. "save" (the template):
   * mapped shared, so the booted guest's memory lands in the memfd. "restore" (a clone): mapped
   * private (copy on write; the memfd is sealed against writes), started paused (-S) awaiting an
   * incoming migration on QMP. Absent: plain anonymous RAM, cold boot.
   */
  snapshot?: { mode: "save" | "restore" };
  /**
   * The VM's one NIC. Every VM has it, so templates and clones have the same devices; the backend
   * decides what is behind it: a tap (opened from QEMU's network namespace, the sandbox's) or a
   * hub port with nothing else on the hub (frames go nowhere). `mac` is per VM.
   */
  nic: { mac: string; backend: { kind: "tap"; ifname: string } | { kind: "none" } };
  /**
   * Template only: an interpreter the guest init runs once (from the read-only disk, before the
   * snapshot) so its files are in the guest page cache of every clone, and that the agent runs on
   * /dev/null when a clone is asked to warm up (vm.ts warmUp()). Absolute path, no spaces.
   */
  warm?: string;
  /**
   * Template only: more interpreters a clone may be asked to warm up, by their number here
   * (RuntimeEntry shellStarts; guest/agent.c --warm-also). Absolute paths, at most 4.
   */
  warmAlso?: readonly string[];
  /**
   * Template only: an interpreter the guest agent starts before the snapshot (python with
   * guest/prestart.py, node with guest/prestart.js),
   * so clones resume with it initialised and waiting for the call. Absolute path, no spaces.
   */
  prestart?: string;
  /**
   * Template only: the agent's --preimport SPEC (src/images/preimport.ts renders it; no spaces):
   * the pre-started Python imports these modules before the snapshot.
   */
  preimport?: string;
}

const MAC = /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/;
const IFNAME = /^[A-Za-z0-9_.-]{1,15}$/;

/**
 * The NIC's QEMU arguments. A tap without vnet headers offers the guest exactly the features a
 * hub port does (no offloads), so a clone restores a template's device state whichever backend
 * either of them has.
 */
export function nicArgs(nic: QemuSpec["nic"]): string[] {
  if (!MAC.test(nic.mac)) throw new Error(`bad MAC ${JSON.stringify(nic.mac)}`);
  const b = nic.backend;
  if (b.kind === "tap" && !IFNAME.test(b.ifname))
    throw new Error(`bad tap name ${JSON.stringify(b.ifname)}`);
  const netdev =
    b.kind === "tap"
      ? `tap,id=n0,ifname=${b.ifname},script=no,downscript=no,vnet_hdr=off`
      : "hubport,id=n0,hubid=0";
  return ["-netdev", netdev, "-device", `virtio-net-device,netdev=n0,mac=${nic.mac}`];
}

/** Interpreter paths go on the kernel command line: keep each one plain token. */
function checkInterpreterPath(path: string): string {
  if (!/^(\/[A-Za-z0-9._+-]+)+$/.test(path) || path.split("/").includes(".."))
    throw new Error(
      `interpreter path not usable on the kernel command line: ${JSON.stringify(path)}`,
    );
  return path;
}

function checkWarmAlso(paths: readonly string[]): readonly string[] {
  if (paths.length > 4) throw new Error(`at most 4 warm-also interpreters, not ${paths.length}`);
  return paths.map(checkInterpreterPath);
}

/** The pre-import spec is one kernel command-line token: no whitespace, no quotes. */
function checkPreimportSpec(spec: string): string {
  if (!/^[A-Za-z0-9_.,;:=/-]+$/.test(spec) || spec.length > 1536)
    throw new Error(
      `pre-import spec not usable on the kernel command line: ${JSON.stringify(spec)}`,
    );
  return spec;
}

export function kernelCommandLine(spec: QemuSpec): string {
  return [
    "quiet",
    "loglevel=0",
    ...(spec.tscKhz ? [`tsc_early_khz=${spec.tscKhz}`] : []),
    "cryptomgr.notests",
    "pci=off",
    "panic=-1",
    "random.trust_cpu=on",
    "rdinit=/init",
    // Under TCG, no user-space ASLR in the guest: QEMU 7.2 keys a translation by its virtual
    // address, so randomised libraries are translated again on every exec (bash -c : 130 vs 45
    // ms in a warm guest). What that gives up: docs/SECURITY.md, "Guest ASLR under TCG".
    ...(spec.accel === "tcg" ? ["norandmaps"] : []),
    // Under TCG the guest's TSC is the host's (QEMU reads the host counter), but its kernel only
    // trusts it once a watchdog agrees; the only other clock is the timer tick, which a busy host
    // delivers late while the guest boots and pre-imports, so the watchdog marked the TSC unstable
    // and every template fell back to counting ticks (refined-jiffies), which loses time whenever
    // QEMU's thread waits for a CPU; the agent times calls and enforces timeouts by that clock.
    // KVM guests use kvm-clock instead.
    ...(spec.accel === "tcg" ? ["tsc=reliable"] : []),
    `scratchrun.scratch_mb=${spec.scratchMb}`,
    `scratchrun.memory_mb=${spec.memoryMb}`,
    ...(spec.warm ? [`scratchrun.warm=${checkInterpreterPath(spec.warm)}`] : []),
    ...(spec.warmAlso?.length
      ? [`scratchrun.warm_also=${checkWarmAlso(spec.warmAlso).join(",")}`]
      : []),
    ...(spec.prestart ? [`scratchrun.prestart=${checkInterpreterPath(spec.prestart)}`] : []),
    ...(spec.preimport ? [`scratchrun.preimport=${checkPreimportSpec(spec.preimport)}`] : []),
  ].join(" ");
}

export function renderQemuArgs(spec: QemuSpec): string[] {
  const accel =
    spec.accel === "kvm"
      ? ["-accel", "kvm", "-cpu", "host"]
      : ["-accel", `tcg,tb-size=${spec.tcgCacheMb}`, "-cpu", "max"];
  const memory: string[] = [];
  if (spec.snapshot) {
    const share = spec.snapshot.mode === "save" ? "on" : "off";
    const backend = `memory-backend-file,id=ram0,size=${spec.guestMb}M,mem-path=${IN_JAIL.memFd},share=${share}`;
    memory.push("-object", backend, "-machine", "memory-backend=ram0");
  }
  return [
    ...["-M", "microvm,x-option-roms=off,rtc=on,isa-serial=off,pit=on,pic=on"],
    ...accel,
    ...["-m", `${spec.guestMb}M`, "-smp", "1"],
    ...memory,
    ...["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"],
    ...["-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"],
    ...["-kernel", IN_JAIL.kernel, "-initrd", IN_JAIL.initramfs],
    ...["-append", kernelCommandLine(spec)],
    ...["-drive", `if=none,id=root,file=${IN_JAIL.disk},format=raw,readonly=on`],
    ...["-device", "virtio-blk-device,drive=root"],
    ...nicArgs(spec.nic),
    // Port 0 is reserved for a console; the agent port and the seed port follow it.
    ...["-device", "virtio-serial-device,max_ports=3"],
    ...["-chardev", `socket,id=channel,path=${IN_JAIL.channel}`],
    ...["-device", `virtserialport,chardev=channel,name=${CHANNEL_PORT_NAME}`],
    ...["-chardev", `socket,id=seed,path=${IN_JAIL.seed},server=on,wait=off`],
    ...["-device", `virtserialport,chardev=seed,name=${SEED_PORT_NAME}`],
    ...["-qmp", `unix:${IN_JAIL.qmp},server=on,wait=off`],
    ...(spec.snapshot?.mode === "restore" ? ["-S", "-incoming", "defer"] : []),
  ];
}
