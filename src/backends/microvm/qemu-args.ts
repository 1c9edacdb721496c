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
  /** Snapshot RAM image (restore only). */
  memImage: "/vm/mem",
  runDir: "/run/vm",
  channel: "/run/vm/channel.sock",
  seed: "/run/vm/seed.sock",
  qmp: "/run/vm/qmp.sock",
} as const;

export const CHANNEL_PORT_NAME = "scratchrun.0";
export const SEED_PORT_NAME = "scratchrun.seed";

export interface QemuSpec {
  accel: Accel;
  /** Guest RAM, MiB. */
  guestMb: number;
  tscKhz: number | null;
  /** tmpfs size of the guest's writable layers (overlay upper and /tmp), MiB. */
  scratchMb: number;
  /** TCG translation cache, MiB (QEMU's default is 1 GiB of address space). */
  tcgCacheMb: number;
  /**
   * Snapshot support. "save": guest RAM in a shared file at `memPath` (for the template VM).
   * "restore": RAM mapped private (copy on write) from the jail's memImage, and an incoming
   * migration is awaited on QMP. Absent: plain anonymous RAM.
   */
  snapshot?: { mode: "save"; memPath: string } | { mode: "restore" };
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
    `scratchrun.scratch_mb=${spec.scratchMb}`,
    ...(spec.snapshot ? ["scratchrun.seed=1"] : []),
  ].join(" ");
}

export function renderQemuArgs(spec: QemuSpec): string[] {
  const accel =
    spec.accel === "kvm"
      ? ["-accel", "kvm", "-cpu", "host"]
      : ["-accel", `tcg,tb-size=${spec.tcgCacheMb}`, "-cpu", "max"];
  const memory: string[] = [];
  if (spec.snapshot) {
    const backend =
      spec.snapshot.mode === "save"
        ? `memory-backend-file,id=ram0,size=${spec.guestMb}M,mem-path=${spec.snapshot.memPath},share=on`
        : `memory-backend-file,id=ram0,size=${spec.guestMb}M,mem-path=${IN_JAIL.memImage},share=off,readonly=on`;
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
    ...["-device", "virtio-serial-device,max_ports=2"],
    ...["-chardev", `socket,id=channel,path=${IN_JAIL.channel}`],
    ...["-device", `virtserialport,chardev=channel,name=${CHANNEL_PORT_NAME}`],
    ...(spec.snapshot
      ? [
          ...["-chardev", `socket,id=seed,path=${IN_JAIL.seed},server=on,wait=off`],
          ...["-device", `virtserialport,chardev=seed,name=${SEED_PORT_NAME}`],
        ]
      : []),
    ...["-qmp", `unix:${IN_JAIL.qmp},server=on,wait=off`],
    ...(spec.snapshot?.mode === "restore" ? ["-incoming", "defer"] : []),
  ];
}
