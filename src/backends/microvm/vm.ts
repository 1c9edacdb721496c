/**
 * One microVM's life: jail + cgroup + QEMU started, agent channel accepted, READY seen; then
 * destroyed exactly once (QEMU killed, cgroup removed, private directory deleted, uid returned).
 */
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { chmodSync, chownSync, mkdtempSync, rmSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ChildProcess } from "node:child_process";
import { ScratchRunError } from "../../errors.js";
import { createCgroup, type Cgroup, type CgroupHost } from "../../jail/cgroup.js";
import type { UidPool } from "../../jail/uids.js";
import type { DomainAllowlist } from "../../net/allowlist.js";
import type { NetworkReport } from "../types.js";
import { waitForReady } from "../../protocol/session.js";
import type { Accel } from "./accel.js";
import type { VmArtifacts } from "./build.js";
import {
  encodeSeed,
  guestConfigOf,
  SEED_PORT,
  randomMac,
  type VmNetwork,
  type VmNetworkProvider,
} from "./guest-net.js";
import { renderJailArgs } from "./jail-args.js";
import { Qmp } from "./qmp.js";
import { renderQemuArgs, type QemuSpec } from "./qemu-args.js";
import { renderSeccompFilter } from "../../jail/seccomp.js";
import { spawnJailed } from "../../jail/spawn.js";

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
 * what a call runs once, or rehearsed it, then paused again; see warmUp()); activate() resumes,
 * seeds and waits for READY.
 */
export type StartMode =
  | { kind: "boot" }
  | { kind: "template"; ramFd: number; warm?: string; prestart?: string; preimport?: string }
  | { kind: "clone"; image: TemplateImage; warmUp?: WarmUp };

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
}

export class MicroVm {
  /** The agent's byte stream, paused just after its READY frame (run with alreadyReady). */
  channel!: Socket;
  readonly exited: Promise<void>;
  private destroying: Promise<void> | null = null;
  private killing: Promise<void> | null = null;
  private stderrTail = "";
  private qmp: Qmp | null = null;
  private seed: Socket | null = null;
  /** A restored clone that has not been resumed yet. */
  paused = false;
  /** The warm-up this clone ran before it was parked (warmUp()). */
  warmedUp: WarmUp = "none";
  /** Why the network teardown in destroy() failed, if it did (reaping removes the rest). */
  teardownError: unknown = null;
  /** Waiting in the agent's seed step (activate() pending). */
  pending = false;
  /** Network mode the guest was seeded with (set by activate()). */
  networkMode: "public" | "none" | null = null;

  private constructor(
    readonly id: string,
    readonly memoryMb: number,
    private readonly ctx: HostContext,
    private readonly uid: number,
    private readonly dir: string,
    private readonly cgroup: Cgroup,
    readonly child: ChildProcess,
    /** This VM's MAC (unique per VM; the guest sets it from the seed, clones included). */
    readonly mac: string,
    /** The VM's "public" network, or null (hub port: nothing behind the NIC). */
    private net: VmNetwork | null,
  ) {
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

  static boot(ctx: HostContext, opts: BootOptions): Promise<MicroVm> {
    return MicroVm.start(ctx, opts, { kind: "boot" });
  }

  static async start(ctx: HostContext, opts: BootOptions, mode: StartMode): Promise<MicroVm> {
    const id = `vm-${randomBytes(6).toString("hex")}`;
    const uid = ctx.uids.acquire();
    const gid = ctx.kvmGid ?? uid;
    let dir: string | null = null;
    let cgroup: Cgroup | null = null;
    let server: Server | null = null;
    let vm: MicroVm | null = null;
    let net: VmNetwork | null = null;
    try {
      dir = mkdtempSync(join(tmpdir(), "scratchrun-vm-"));
      chownSync(dir, uid, gid);
      chmodSync(dir, 0o700);
      const guestMb = opts.memoryMb + GUEST_KERNEL_MB;
      cgroup = await createCgroup(ctx.cgroups, id, {
        // A clone's RAM is a private mapping of the template's memfd: a first touch of a page the
        // template never used instantiates it in the memfd (charged here) and a write then copies
        // it, so a clone can use up to twice its guest RAM on the host.
        memoryBytes: ((mode.kind === "boot" ? 1 : 2) * guestMb + QEMU_OVERHEAD_MB) * MiB,
        pids: QEMU_PIDS,
        cpuQuotaPercent: 100,
      });
      if (opts.network) {
        if (mode.kind === "template") throw new Error("a template has no network");
        net = await opts.network.createTap(
          id,
          { name: TAP_NAME, uid },
          opts.egressAllowlist !== undefined ? opts.egressAllowlist : opts.network.defaultAllowlist,
        );
      }
      const mac = randomMac();
      const channelPath = join(dir, "channel.sock");
      const srv = createServer();
      server = srv;
      await new Promise<void>((resolve, reject) => {
        srv.once("error", reject);
        srv.listen(channelPath, () => resolve());
      });
      chownSync(channelPath, uid, gid);
      chmodSync(channelPath, 0o600);
      const accepted = new Promise<Socket>((resolve) => srv.once("connection", resolve));

      const spec: QemuSpec = {
        accel: ctx.accel,
        guestMb,
        tscKhz: ctx.tscKhz,
        scratchMb: ctx.scratchMb,
        tcgCacheMb: 64,
        nic: {
          mac,
          backend: net ? { kind: "tap" as const, ifname: net.tapName } : { kind: "none" as const },
        },
        ...(mode.kind === "template" ? { snapshot: { mode: "save" as const } } : {}),
        ...(mode.kind === "clone" ? { snapshot: { mode: "restore" as const } } : {}),
        ...(mode.kind === "template" && mode.warm ? { warm: mode.warm } : {}),
        ...(mode.kind === "template" && mode.prestart ? { prestart: mode.prestart } : {}),
        ...(mode.kind === "template" && mode.preimport ? { preimport: mode.preimport } : {}),
      };
      if (mode.kind === "clone" && mode.image.memoryMb !== opts.memoryMb)
        throw new Error("clone memory differs from its template's");
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
      const fd3 =
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
        stdioExtra: [fd3 ?? "ignore", "pipe"],
        ...(net ? { netnsPath: net.netnsPath } : {}),
      });
      (child.stdio[QEMU_SECCOMP_FD] as NodeJS.WritableStream | null)?.end(QEMU_SECCOMP);
      vm = new MicroVm(id, opts.memoryMb, ctx, uid, dir, cgroup, child, mac, net);
      net = null; // the VM owns it now: destroy() tears it down
      const v = vm;
      const deadline = Date.now() + opts.readyTimeoutMs;
      // The sockets exist once QEMU has parsed its arguments; connect before the guest runs
      // (the seed port must look connected to the guest, see guest/agent-seed.c).
      v.seed = await raceBoot(
        connectRetry(join(dir, "seed.sock"), v, deadline),
        v,
        opts,
        "no seed port",
      );
      if (mode.kind !== "boot") {
        v.qmp = await raceBoot(
          connectRetry(join(dir, "qmp.sock"), v, deadline).then((s) => Qmp.over(s)),
          v,
          opts,
          "no QMP",
        );
      }
      const socket = await raceBoot(accepted, v, opts, "QEMU did not connect the agent channel");
      srv.close();
      server = null;
      v.channel = socket;
      if (mode.kind === "clone") {
        await raceBoot(v.restore(mode.image), v, opts, "restore did not complete");
        if (mode.warmUp && mode.warmUp !== "none")
          await raceBoot(v.warmUp(mode.warmUp), v, opts, "warm-up did not complete");
        v.paused = true;
      } else {
        await raceBoot(
          readByte(v.seed!, SEED_PORT.waiting),
          v,
          opts,
          "guest did not reach its seed step",
        );
      }
      v.pending = mode.kind !== "template";
      return v;
    } catch (cause) {
      server?.close();
      await net?.teardown().catch(() => {});
      const detail = vm?.qemuDiagnostics ? ` (QEMU: ${vm.qemuDiagnostics.slice(-400)})` : "";
      if (vm) await vm.destroy();
      else {
        await cgroup?.destroy().catch(() => {});
        if (dir) rmSync(dir, { recursive: true, force: true });
        ctx.uids.release(uid);
      }
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

  /** Clone: feeds the template's device state to QEMU's incoming migration; VM stays paused. */
  private async restore(image: TemplateImage): Promise<void> {
    const qmp = this.qmp!;
    await qmp.execute("migrate-set-capabilities", {
      capabilities: [{ capability: "x-ignore-shared", state: true }],
    });
    await qmp.execute("migrate-incoming", { uri: "unix:/run/vm/state.sock" });
    const s = await connectRetry(join(this.dir, "state.sock"), this, Date.now() + 10_000);
    await new Promise<void>((resolve, reject) => {
      s.once("error", reject);
      s.end(image.state, () => resolve());
    });
    await waitStatus(qmp, (st) => st === "paused", "incoming migration");
    s.destroy();
  }

  /**
   * A restored clone about to be pooled runs what a call will run (a second pre-started Python
   * or node runs an empty call and exits; bash runs on /dev/null; the agent writes and removes
   * a file in the code directory) and is paused again. Under TCG each QEMU process translates
   * guest code afresh, and a clone's first call paid for translating the kernel's, the agent's
   * and the interpreter's paths; after this the call finds them translated. Before the seed: nothing of it is the
   * call's (docs/decisions/0003-microvm.md). "rehearse": a Python only runs the call's path in
   * the kept interpreter (no second one), node and bash only the agent's own steps.
   */
  private async warmUp(kind: "full" | "rehearse"): Promise<void> {
    const qmp = this.qmp!;
    const waiting = readByte(this.seed!, SEED_PORT.waiting);
    this.seed!.resume();
    await qmp.execute("cont");
    this.seed!.write(Buffer.of(kind === "full" ? SEED_PORT.warmUp : SEED_PORT.rehearse));
    await waiting;
    await qmp.execute("stop");
    await waitStatus(qmp, (st) => st === "paused", "pausing after the warm-up");
    this.warmedUp = kind;
  }

  /** Template: stops the guest (blocked in the agent's seed step) and saves its device state. */
  async saveState(): Promise<Buffer> {
    const qmp = this.qmp!;
    const path = join(this.dir, "state.sock");
    const srv = createServer();
    await new Promise<void>((resolve, reject) => {
      srv.once("error", reject);
      srv.listen(path, () => resolve());
    });
    try {
      chownSync(path, this.uid, this.ctx.kvmGid ?? this.uid);
      const received = new Promise<Buffer>((resolve, reject) => {
        srv.once("connection", (c: Socket) => {
          const chunks: Buffer[] = [];
          let size = 0;
          c.on("data", (b: Buffer) => {
            size += b.length;
            if (size > 64 * MiB) return reject(new Error("migration state too large"));
            chunks.push(b);
          });
          c.once("end", () => resolve(Buffer.concat(chunks)));
          c.once("error", reject);
        });
      });
      await qmp.execute("stop");
      await qmp.execute("migrate-set-capabilities", {
        capabilities: [{ capability: "x-ignore-shared", state: true }],
      });
      await qmp.execute("migrate", { uri: "unix:/run/vm/state.sock" });
      const state = await received;
      for (;;) {
        const r = (await qmp.execute("query-migrate")) as { status?: string };
        if (r.status === "completed") return state;
        if (r.status === "failed" || r.status === "cancelled")
          throw new Error(`template migration ${r.status}`);
        await sleep(5);
      }
    } finally {
      srv.close();
    }
  }

  /**
   * Makes the VM serve one call: with network "none" its network (if any) is torn down first, so
   * nothing but a tap in an unnamed, uplink-less namespace is left behind the NIC; a clone is
   * resumed; then the guest gets its seed (fresh entropy, the wall clock, its MAC and, for
   * "public", its address; applied by the agent before it says READY) and the agent's READY is
   * awaited. Once per VM.
   */
  async activate(timeoutMs: number, network: "public" | "none" = "none"): Promise<void> {
    if (!this.pending) throw new Error("VM already activated");
    this.pending = false;
    if (network === "public" && !this.net) throw new Error("this VM has no network");
    if (network === "none" && this.net) await this.net.teardown();
    this.networkMode = network;
    if (this.paused) {
      this.paused = false;
      await this.qmp!.execute("cont");
    }
    this.seed!.write(
      Buffer.concat([
        Buffer.of(SEED_PORT.seed),
        encodeSeed({
          entropy: randomBytes(64),
          nowMs: Date.now(),
          mac: this.mac,
          net: network === "public" && this.net ? guestConfigOf(this.net) : null,
        }),
      ]),
    );
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), timeoutMs);
    try {
      const ready = await Promise.race([
        waitForReady(this.channel, abort.signal),
        this.exited.then(() => ({ ok: false as const, failure: { detail: "QEMU exited" } })),
      ]);
      if (!ready.ok) throw new Error(`clone did not become ready: ${ready.failure.detail}`);
    } finally {
      clearTimeout(timer);
      abort.abort();
    }
    this.seed!.destroy();
    this.qmp?.close();
    this.seed = null;
    this.qmp = null;
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
  async useAllowlist(allow: DomainAllowlist): Promise<void> {
    await this.net?.useAllowlist(allow);
  }

  /** What this VM's network refused during its call; undefined without a live network. */
  async networkReport(): Promise<NetworkReport | undefined> {
    if (!this.net || this.networkMode !== "public") return undefined;
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
      this.channel?.destroy();
      this.seed?.destroy();
      this.qmp?.close();
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
      // the nft tables go here.
      await this.net?.teardown().catch((err: unknown) => {
        this.teardownError = err;
      });
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

/** Resolves when `byte` arrives on the socket (anything else is a protocol error). */
function readByte(s: Socket, byte: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const onData = (b: Buffer) => {
      s.removeListener("data", onData);
      s.pause();
      if (b.length === 1 && b[0] === byte) resolve();
      else reject(new Error("unexpected bytes on the seed port"));
    };
    s.on("data", onData);
    s.once("error", reject);
    s.once("close", () => reject(new Error("seed port closed")));
  });
}

async function waitStatus(qmp: Qmp, ok: (s: string) => boolean, what: string): Promise<void> {
  for (;;) {
    const r = (await qmp.execute("query-status")) as { status?: string };
    if (r.status && ok(r.status)) return;
    if (r.status === "internal-error" || r.status === "shutdown")
      throw new Error(`${what}: VM status ${r.status}`);
    await sleep(5);
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
    void vm.exited.then(() =>
      reject(new Error(`QEMU exited before ${what === "no READY" ? "READY" : "connecting"}`)),
    );
    p.then(resolve, reject).finally(() => {
      clearTimeout(timer);
      opts.signal?.removeEventListener("abort", onAbort);
    });
  });
}
