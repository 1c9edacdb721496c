/**
 * One microVM's life: jail + cgroup + QEMU started, agent channel accepted, READY seen; then
 * destroyed exactly once (QEMU killed, cgroup removed, private directory deleted, uid returned).
 */
import { randomBytes } from "node:crypto";
import { chmodSync, chownSync, mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ChildProcess } from "node:child_process";
import { ScratchRunError } from "../../errors.js";
import { createCgroup, type Cgroup, type CgroupHost } from "../../jail/cgroup.js";
import { spawnJailed } from "../../jail/spawn.js";
import type { UidPool } from "../../jail/uids.js";
import { waitForReady } from "../../protocol/session.js";
import type { Accel } from "./accel.js";
import type { VmArtifacts } from "./build.js";
import { renderJailArgs } from "./jail-args.js";
import { renderQemuArgs, type QemuSpec } from "./qemu-args.js";

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

export interface BootOptions {
  /** memory_mb of the call; the guest gets this plus GUEST_KERNEL_MB. */
  memoryMb: number;
  readyTimeoutMs: number;
  signal?: AbortSignal;
}

export class MicroVm {
  /** The agent's byte stream, paused just after its READY frame (run with alreadyReady). */
  channel!: Socket;
  readonly exited: Promise<void>;
  private destroying: Promise<void> | null = null;
  private stderrTail = "";

  private constructor(
    readonly id: string,
    readonly memoryMb: number,
    private readonly ctx: HostContext,
    private readonly uid: number,
    private readonly dir: string,
    private readonly cgroup: Cgroup,
    readonly child: ChildProcess,
  ) {
    this.exited = new Promise((resolve) => child.once("close", () => resolve()));
    child.on("error", () => {});
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

  static async boot(ctx: HostContext, opts: BootOptions): Promise<MicroVm> {
    const id = `vm-${randomBytes(6).toString("hex")}`;
    const uid = ctx.uids.acquire();
    const gid = ctx.kvmGid ?? uid;
    let dir: string | null = null;
    let cgroup: Cgroup | null = null;
    let server: Server | null = null;
    let vm: MicroVm | null = null;
    try {
      dir = mkdtempSync(join(tmpdir(), "scratchrun-vm-"));
      chownSync(dir, uid, gid);
      chmodSync(dir, 0o700);
      const guestMb = opts.memoryMb + GUEST_KERNEL_MB;
      cgroup = await createCgroup(ctx.cgroups, id, {
        memoryBytes: (guestMb + QEMU_OVERHEAD_MB) * MiB,
        pids: QEMU_PIDS,
        cpuQuotaPercent: 100,
      });
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
      };
      const argv = renderJailArgs(
        {
          kernel: ctx.artifacts.kernel,
          initramfs: ctx.artifacts.initramfs,
          disk: ctx.disk,
          runDir: dir,
          kvm: ctx.accel === "kvm",
        },
        renderQemuArgs(spec),
      );
      const child = spawnJailed({ cgroupProcsFiles: cgroup.procsFiles, uid, gid, argv });
      vm = new MicroVm(id, opts.memoryMb, ctx, uid, dir, cgroup, child);
      const v = vm;
      const socket = await raceBoot(accepted, v, opts, "QEMU did not connect the agent channel");
      srv.close();
      server = null;
      v.channel = socket;
      const readyAbort = new AbortController();
      const ready = await raceBoot(
        waitForReady(socket, readyAbort.signal),
        v,
        opts,
        "no READY",
      ).finally(() => readyAbort.abort());
      if (!ready.ok) throw new Error(`agent: ${ready.failure.detail}`);
      return v;
    } catch (cause) {
      server?.close();
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

  /** Kills QEMU and removes everything this VM had on the host. Idempotent. */
  destroy(): Promise<void> {
    this.destroying ??= (async () => {
      this.channel?.destroy();
      try {
        if (!this.dead && this.child.pid) process.kill(-this.child.pid, "SIGKILL");
      } catch {
        // already gone
      }
      await this.cgroup.killAll().catch(() => {});
      await this.exited;
      await this.cgroup.destroy().catch(() => {});
      rmSync(this.dir, { recursive: true, force: true });
      this.ctx.uids.release(this.uid);
    })();
    return this.destroying;
  }

  /** Host memory counters of this VM's cgroup. */
  async stats() {
    return this.cgroup.stats();
  }

  /** Every host process of this VM (the jail and QEMU), from its cgroup. */
  async pids(): Promise<number[]> {
    return this.destroying ? [] : this.cgroup.pids().catch(() => []);
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
