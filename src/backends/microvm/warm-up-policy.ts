/**
 * How a clone made for the pool is warmed up before it is parked (vm.ts warmUp()): the quiet and
 * CPU rule, and which other interpreters a shell runtime's clone starts too (its recent calls'
 * shell starts).
 */
import { setTimeout as sleep } from "node:timers/promises";
import type { RuntimeName } from "../../schema/exec.js";
import { shellStartPaths, shellStartsNamed } from "../../runtimes/shell-starts.js";
import type { SandboxJob } from "../types.js";
import { prestartInterpreter, type Flavour } from "../prestart.js";
import type { Accel } from "./accel.js";
import type { WarmUp } from "./vm-types.js";

/** How long no call must have started or ended before a new clone gets the full warm-up. */
const QUIET_MS = 150;
/** How long a shell call's use of another interpreter keeps it in its runtime's clones' warm-up. */
const SHELL_STARTS_WINDOW_MS = 10 * 60_000;

export class WarmUpPolicy {
  /** When a call last started or ended (ms since the epoch). */
  private lastCallAt = 0;
  /** Per shell runtime: when a call last started each of its other interpreters (by number). */
  private readonly shellStartsSeen = new Map<RuntimeName, Map<number, number>>();

  /**
   * `cpus`: with fewer calls running than this, a clone made meanwhile is rehearsed; `busy`: the
   * calls getting or running in a VM right now.
   */
  constructor(private readonly o: { accel: Accel; cpus: number; busy: () => number }) {}

  /** A call starts: the quiet window restarts, and its shell starts are noted. */
  callStarted(job: SandboxJob): void {
    this.lastCallAt = Date.now();
    this.noteShellStarts(job);
  }

  /** A call ended: the quiet window restarts. */
  callEnded(): void {
    this.lastCallAt = Date.now();
  }

  /**
   * The warm-up of a clone of (runtime, flavour) made now, and the shell starts it runs too. A
   * rehearsal runs in the kept interpreter; a runtime without one (bash) would get nothing and its
   * call would run bash cold (~200 ms against ~60 ms warm in the bench): its full warm-up (one
   * bash on /dev/null) is as cheap as a rehearsal. With no call running, a shell's clone also
   * starts the interpreters its runtime's recent calls started (`node -v` in a bash call: ~250 ms
   * cold under TCG, ~40 warm). While calls run, that CPU is theirs: a back-to-back client's next
   * clone is made on the spare CPU.
   */
  async forClone(
    runtime: RuntimeName,
    flavour: Flavour,
  ): Promise<{ warmUp: WarmUp; warmAlso: number[] }> {
    const now = await this.now();
    const warmUp = now === "rehearse" && !prestartInterpreter(runtime) ? "full" : now;
    const warmAlso = now === "full" && flavour === "plain" ? this.shellStartsRecent(runtime) : [];
    return { warmUp, warmAlso };
  }

  /**
   * "full" when no call is in flight and none started or ended in the last QUIET_MS (the wait is
   * there because a refill starts as a call ends, a few ms before a busy client's next call
   * arrives). While calls run: "rehearse" if a CPU is left for it (a back-to-back client's next
   * clone, made on the spare CPU in ~180 ms instead of ~700), else "none": on a host whose CPUs
   * all run calls a warm-up costs more CPU than it saves the call, and that CPU is the calls'
   * throughput. Under KVM: "none".
   */
  private async now(): Promise<WarmUp> {
    // Under KVM the guest runs natively: there is no translation cache to fill, and the template
    // already left the guest's page cache and the pre-imported modules warm.
    if (this.o.accel === "kvm") return "none";
    for (;;) {
      const busy = this.o.busy();
      if (busy > 0) return busy < this.o.cpus ? "rehearse" : "none";
      // A loop: a timer may fire a millisecond early by Date.now(), and a call that starts or
      // ends meanwhile moves the window.
      const wait = this.lastCallAt + QUIET_MS - Date.now();
      if (wait <= 0) return "full";
      await sleep(Math.min(wait, 10));
    }
  }

  /** Notes which of its runtime's other interpreters a shell call starts (shellStartsRecent). */
  private noteShellStarts(job: SandboxJob): void {
    if (shellStartPaths(job.runtime).length === 0) return; // not a shell: nothing to read
    const codePath = job.request.argv.at(-1);
    const file = job.request.files.find((f) => f.path === codePath);
    if (!file) return;
    const named = shellStartsNamed(job.runtime, Buffer.from(file.content).toString("utf8"));
    if (named.length === 0) return;
    const seen = this.shellStartsSeen.get(job.runtime) ?? new Map<number, number>();
    for (const n of named) seen.set(n, Date.now());
    this.shellStartsSeen.set(job.runtime, seen);
  }

  /** The runtime's shell starts (by number) some call named in the last SHELL_STARTS_WINDOW_MS. */
  private shellStartsRecent(runtime: RuntimeName): number[] {
    const seen = this.shellStartsSeen.get(runtime);
    if (!seen) return [];
    return [...seen]
      .filter(([, at]) => Date.now() - at < SHELL_STARTS_WINDOW_MS)
      .map(([n]) => n)
      .sort((a, b) => a - b);
  }
}
