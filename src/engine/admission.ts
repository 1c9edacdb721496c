import { ScratchRunError } from "../errors.js";

/**
 * What a call gets from the queue: a slot (call `release` once when done with it), or none
 * because the call was cancelled (its signal aborted) before a slot came. A cancelled call is an
 * answer, not an engine failure: the engine answers it `exit_reason: "cancelled"`, as it answers a
 * call cancelled while it runs.
 */
export type Admitted = { ok: true; release: () => void } | { ok: false; reason: "cancelled" };

/**
 * Bounds how many sandboxes run at once and how many calls may wait. A waiting call leaves the
 * queue when its deadline passes (BUSY) or its signal aborts (cancelled); the queue never grows
 * without bound.
 */
export class Admission {
  private running = 0;
  private readonly waiting: { grant: () => void }[] = [];

  constructor(
    readonly maxConcurrent: number,
    readonly maxQueued: number,
    readonly queueDeadlineMs: number,
  ) {}

  get queued(): number {
    return this.waiting.length;
  }

  get active(): number {
    return this.running;
  }

  /**
   * A slot now, or after the calls queued before this one. Throws BUSY when the queue is full or
   * the wait passes `queueDeadlineMs`; a signal that aborts first (or already has) takes no slot.
   */
  async acquire(signal?: AbortSignal): Promise<Admitted> {
    if (signal?.aborted) return { ok: false, reason: "cancelled" };
    if (this.running < this.maxConcurrent) {
      this.running++;
      return { ok: true, release: this.releaser() };
    }
    if (this.waiting.length >= this.maxQueued)
      throw new ScratchRunError(
        "BUSY",
        `Server busy: ${this.waiting.length} calls already queued`,
        {
          fix: "Retry in a few seconds",
        },
      );
    const granted = await new Promise<boolean>((resolve, reject) => {
      const leave = () => {
        const i = this.waiting.indexOf(entry);
        if (i >= 0) this.waiting.splice(i, 1);
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      };
      const entry = {
        grant: () => {
          leave();
          resolve(true);
        },
      };
      const onAbort = () => {
        leave();
        resolve(false);
      };
      const timer = setTimeout(() => {
        leave();
        reject(
          new ScratchRunError("BUSY", `Waited ${this.queueDeadlineMs} ms for a free sandbox slot`, {
            fix: "Retry in a few seconds",
          }),
        );
      }, this.queueDeadlineMs);
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiting.push(entry);
    });
    // A granted waiter was handed the releasing call's slot: `running` already counts it.
    if (!granted) return { ok: false, reason: "cancelled" };
    return { ok: true, release: this.releaser() };
  }

  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      // The slot passes straight to the first waiter, so a call arriving before that waiter
      // resumes cannot take it and run one more sandbox than maxConcurrent.
      const next = this.waiting[0];
      if (next) next.grant();
      else this.running--;
    };
  }
}
