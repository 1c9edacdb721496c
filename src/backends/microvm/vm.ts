/**
 * One microVM's life: jail + cgroup + QEMU started, control sockets connected, parked until a call
 * activates it; then killed and destroyed exactly once (QEMU killed, cgroup removed, private
 * directory deleted, uid returned). Where it is in that life is one `Phase`, and every transition
 * is in this file; the snapshot commands it issues are in vm-snapshot.ts, the activation of a
 * call in vm-activate.ts.
 */
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { chmodSync, chownSync, mkdtempSync, rmSync } from "node:fs";
import { connect, createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ChildProcess } from "node:child_process";
import { ScratchRunError } from "../../errors.js";
import {
  CPU_WEIGHT,
  createCgroup,
  type Cgroup,
  type CgroupHost,
  type CpuPriority,
} from "../../jail/cgroup.js";
import type { UidPool } from "../../jail/uids.js";
import type { DomainAllowlist } from "../../net/allowlist.js";
import type { BrokerSpec } from "../../net/proxy/control.js";
import type { NetworkReport } from "../types.js";
import type { Accel } from "./accel.js";
import type { VmArtifacts } from "../../images/vm/build.js";
import { SEED_PORT, randomMac, type VmNetwork, type VmNetworkProvider } from "./guest-net.js";
import { renderJailArgs } from "./jail-args.js";
import { Qmp } from "./qmp.js";
import { renderQemuArgs, type QemuSpec } from "./qemu-args.js";
import { renderSeccompFilter } from "../../jail/seccomp.js";
import { spawnJailed } from "../../jail/spawn.js";
import { UndoStack } from "../undo.js";
import { activateCall, readByte } from "./vm-activate.js";
import { restoreClone, saveTemplateState, warmUpClone } from "./vm-snapshot.js";
import { VM_DIR_PREFIX } from "./reap-dirs.js";

/** The namespace backend's seccomp policy, applied to the jailed QEMU too (bwrap --seccomp). */
const QEMU_SECCOMP = renderSeccompFilter();
const QEMU_SECCOMP_FD = 4;

const MiB = 1024 * 1024;

/** Guest RAM on top of memory_mb: the guest kernel, init and page tables live there. */
export const GUEST_KERNEL_MB = 64;
/** Host memory QEMU may use beyond guest RAM (TCG translation cache, device state, libraries). */
export const QEMU_OVERHEAD_MB = 160;
/** QEMU's threads (vCPU, I/O, RCU, workers). */
const QEMU_PIDS = 64;
const STDERR_TAIL = 2048;

export interface HostContext {
  artifacts: VmArtifacts;
  disk: string;
  accel: Accel;
  tscKhz: number | null;
  cgroups: CgroupHost;
  uids: UidPool;
  /** gid QEMU runs as: the kvm group under KVM (for /dev/kvm), else its own uid. */
  kvmGid: number | null;
  scratchMb: number;
}

/** A saved "ready" VM: guest RAM in a sealed memfd plus QEMU's device state (a few tens of KB). */
export interface TemplateImage {
  /** Sealed memfd (see sealed-ram.ts), inherited by each clone as fd 3. */
  ramFd: number;
  state: Buffer;
  /** memory_mb the template was booted with (clones must match it). */
  memoryMb: number;
}

/**
 * How a VM starts. boot: cold boot until the guest agent waits for its seed (agent --seed);
 * activate() then seeds it and waits for READY. template: the same into `ramFd` (shared), for
 * saveState(). clone: restore `image` paused (with warmUp: first resumed until the guest has run
 * what a call runs once, or rehearsed it, then paused again; see warmUpClone()); activate()
 * resumes, seeds and waits for READY.
 */
export type StartMode =
  | { kind: "boot" }
  | {
      kind: "template";
      ramFd: number;
      warm?: string;
      warmAlso?: readonly string[];
      prestart?: string;
      preimport?: string;
    }
  | { kind: "clone"; image: TemplateImage; warmUp?: WarmUp; warmAlso?: readonly number[] };

/**
 * How a clone is warmed up before it is parked: "full" runs what a call runs (a second
 * interpreter, or a pre-imported Python's hot paths), "rehearse" only the call's path in the kept
 * interpreter (~4x cheaper to make, the call runs its exit untranslated), "none" parks it cold.
 */
export type WarmUp = "full" | "rehearse" | "none";

/** The tap's name inside the VM's own network namespace (one tap per namespace). */
export const TAP_NAME = "tap0";

export interface BootOptions {
  /** memory_mb of the call; the guest gets this plus GUEST_KERNEL_MB. */
  memoryMb: number;
  readyTimeoutMs: number;
  signal?: AbortSignal;
  /**
   * Give the VM a "public" network: a tap in a sandbox network namespace from this provider, QEMU
   * started inside that namespace. Absent: the NIC is a hub port with nothing behind it.
   */
  network?: VmNetworkProvider;
  /** With `network`: the allowlist its network is made for (null: unrestricted egress). */
  egressAllowlist?: DomainAllowlist | null;
  /**
   * Its CPU weight (default "call"): a template or a pooled VM starts at "background" and a
   * pooled one is promoted when a call takes it.
   */
  priority?: CpuPriority;
  /** Called with its cgroup once made (a pooled start raises its weight when a call waits). */
  onCgroup?: (cgroup: Cgroup) => void;
}

/** The sockets a VM is driven through before its call: the seed port and (not booted) QMP. */
interface Control {
  seed: Socket;
  qmp: Qmp | null;
  /** The agent's byte stream (the call's, once activated). */
  channel: Socket;
}

/**
 * Where a VM is in its life. start() leaves it parked (boot, clone) or as a template;
 * activate() takes a parked VM to serving, once; kill() takes any phase to stopped.
 *   starting ─▶ parked ─▶ activating ─▶ serving ─▶ stopped
 *          └──▶ template (saveState(), then destroyed) ──▶ stopped
 * A phase holds exactly the sockets that are open in it; kill() closes them.
 */
type Phase =
  | { name: "starting"; open: Partial<Control> }
  | { name: "parked"; control: Control }
  | { name: "template"; control: Control & { qmp: Qmp } }
  | { name: "activating"; control: Control }
  | { name: "serving"; channel: Socket; network: "public" | "none"; qmp?: Qmp }
  | { name: "stopped" };

export class MicroVm {
  readonly exited: Promise<void>;
  private phase: Phase = { name: "starting", open: {} };
  private destroying: Promise<void> | null = null;
  private killing: Promise<void> | null = null;
  private stderrTail = "";

  readonly id: string;
  readonly memoryMb: number;
  /** How it started: a clone is paused until activate(), a booted guest is running. */
  readonly kind: StartMode["kind"];
  /** The warm-up this clone ran before it was parked. */
  readonly warmedUp: WarmUp;
  readonly child: ChildProcess;
  /** This VM's MAC (unique per VM; the guest sets it from the seed, clones included). */
  readonly mac: string;
  private readonly ctx: HostContext;
  private readonly uid: number;
  private readonly dir: string;
  private readonly cgroup: Cgroup;
  /** The VM's "public" network, or null (hub port: nothing behind the NIC). */
  private net: VmNetwork | null;

  private constructor(o: {
    id: string;
    memoryMb: number;
    kind: StartMode["kind"];
    warmedUp: WarmUp;
    ctx: HostContext;
    uid: number;
    dir: string;
    cgroup: Cgroup;
    child: ChildProcess;
    mac: string;
    net: VmNetwork | null;
  }) {
    this.id = o.id;
    this.memoryMb = o.memoryMb;
    this.kind = o.kind;
    this.warmedUp = o.warmedUp;
    this.ctx = o.ctx;
    this.uid = o.uid;
    this.dir = o.dir;
    this.cgroup = o.cgroup;
    this.child = o.child;
    this.mac = o.mac;
    this.net = o.net;
    const { child } = o;
    this.exited = new Promise((resolve) => child.once("close", () => resolve()));
    child.on("error", () => {});
    for (const stream of child.stdio) stream?.on("error", () => {}); // EPIPE if QEMU dies early
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (s: string) => {
      this.stderrTail = (this.stderrTail + s).slice(-STDERR_TAIL);
    });
    child.stdout?.resume();
  }

  /** True once QEMU has exited (guest powered off, crashed, or was killed). */
  get dead(): boolean {
    return this.child.exitCode !== null || this.child.signalCode !== null;
  }

  /** What QEMU itself printed (never guest output: the guest has no console device). */
  get qemuDiagnostics(): string {
    return this.stderrTail.trim();
  }

  /** The agent's byte stream of a serving VM, paused just after its READY frame. */
  get channel(): Socket {
    if (this.phase.name !== "serving") throw new Error(`no call channel: VM is ${this.phase.name}`);
    return this.phase.channel;
  }

  static boot(ctx: HostContext, opts: BootOptions): Promise<MicroVm> {
    return MicroVm.start(ctx, opts, { kind: "boot" });
  }

  /**
   * Starts QEMU in its jail, each step undone by one stack if a later one fails: a uid, the run
   * directory, the cgroup, the tap (public network), the agent channel's socket, QEMU; then (the
   * VM owns everything from here, its destroy() undoes it) the seed port, QMP, the channel, and a
   * clone's restore and warm-up, or a cold boot's wait for the seed step.
   */
  static async start(ctx: HostContext, opts: BootOptions, mode: StartMode): Promise<MicroVm> {
    const id = `vm-${randomBytes(6).toString("hex")}`;
    const undo = new UndoStack();
    let vm: MicroVm | null = null;
    try {
      if (opts.network && mode.kind === "template") throw new Error("a template has no network");
      if (mode.kind === "clone" && mode.image.memoryMb !== opts.memoryMb)
        throw new Error("clone memory differs from its template's");

      const uid = ctx.uids.acquire();
      undo.push(() => ctx.uids.release(uid));
      const gid = ctx.kvmGid ?? uid;

      const dir = mkdtempSync(join(tmpdir(), VM_DIR_PREFIX));
      undo.push(() => rmSync(dir, { recursive: true, force: true }));
      chownSync(dir, uid, gid);
      chmodSync(dir, 0o700);

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

      const net = opts.network
        ? await opts.network.createTap(
            id,
            { name: TAP_NAME, uid },
            opts.egressAllowlist !== undefined
              ? opts.egressAllowlist
              : opts.network.defaultAllowlist,
          )
        : null;
      if (net) undo.push(() => net.teardown());

      const channelPath = join(dir, "channel.sock");
      const srv = createServer();
      await new Promise<void>((resolve, reject) => {
        srv.once("error", reject);
        srv.listen(channelPath, () => resolve());
      });
      undo.push(() => srv.close());
      chownSync(channelPath, uid, gid);
      chmodSync(channelPath, 0o600);
      const accepted = new Promise<Socket>((resolve) => srv.once("connection", resolve));

      const mac = randomMac();
      const spec: QemuSpec = {
        accel: ctx.accel,
        guestMb,
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
        mode.kind === "template"
          ? mode.ramFd
          : mode.kind === "clone"
            ? mode.image.ramFd
            : undefined;
      // fd 3: the snapshot's RAM (QEMU opens /proc/self/fd/3); fd 4: our seccomp program.
      const child = spawnJailed({
        cgroupProcsFiles: cgroup.procsFiles,
        uid,
        gid,
        argv,
        stdioExtra: [ramFd ?? "ignore", "pipe"],
        ...(net ? { netnsPath: net.netnsPath } : {}),
      });
      (child.stdio[QEMU_SECCOMP_FD] as NodeJS.WritableStream | null)?.end(QEMU_SECCOMP);
      const warmedUp = mode.kind === "clone" ? (mode.warmUp ?? "none") : "none";
      const v = new MicroVm({
        id,
        memoryMb: opts.memoryMb,
        kind: mode.kind,
        warmedUp,
        ctx,
        uid,
        dir,
        cgroup,
        child,
        mac,
        net,
      });
      vm = v;
      // The VM owns its uid, directory, cgroup and tap now: destroy() undoes them, after QEMU.
      undo.handOver(async () => {
        srv.close();
        await v.destroy();
      });

      const open = v.phase.name === "starting" ? v.phase.open : {};
      const deadline = Date.now() + opts.readyTimeoutMs;
      const connectTo = (name: string) => connectRetry(join(dir, name), v, deadline);
      // The sockets exist once QEMU has parsed its arguments; connect before the guest runs
      // (the seed port must look connected to the guest, see guest/agent-seed.c).
      const seed = await raceBoot(connectTo("seed.sock"), v, opts, "no seed port");
      open.seed = seed;
      const qmp =
        mode.kind === "boot"
          ? null
          : await raceBoot(connectTo("qmp.sock").then(Qmp.over), v, opts, "no QMP");
      if (qmp) open.qmp = qmp;
      const channel = await raceBoot(accepted, v, opts, "QEMU did not connect the agent channel");
      open.channel = channel;
      srv.close();
      if (qmp && mode.kind === "clone") {
        await raceBoot(
          restoreClone(qmp, mode.image.state, () => connectTo("state.sock")),
          v,
          opts,
          "restore did not complete",
        );
        if (warmedUp !== "none")
          await raceBoot(
            warmUpClone(qmp, seed, warmedUp, mode.warmAlso ?? []),
            v,
            opts,
            "warm-up did not complete",
          );
      } else {
        await raceBoot(
          readByte(seed, SEED_PORT.waiting),
          v,
          opts,
          "guest did not reach its seed step",
        );
      }
      if (v.phase.name !== "starting") throw new Error("killed while starting");
      v.phase =
        qmp && mode.kind === "template"
          ? { name: "template", control: { seed, qmp, channel } }
          : { name: "parked", control: { seed, qmp, channel } };
      return v;
    } catch (cause) {
      const detail = vm?.qemuDiagnostics ? ` (QEMU: ${vm.qemuDiagnostics.slice(-400)})` : "";
      await undo.unwind();
      if (cause instanceof ScratchRunError) throw cause;
      throw new ScratchRunError(
        "SANDBOX_FAILED",
        `microVM boot failed: ${errText(cause)}${detail}`,
        {
          cause,
        },
      );
    }
  }

  /** Template: stops the guest (blocked in the agent's seed step) and saves its device state. */
  async saveState(): Promise<Buffer> {
    if (this.phase.name !== "template") throw new Error(`not a template: VM is ${this.phase.name}`);
    return saveTemplateState(this.phase.control.qmp, join(this.dir, "state.sock"), {
      uid: this.uid,
      gid: this.ctx.kvmGid ?? this.uid,
    });
  }

  /**
   * Makes a parked VM serve one call: with network "none" its network (if any) is torn down
   * first, so nothing but a tap in an unnamed, uplink-less namespace is left behind the NIC; then
   * activateCall() resumes a clone, seeds the guest and awaits READY. Once per VM; afterwards its
   * seed port and QMP are closed: the call's code can reach nothing but the agent channel.
   */
  async activate(timeoutMs: number, network: "public" | "none" = "none"): Promise<void> {
    const phase = this.phase;
    if (phase.name !== "parked") throw new Error(`cannot activate a VM that is ${phase.name}`);
    if (network === "public" && !this.net) throw new Error("this VM has no network");
    const { control } = phase;
    this.phase = { name: "activating", control };
    if (network === "none" && this.net) await this.net.teardown();
    await activateCall({
      seed: control.seed,
      resume: this.kind === "clone" ? control.qmp : null,
      channel: control.channel,
      exited: this.exited,
      mac: this.mac,
      net: network === "public" ? this.net : null,
      timeoutMs,
    });
    control.seed.destroy();
    control.qmp?.close();
    // kill() may have run meanwhile: a stopped VM stays stopped.
    if (this.phase.name === "activating")
      this.phase = { name: "serving", channel: control.channel, network };
  }

  /**
   * A session's VM: connects QMP again once serving (activate() closed the start's), so the host
   * can stop the guest between the session's calls (pause) and continue it before each (resume).
   * The guest reaches nothing of it: QMP is QEMU's socket on the host side.
   */
  async keepControl(): Promise<void> {
    if (this.phase.name !== "serving")
      throw new Error(`cannot control a VM that is ${this.phase.name}`);
    const qmp = await Qmp.open(join(this.dir, "qmp.sock"));
    if (this.phase.name !== "serving") {
      qmp.close();
      throw new Error("the VM stopped meanwhile");
    }
    this.phase.qmp = qmp;
  }

  /** Stops the guest's vCPUs (QMP `stop`): it uses no CPU until resume(). */
  async pause(): Promise<void> {
    await this.sessionQmp().execute("stop");
  }

  /** Continues a paused guest (QMP `cont`). */
  async resume(): Promise<void> {
    await this.sessionQmp().execute("cont");
  }

  /** QMP's run state of a session's VM ("paused", "running", ...), for tests and diagnostics. */
  async runState(): Promise<string> {
    const r = (await this.sessionQmp().execute("query-status")) as { status?: unknown };
    return String(r?.status);
  }

  private sessionQmp(): Qmp {
    if (this.phase.name !== "serving" || !this.phase.qmp)
      throw new Error(`no session control: VM is ${this.phase.name}`);
    return this.phase.qmp;
  }

  /** Raises a VM started at the background CPU weight to a call's (the pool, on take). */
  promote(): Promise<void> {
    return this.cgroup.setCpuWeight(CPU_WEIGHT.call);
  }

  /** Back to the background weight: a start a call waited for that the call did not take. */
  demote(): Promise<void> {
    return this.cgroup.setCpuWeight(CPU_WEIGHT.background);
  }

  /** True when the VM has a sandbox network (pooled VMs on a server with egress). */
  get hasNetwork(): boolean {
    return this.net !== null;
  }

  /** The allowlist this VM's network was made for (null: unrestricted or no network). */
  get egressAllowlist(): DomainAllowlist | null {
    return this.net?.allowlist ?? null;
  }

  /** A proxied network: the allowlist of the call about to run. */
  async useAllowlist(allow: DomainAllowlist, broker?: BrokerSpec | null): Promise<void> {
    await this.net?.useAllowlist(allow, broker);
  }

  /** What this VM's network refused during its call; undefined without a live network. */
  async networkReport(): Promise<NetworkReport | undefined> {
    if (!this.net || this.phase.name !== "serving" || this.phase.network !== "public")
      return undefined;
    return this.net.report().catch(() => undefined);
  }

  /**
   * Stops the VM for good: its sockets closed, SIGKILL to the jail's process group, and the
   * cgroup's kill loop (no new processes, SIGKILL to each, until the cgroup is empty). Once this
   * settles every process of the VM has exited (the jail's may wait to be reaped); its cgroup,
   * directory, network and uid are still there for destroy(). Idempotent.
   */
  kill(): Promise<void> {
    this.killing ??= (async () => {
      closeSockets(this.phase);
      this.phase = { name: "stopped" };
      try {
        if (!this.dead && this.child.pid) process.kill(-this.child.pid, "SIGKILL");
      } catch {
        // already gone
      }
      await this.cgroup.killAll().catch(() => {});
    })();
    return this.killing;
  }

  /** Kills QEMU and removes everything this VM had on the host, once it has exited. Idempotent. */
  destroy(): Promise<void> {
    this.destroying ??= (async () => {
      await this.kill();
      await this.exited;
      // kill() emptied the cgroup (the jail's inner processes, not our children, included);
      // destroy() kills again if anything is left before it removes the directories.
      await this.cgroup.destroy().catch(() => {});
      // After QEMU: the tap's namespace dies with its last process; the names, the host link and
      // the nft tables go here. What a failed teardown leaves, the server's reaper removes.
      await this.net?.teardown().catch(() => {});
      rmSync(this.dir, { recursive: true, force: true });
      this.ctx.uids.release(this.uid);
    })();
    return this.destroying;
  }

  /** Host memory counters of this VM's cgroup. */
  async stats() {
    return this.cgroup.stats();
  }

  /** Host processes of this VM and its cgroup's memory charge now (guest RAM QEMU has touched). */
  async usage(): Promise<{ pids: number[]; memoryBytes: number }> {
    return { pids: await this.pids(), memoryBytes: (await this.cgroup.stats()).memoryBytes };
  }

  /** Every host process of this VM (the jail and QEMU), from its cgroup. */
  async pids(): Promise<number[]> {
    return this.destroying ? [] : this.cgroup.pids().catch(() => []);
  }
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

/** Closes whatever sockets a phase holds. */
function closeSockets(phase: Phase): void {
  const c: Partial<Control> =
    phase.name === "starting"
      ? phase.open
      : phase.name === "serving"
        ? { channel: phase.channel, qmp: phase.qmp ?? null }
        : phase.name === "stopped"
          ? {}
          : phase.control;
  c.channel?.destroy();
  c.seed?.destroy();
  c.qmp?.close();
}

/** Connects to a unix socket QEMU creates, retrying until it exists or QEMU dies. */
async function connectRetry(path: string, vm: MicroVm, deadline: number): Promise<Socket> {
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

const errText = (e: unknown) => (e instanceof Error ? e.message : String(e));

/** Resolves with `p`, or rejects when QEMU exits, the boot deadline passes or the signal fires. */
function raceBoot<T>(p: Promise<T>, vm: MicroVm, opts: BootOptions, what: string): Promise<T> {
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
