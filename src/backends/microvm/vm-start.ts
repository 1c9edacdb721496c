/**
 * The host side of a microVM's start, as named steps, each pushing its own undo onto the start's
 * UndoStack as soon as it has succeeded: a uid, the run directory, the cgroup, the tap (public
 * network), the agent channel's socket, and QEMU spawned in its jail. vm.ts then connects to the
 * VM and restores or seeds it; the helpers that race those waits against QEMU are here too.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { chmodSync, chownSync, mkdtempSync, rmSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ChildProcess } from "node:child_process";
import { CPU_WEIGHT, createCgroup, type Cgroup } from "../../jail/cgroup.js";
import { renderSeccompFilter } from "../../jail/seccomp.js";
import { spawnJailed } from "../../jail/spawn.js";
import type { UndoStack } from "../undo.js";
import { randomMac, type VmNetwork } from "./guest-net.js";
import { renderJailArgs } from "./jail-args.js";
import { renderQemuArgs, type QemuSpec } from "./qemu-args.js";
import { VM_DIR_PREFIX } from "./reap-dirs.js";
import {
  GUEST_KERNEL_MB,
  QEMU_OVERHEAD_MB,
  TAP_NAME,
  type BootOptions,
  type HostContext,
  type StartMode,
} from "./vm-types.js";

/** The namespace backend's seccomp policy, applied to the jailed QEMU too (bwrap --seccomp). */
const QEMU_SECCOMP = renderSeccompFilter();
const QEMU_SECCOMP_FD = 4;
const MiB = 1024 * 1024;
/** QEMU's threads (vCPU, I/O, RCU, workers). */
const QEMU_PIDS = 64;

/** The host uid and gid QEMU runs as. */
export interface VmIds {
  uid: number;
  gid: number;
}

/** Step uid: a host uid of the VM's own (gid: the kvm group under KVM, else the uid). */
export function takeUid(ctx: HostContext, undo: UndoStack): VmIds {
  const uid = ctx.uids.acquire();
  undo.push(() => ctx.uids.release(uid));
  return { uid, gid: ctx.kvmGid ?? uid };
}

/** Step dir: the VM's private run directory (sockets, state), owned by its uid. */
export function makeRunDir(ids: VmIds, undo: UndoStack): string {
  const dir = mkdtempSync(join(tmpdir(), VM_DIR_PREFIX));
  undo.push(() => rmSync(dir, { recursive: true, force: true }));
  chownSync(dir, ids.uid, ids.gid);
  chmodSync(dir, 0o700);
  return dir;
}

/** Step cgroup: QEMU's memory, pids and CPU limits, at the start's CPU weight. */
export async function makeCgroup(
  ctx: HostContext,
  id: string,
  opts: BootOptions,
  mode: StartMode,
  undo: UndoStack,
): Promise<Cgroup> {
  const guestMb = opts.memoryMb + GUEST_KERNEL_MB;
  const cgroup = await createCgroup(ctx.cgroups, id, {
    // A clone's RAM is a private mapping of the template's memfd: a first touch of a page the
    // template never used instantiates it in the memfd (charged here) and a write then copies
    // it, so a clone can use up to twice its guest RAM on the host.
    memoryBytes: ((mode.kind === "boot" ? 1 : 2) * guestMb + QEMU_OVERHEAD_MB) * MiB,
    pids: QEMU_PIDS,
    cpuQuotaPercent: 100,
    cpuWeight: CPU_WEIGHT[opts.priority ?? "call"],
  });
  undo.push(() => cgroup.destroy());
  opts.onCgroup?.(cgroup);
  return cgroup;
}

/** Step tap: a "public" network's tap in a sandbox network namespace, or null (none asked). */
export async function makeTap(
  id: string,
  ids: VmIds,
  opts: BootOptions,
  undo: UndoStack,
): Promise<VmNetwork | null> {
  if (!opts.network) return null;
  const allowlist =
    opts.egressAllowlist !== undefined ? opts.egressAllowlist : opts.network.defaultAllowlist;
  const net = await opts.network.createTap(id, { name: TAP_NAME, uid: ids.uid }, allowlist);
  undo.push(() => net.teardown());
  return net;
}

/** The agent channel's socket, listening for QEMU, and the connection QEMU will make. */
export interface ChannelListener {
  server: Server;
  accepted: Promise<Socket>;
}

/** Step channel: the unix socket QEMU connects the agent's byte stream to, QEMU's alone. */
export async function listenChannel(
  dir: string,
  ids: VmIds,
  undo: UndoStack,
): Promise<ChannelListener> {
  const path = join(dir, "channel.sock");
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(path, () => resolve());
  });
  undo.push(() => server.close());
  chownSync(path, ids.uid, ids.gid);
  chmodSync(path, 0o600);
  const accepted = new Promise<Socket>((resolve) => server.once("connection", resolve));
  return { server, accepted };
}

/**
 * Step spawn: QEMU in its jail (its cgroup, uid, network namespace), fd 3 the snapshot's RAM
 * (QEMU opens /proc/self/fd/3), fd 4 our seccomp program. Its undo is the VM's own destroy().
 */
export function spawnQemu(
  ctx: HostContext,
  parts: {
    ids: VmIds;
    dir: string;
    cgroup: Cgroup;
    net: VmNetwork | null;
    opts: BootOptions;
    mode: StartMode;
  },
): { child: ChildProcess; mac: string } {
  const { ids, dir, cgroup, net, opts, mode } = parts;
  const mac = randomMac();
  const spec: QemuSpec = {
    accel: ctx.accel,
    guestMb: opts.memoryMb + GUEST_KERNEL_MB,
    memoryMb: opts.memoryMb,
    tscKhz: ctx.tscKhz,
    scratchMb: ctx.scratchMb,
    tcgCacheMb: 64,
    nic: {
      mac,
      backend: net ? { kind: "tap" as const, ifname: net.tapName } : { kind: "none" as const },
    },
    ...snapshotSpec(mode),
  };
  const argv = renderJailArgs(
    {
      kernel: ctx.artifacts.kernel,
      initramfs: ctx.artifacts.initramfs,
      disk: ctx.disk,
      runDir: dir,
      kvm: ctx.accel === "kvm",
      net: net ? "tap" : "none",
      seccompFd: QEMU_SECCOMP_FD,
    },
    renderQemuArgs(spec),
  );
  const ramFd =
    mode.kind === "template" ? mode.ramFd : mode.kind === "clone" ? mode.image.ramFd : undefined;
  const child = spawnJailed({
    cgroupProcsFiles: cgroup.procsFiles,
    uid: ids.uid,
    gid: ids.gid,
    argv,
    stdioExtra: [ramFd ?? "ignore", "pipe"],
    ...(net ? { netnsPath: net.netnsPath } : {}),
  });
  (child.stdio[QEMU_SECCOMP_FD] as NodeJS.WritableStream | null)?.end(QEMU_SECCOMP);
  return { child, mac };
}

/** The QEMU arguments a start mode adds: save into or restore from a snapshot, pre-runs. */
function snapshotSpec(mode: StartMode): Partial<QemuSpec> {
  if (mode.kind === "clone") return { snapshot: { mode: "restore" } };
  if (mode.kind !== "template") return {};
  return {
    snapshot: { mode: "save" },
    ...(mode.warm ? { warm: mode.warm } : {}),
    ...(mode.warmAlso?.length ? { warmAlso: mode.warmAlso } : {}),
    ...(mode.prestart ? { prestart: mode.prestart } : {}),
    ...(mode.preimport ? { preimport: mode.preimport } : {}),
  };
}

/** The QEMU a start waits on: whether it has exited, and when. */
export interface Qemu {
  readonly dead: boolean;
  readonly exited: Promise<void>;
}

/** Connects to a unix socket QEMU creates, retrying until it exists or QEMU dies. */
export async function connectRetry(path: string, vm: Qemu, deadline: number): Promise<Socket> {
  for (;;) {
    try {
      return await new Promise<Socket>((resolve, reject) => {
        const s = connect(path, () => {
          s.removeListener("error", reject);
          s.on("error", () => {}); // later errors surface as close/EOF where they matter
          resolve(s);
        });
        s.once("error", reject);
      });
    } catch (e) {
      if (vm.dead || Date.now() > deadline) throw e;
      await sleep(5);
    }
  }
}

/** Resolves with `p`, or rejects when QEMU exits, the boot deadline passes or the signal fires. */
export function raceBoot<T>(p: Promise<T>, vm: Qemu, opts: BootOptions, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${what} within ${opts.readyTimeoutMs} ms`)),
      opts.readyTimeoutMs,
    );
    const onAbort = () => reject(new Error("boot aborted"));
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    if (opts.signal?.aborted) onAbort();
    void vm.exited.then(() => reject(new Error(`QEMU exited (${what})`)));
    p.then(resolve, reject).finally(() => {
      clearTimeout(timer);
      opts.signal?.removeEventListener("abort", onAbort);
    });
  });
}
