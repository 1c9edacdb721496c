/**
 * What this host can run a microVM with: KVM when /dev/kvm opens read-write AND a probe guest
 * really boots on it (nested or emulated KVM may open fine and still fail), TCG otherwise.
 */
import { spawn } from "node:child_process";
import { closeSync, openSync, readFileSync } from "node:fs";
import type { Isolation } from "../types.js";

export type Accel = "kvm" | "tcg";

export const QEMU_BINARY = "/usr/bin/qemu-system-x86_64";

export const isolationOf = (accel: Accel): Isolation =>
  accel === "kvm" ? "microvm-kvm" : "microvm-tcg";

export function kvmDeviceUsable(path = "/dev/kvm"): boolean {
  try {
    closeSync(openSync(path, "r+"));
    return true;
  } catch {
    return false;
  }
}

/**
 * The host TSC frequency in kHz, rounded to whole MHz, passed to the guest as `tsc_early_khz` so
 * its kernel skips PIT calibration (slow, and under TCG it hung once in 18 boots). Rounded: the
 * host kernel's own calibration (e.g. 2596.136 MHz) can tell one machine from another, the whole
 * MHz names only a CPU class, and the guest clock built on it is off by at most 500 ppm
 * (docs/SECURITY.md, THREAT-MODEL H21). Null when unknown.
 */
export function hostTscKhz(cpuinfo?: string): number | null {
  let text = cpuinfo;
  if (text === undefined) {
    try {
      text = readFileSync("/proc/cpuinfo", "utf8");
    } catch {
      return null;
    }
  }
  const m = /^cpu MHz\s*:\s*([0-9]+(?:\.[0-9]+)?)\s*$/m.exec(text);
  if (!m?.[1]) return null;
  const khz = Math.round(Number(m[1])) * 1000;
  return Number.isFinite(khz) && khz > 100_000 ? khz : null;
}

/**
 * Boots `kernel` under KVM with an init that powers off at once; true when QEMU exits cleanly
 * within `timeoutMs`. Costs ~0.2 s where KVM works.
 */
export function probeKvm(kernel: string, initramfs: string, timeoutMs = 4000): Promise<boolean> {
  return new Promise((resolve) => {
    const child = spawn(
      QEMU_BINARY,
      [
        ...["-M", "microvm,x-option-roms=off,isa-serial=off", "-accel", "kvm", "-cpu", "host"],
        ...["-m", "128", "-smp", "1", "-nodefaults", "-no-user-config", "-display", "none"],
        ...["-no-reboot", "-kernel", kernel, "-initrd", initramfs],
        ...["-append", "quiet panic=-1 rdinit=/bin/busybox -- reboot -f"],
      ],
      { stdio: "ignore", env: {} },
    );
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", () => resolve(false));
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve(code === 0);
    });
  });
}

/**
 * Chooses the accelerator: `forced` (SCRATCHRUN_ACCEL=tcg|kvm) wins (kvm then fails loudly at
 * boot if it does not work); otherwise KVM if the device opens and the probe boots.
 */
export async function detectAccel(
  kernel: string,
  initramfs: string,
  forced: Accel | null = null,
): Promise<Accel> {
  if (forced) return forced;
  if (!kvmDeviceUsable()) return "tcg";
  const key = `${kernel}\0${initramfs}`;
  let probe = probes.get(key);
  if (!probe) probes.set(key, (probe = probeKvm(kernel, initramfs)));
  return (await probe) ? "kvm" : "tcg";
}

/** One probe per process and kernel: the answer does not change while the host runs. */
const probes = new Map<string, Promise<boolean>>();
