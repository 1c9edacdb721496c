import { detectCgroups, listScratchrunCgroups, type CgroupHost } from "../jail/cgroup.js";
import type { SandboxStore } from "./sandboxes.js";
import { ownedCgroups } from "../jail/reap.js";

/**
 * Keeps the sandboxes table true: when a call's sandbox is running, every cgroup whose top
 * process is this server's child is recorded; when a call ends, names whose cgroup is gone are
 * dropped. Steps run one at a time, in order.
 */
export class SandboxTracker {
  private chain: Promise<void> = Promise.resolve();

  constructor(
    private readonly store: SandboxStore,
    private readonly host: CgroupHost = detectCgroups(),
  ) {}

  private enqueue(step: () => Promise<void>): Promise<void> {
    this.chain = this.chain.then(step).catch(() => {});
    return this.chain;
  }

  sandboxRunning(): Promise<void> {
    return this.enqueue(async () => this.store.record(await ownedCgroups(this.host)));
  }

  callEnded(): Promise<void> {
    return this.enqueue(async () => {
      const live = new Set(
        (await listScratchrunCgroups(this.host)).map((d) => d.slice(d.lastIndexOf("/") + 1)),
      );
      this.store.retainOnly(live);
    });
  }
}
