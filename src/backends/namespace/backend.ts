import { randomBytes } from "node:crypto";
import type { ChildProcess } from "node:child_process";
import { createCgroup, detectCgroups, type CgroupHost } from "../../jail/cgroup.js";
import { renderSeccompFilter } from "../../jail/seccomp.js";
import { spawnJailed } from "../../jail/spawn.js";
import { UidPool } from "../../jail/uids.js";
import { runAgentSession } from "../../protocol/session.js";
import { LIMITS } from "../../schema/limits.js";
import type { Backend, BackendOutcome, RunOptions, SandboxJob } from "../types.js";
import { renderBwrapArgs } from "./bwrap-args.js";

export interface NamespaceBackendOptions {
  rootfsDir: string;
  agentDir: string;
  /** Hook for network "public": prepares a netns per sandbox (src/net). Absent: none only. */
  network?: NetworkProvider;
}

export interface NetworkProvider {
  /** A fresh network namespace with egress rules; resolvConf is a host file path to bind. */
  create(id: string): Promise<{
    netnsPath: string;
    resolvConf: string;
    blockedCount(): Promise<number>;
    teardown(): Promise<void>;
  }>;
}

/** Grace the host gives the agent past the code's own timeout before destroying the sandbox. */
const HOST_GRACE_MS = 3000;
const MiB = 1024 * 1024;

/**
 * The namespace backend: one bubblewrap jail per call, in its own cgroup, as its own host uid,
 * destroyed before run() returns. It shares the host kernel (see docs/SECURITY.md).
 */
export class NamespaceBackend implements Backend {
  readonly name = "namespace" as const;
  readonly isolation = "namespace" as const;
  private readonly uids = new UidPool();
  private readonly cgroups: CgroupHost;
  private readonly seccomp = renderSeccompFilter();
  private readonly live = new Set<ChildProcess>();
  /** Every run() in flight, so close() can wait for their teardown. */
  private readonly inflight = new Set<Promise<unknown>>();
  private readonly closing = new AbortController();

  constructor(private readonly options: NamespaceBackendOptions) {
    this.cgroups = detectCgroups();
  }

  run(job: SandboxJob, options: RunOptions): Promise<BackendOutcome> {
    if (this.closing.signal.aborted) return Promise.reject(new Error("backend is closed"));
    const signal = AbortSignal.any([options.signal, this.closing.signal]);
    const p = this.runOnce(job, { ...options, signal });
    this.inflight.add(p);
    const forget = () => this.inflight.delete(p);
    p.then(forget, forget);
    return p;
  }

  private async runOnce(job: SandboxJob, options: RunOptions): Promise<BackendOutcome> {
    const started = Date.now();
    const id = `ns-${randomBytes(6).toString("hex")}`;
    const uid = this.uids.acquire();
    const cleanups: (() => Promise<void>)[] = [async () => this.uids.release(uid)];
    try {
      const cgroup = await createCgroup(this.cgroups, id, {
        memoryBytes: job.memoryMb * MiB,
        pids: LIMITS.pids,
        cpuQuotaPercent: 100,
      });
      cleanups.unshift(() => cgroup.destroy());

      let net: Awaited<ReturnType<NetworkProvider["create"]>> | undefined;
      if (job.network === "public") {
        if (!this.options.network) throw new Error("network provider missing");
        net = await this.options.network.create(id);
        cleanups.unshift(net.teardown);
      }

      const argv = renderBwrapArgs({
        rootfsDir: this.options.rootfsDir,
        agentDir: this.options.agentDir,
        scratchBytes: LIMITS.scratchMb * MiB,
        network: net ? "shared" : "none",
        ...(net ? { resolvConf: net.resolvConf } : {}),
        seccompFd: 3,
      });
      const child = spawnJailed({
        cgroupProcsFiles: cgroup.procsFiles,
        uid,
        gid: uid,
        argv,
        stdioExtra: ["pipe"],
        ...(net ? { netnsPath: net.netnsPath } : {}),
      });
      this.live.add(child);
      const exited = new Promise<void>((resolve) => child.once("close", () => resolve()));
      cleanups.unshift(async () => {
        await cgroup.killAll();
        if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
        await exited;
        this.live.delete(child);
      });
      child.on("error", () => {});
      for (const stream of child.stdio) stream?.on("error", () => {});
      const seccompPipe = child.stdio[3] as NodeJS.WritableStream | null;
      seccompPipe?.end(this.seccomp);
      // Agent diagnostics are sandbox-controlled bytes: drained, never logged.
      if (process.env.SCRATCHRUN_DEBUG_JAIL === "1") child.stderr?.pipe(process.stderr);
      else child.stderr?.resume();

      const sandboxReadyMs = Date.now() - started;
      const agent = await runAgentSession(
        { input: child.stdout!, output: child.stdin! },
        job.request,
        {
          signal: options.signal,
          hardDeadlineMs: job.request.timeoutMs + HOST_GRACE_MS,
          ...(options.onEvent ? { onEvent: options.onEvent } : {}),
        },
      );
      // After DONE the agent exits by itself and takes the sandbox with it: give it a moment so
      // killAll finds an empty cgroup instead of polling for exiting processes.
      await Promise.race([exited, new Promise((r) => setTimeout(r, 100).unref())]);
      await cgroup.killAll();
      const stats = await cgroup.stats();
      const blocked = net ? await net.blockedCount().catch(() => undefined) : undefined;
      return {
        agent,
        isolation: this.isolation,
        oomKilled: stats.oomKills > 0 || (agent.exit?.oomKills ?? 0) > 0,
        sandboxReadyMs,
        ...(blocked !== undefined ? { blockedConnections: blocked } : {}),
      };
    } finally {
      for (const cleanup of cleanups) {
        try {
          await cleanup();
        } catch {
          // Keep tearing down; leak checks in tests catch what is left.
        }
      }
    }
  }

  /** Cancels every call in flight and waits until each sandbox is torn down (cgroup, netns, uid). */
  async close(): Promise<void> {
    this.closing.abort();
    for (const child of this.live) child.kill("SIGKILL");
    await Promise.allSettled([...this.inflight]);
  }
}
