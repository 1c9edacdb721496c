/**
 * A microVM's start, as a recipe of named steps (startMicroVm), each host step pushing its own
 * undo onto the start's UndoStack as soon as it has succeeded: a uid, the run directory, the
 * cgroup, the tap (public network), the agent channel's socket, and QEMU spawned in its jail; then
 * the VM (vm.ts) owns them, and the start connects to it and restores or seeds it. The helpers
 * that race those waits against QEMU are here too.
 */
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { chmodSync, chownSync, mkdtempSync, rmSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ChildProcess } from "node:child_process";
import { ScratchRunError } from "../../errors.js";
import { CPU_WEIGHT, createCgroup, type Cgroup } from "../../jail/cgroup.js";
import { renderSeccompFilter } from "../../jail/seccomp.js";
import { spawnJailed } from "../../jail/spawn.js";
import { UndoStack } from "../undo.js";
import { randomMac, SEED_PORT, type VmNetwork } from "./guest-net.js";
import { renderJailArgs } from "./jail-args.js";
import { Qmp } from "./qmp.js";
import { renderQemuArgs, type QemuSpec } from "./qemu-args.js";
import { VM_DIR_PREFIX } from "./reap-dirs.js";
import { MicroVm } from "./vm.js";
import { readByte } from "./vm-activate.js";
import { restoreClone, warmUpClone } from "./vm-snapshot.js";
import {
  GUEST_KERNEL_MB,
  QEMU_OVERHEAD_MB,
  TAP_NAME,
  type BootOptions,
  type Control,
  type HostContext,
  type StartMode,
} from "./vm-types.js";

/** The namespace backend's seccomp policy, applied to the jailed QEMU too (bwrap --seccomp). */
const QEMU_SECCOMP = renderSeccompFilter();
const QEMU_SECCOMP_FD = 4;
const MiB = 1024 * 1024;
/** QEMU's threads (vCPU, I/O, RCU, workers). */
const QEMU_PIDS = 64;

/**
 * Starts a VM as a recipe of named steps, each pushing its undo onto one stack so that a failure
 * at any step tears down exactly what exists: uid, dir, cgroup, tap, channel, spawn; then (the VM
 * owns everything from here, its destroy() undoes it) connect and restore-or-seed.
 */
export async function startMicroVm(
  ctx: HostContext,
  opts: BootOptions,
  mode: StartMode,
): Promise<MicroVm> {
  const id = `vm-${randomBytes(6).toString("hex")}`;
  const undo = new UndoStack();
  let vm: MicroVm | null = null;
  try {
    if (opts.network && mode.kind === "template") throw new Error("a template has no network");
    if (mode.kind === "clone" && mode.image.memoryMb !== opts.memoryMb)
      throw new Error("clone memory differs from its template's");
    const ids = takeUid(ctx, undo);
    const dir = makeRunDir(ids, undo);
    const cgroup = await makeCgroup(ctx, id, opts, mode, undo);
    const net = await makeTap(id, ids, opts, undo);
    const channel = await listenChannel(dir, ids, undo);
    const { child, mac } = spawnQemu(ctx, { ids, dir, cgroup, net, opts, mode });
    const warmedUp = mode.kind === "clone" ? (mode.warmUp ?? "none") : "none";
    const open: Partial<Control> = {};
    const v = new MicroVm({
      ...{ id, memoryMb: opts.memoryMb, kind: mode.kind, warmedUp, ctx, uid: ids.uid, dir },
      ...{ cgroup, child, mac, net, open },
    });
    vm = v;
    // The VM owns its uid, directory, cgroup and tap now: destroy() undoes them, after QEMU.
    undo.handOver(async () => {
      channel.server.close();
      await v.destroy();
    });
    const deadline = Date.now() + opts.readyTimeoutMs;
    const control = await connectVm(v, dir, open, { opts, mode, channel, deadline });
    await restoreOrSeed(v, dir, control, { opts, mode, deadline });
    v.started(control, mode);
    return v;
  } catch (cause) {
    const detail = vm?.qemuDiagnostics ? ` (QEMU: ${vm.qemuDiagnostics.slice(-400)})` : "";
    await undo.unwind();
    if (cause instanceof ScratchRunError) throw cause;
    throw new ScratchRunError("SANDBOX_FAILED", `microVM boot failed: ${errText(cause)}${detail}`, {
      cause,
    });
  }
}

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

/** What the VM-side steps of a start wait with: its options, mode and one deadline. */
interface Waits {
  opts: BootOptions;
  mode: StartMode;
  deadline: number;
}

/**
 * Step connect: the seed port, QMP (not for a cold boot) and the agent channel, each open socket
 * held in `open` (the VM's starting phase: kill() closes them). The sockets exist once QEMU has
 * parsed its arguments; connect before the guest runs (the seed port must look connected to the
 * guest, see guest/agent-seed.c).
 */
async function connectVm(
  vm: Qemu,
  dir: string,
  open: Partial<Control>,
  w: Waits & { channel: ChannelListener },
): Promise<Control> {
  const { opts, mode, channel: listener, deadline } = w;
  const connectTo = (name: string) => connectRetry(join(dir, name), vm, deadline);
  const seed = await raceBoot(connectTo("seed.sock"), vm, opts, "no seed port");
  open.seed = seed;
  const qmp =
    mode.kind === "boot"
      ? null
      : await raceBoot(connectTo("qmp.sock").then(Qmp.over), vm, opts, "no QMP");
  if (qmp) open.qmp = qmp;
  const channel = await raceBoot(
    listener.accepted,
    vm,
    opts,
    "QEMU did not connect the agent channel",
  );
  open.channel = channel;
  listener.server.close();
  return { seed, qmp, channel };
}

/**
 * Step restore-or-seed: a clone restores its template's device state (and runs its warm-up);
 * a cold boot or a template waits until the guest agent reaches its seed step.
 */
async function restoreOrSeed(vm: Qemu, dir: string, c: Control, w: Waits): Promise<void> {
  const { opts, mode, deadline } = w;
  if (c.qmp && mode.kind === "clone") {
    const state = () => connectRetry(join(dir, "state.sock"), vm, deadline);
    await raceBoot(
      restoreClone(c.qmp, mode.image.state, state),
      vm,
      opts,
      "restore did not complete",
    );
    if (mode.warmUp && mode.warmUp !== "none")
      await raceBoot(
        warmUpClone(c.qmp, c.seed, mode.warmUp, mode.warmAlso ?? []),
        vm,
        opts,
        "warm-up did not complete",
      );
  } else {
    await raceBoot(
      readByte(c.seed, SEED_PORT.waiting),
      vm,
      opts,
      "guest did not reach its seed step",
    );
  }
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

const errText = (e: unknown) => (e instanceof Error ? e.message : String(e));
