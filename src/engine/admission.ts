import { ScratchRunError } from "../errors.js";

/**
 * Bounds how many sandboxes run at once and how many calls may wait. A waiting call leaves the
 * queue when its deadline passes or its signal aborts; the queue never grows without bound.
 */
export class Admission {
  private running = 0;
  private readonly waiting: { grant: () => void; fail: (e: Error) => void }[] = [];

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

  async acquire(signal?: AbortSignal): Promise<() => void> {
    if (this.running < this.maxConcurrent) {
      this.running++;
      return this.releaser();
    }
    if (this.waiting.length >= this.maxQueued)
      throw new ScratchRunError(
        "BUSY",
        `Server busy: ${this.waiting.length} calls already queued`,
        {
          fix: "Retry in a few seconds",
        },
      );
    await new Promise<void>((resolve, reject) => {
      const entry = {
        grant: () => {
          clearTimeout(timer);
          signal?.removeEventListener("abort", onAbort);
          resolve();
        },
        fail: (e: Error) => {
          const i = this.waiting.indexOf(entry);
          if (i >= 0) this.waiting.splice(i, 1);
          clearTimeout(timer);
          signal?.removeEventListener("abort", onAbort);
          reject(e);
        },
      };
      const onAbort = () => entry.fail(new ScratchRunError("BUSY", "Cancelled while queued"));
      const timer = setTimeout(
        () =>
          entry.fail(
            new ScratchRunError(
              "BUSY",
              `Waited ${this.queueDeadlineMs} ms for a free sandbox slot`,
              {
                fix: "Retry in a few seconds",
              },
            ),
          ),
        this.queueDeadlineMs,
      );
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiting.push(entry);
    });
    this.running++;
    return this.releaser();
  }

  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.running--;
      const next = this.waiting.shift();
      next?.grant();
    };
  }
}
