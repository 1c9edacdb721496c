/**
 * One microVM's life: jail + cgroup + QEMU started, control sockets connected, parked until a call
 * activates it; then killed and destroyed exactly once (QEMU killed, cgroup removed, private
 * directory deleted, uid returned). Where it is in that life is one `Phase`, and every transition
 * is in this file; its start, a recipe of named steps (uid, dir, cgroup, tap, channel, spawn,
 * connect, restore-or-seed), is in vm-start.ts, the snapshot commands it issues in vm-snapshot.ts,
 * the activation of a call in vm-activate.ts.
 */
import { rmSync } from "node:fs";
import type { Socket } from "node:net";
import { join } from "node:path";
import type { ChildProcess } from "node:child_process";
import { CPU_WEIGHT, type Cgroup } from "../../jail/cgroup.js";
import type { DomainAllowlist } from "../../net/allowlist.js";
import type { BrokerSpec } from "../../net/proxy/control.js";
import type { NetworkReport } from "../types.js";
import type { VmNetwork } from "./guest-net.js";
import { Qmp } from "./qmp.js";
import { activateCall } from "./vm-activate.js";
import { saveTemplateState } from "./vm-snapshot.js";
import type { Control, HostContext, StartMode, WarmUp } from "./vm-types.js";

const STDERR_TAIL = 2048;

/**
 * Where a VM is in its life. Its start (vm-start.ts) leaves it parked (boot, clone) or as a template;
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
  private phase: Phase;
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

  /**
   * A VM whose QEMU was just spawned (vm-start.ts): it owns its uid, directory, cgroup, tap and
   * QEMU from here, and `open` holds the sockets its start connects (kill() closes them).
   */
  constructor(o: {
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
    open: Partial<Control>;
  }) {
    this.phase = { name: "starting", open: o.open };
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

  /**
   * The start's last step (vm-start.ts): a started VM is parked (a clone or a cold boot, until
   * activate()) or a template (until saveState()); one killed meanwhile stays stopped.
   */
  started(control: Control, mode: StartMode): void {
    if (this.phase.name !== "starting") throw new Error("killed while starting");
    this.phase =
      control.qmp && mode.kind === "template"
        ? { name: "template", control: { ...control, qmp: control.qmp } }
        : { name: "parked", control };
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
