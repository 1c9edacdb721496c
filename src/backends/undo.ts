/**
 * What a sandbox's start has made so far, undone newest first by one call. Each step of a start
 * pushes its own undo as soon as it has succeeded, so a failure at any step tears down exactly
 * what exists, and the start reads as its recipe: step, undo, step, undo.
 */
export class UndoStack {
  private steps: (() => unknown)[] = [];
  private unwinding: Promise<void> | undefined;

  /** The undo of a step that has just succeeded. */
  push(step: () => unknown): void {
    if (this.unwinding) throw new Error("undo stack already unwound");
    this.steps.push(step);
  }

  /** Everything pushed so far now belongs to one owner, whose teardown undoes all of it. */
  handOver(teardown: () => unknown): void {
    if (this.unwinding) throw new Error("undo stack already unwound");
    this.steps = [teardown];
  }

  /** Undoes every step, newest first, once; a step that fails does not stop the ones below it. */
  unwind(): Promise<void> {
    this.unwinding ??= (async () => {
      const steps = this.steps.reverse();
      this.steps = [];
      for (const step of steps) {
        try {
          await step();
        } catch {
          // Keep tearing down: what a failed step leaves, the server's reaper and the suites'
          // leak checks find.
        }
      }
    })();
    return this.unwinding;
  }
}
