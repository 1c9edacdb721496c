/**
 * A bound on password checks at once. scrypt runs in libuv's thread pool (4 threads unless
 * UV_THREADPOOL_SIZE says otherwise), which every file read, DNS lookup and zlib call of the
 * server shares: a burst of sign-ins, sent by anyone without a credential, once filled it and a
 * bystander's call waited seconds for a thread. Here one check runs at a time (`maxRunning`: a
 * thread of the pool), `maxWaiting` more wait in order, and past that a sign-in is refused at once
 * (BUSY) with nothing checked. After each check its slot rests as long as the check took
 * (`restRatio`) before the next waiting one starts, so a burst takes at most half of one core
 * (one check alone still answers at once): a check takes tens of ms, so that is still about ten
 * sign-ins a second, and on a small host (two cores) a bystander's call keeps most of its CPU.
 */
export class PasswordChecks {
  private running = 0;
  private readonly waiting: (() => void)[] = [];
  /** For the metrics and the tests: checks finished, the most that ran at once, refusals. */
  readonly counts = { done: 0, mostAtOnce: 0, refused: 0 };

  constructor(
    readonly maxRunning = 1,
    readonly maxWaiting = 32,
    readonly restRatio = 1,
  ) {}

  get runningNow(): number {
    return this.running;
  }

  get waitingNow(): number {
    return this.waiting.length;
  }

  /** Runs `check` in its turn; null, without running it, when too many wait already. */
  async run<T>(check: () => Promise<T>): Promise<T | null> {
    if (this.running >= this.maxRunning) {
      if (this.waiting.length >= this.maxWaiting) {
        this.counts.refused++;
        return null;
      }
      // A finishing check hands its slot straight to the first waiter (running stays counted).
      await new Promise<void>((wake) => this.waiting.push(wake));
    } else this.running++;
    this.counts.mostAtOnce = Math.max(this.counts.mostAtOnce, this.running);
    const started = performance.now();
    try {
      return await check();
    } finally {
      this.counts.done++;
      // The caller has its answer now; the slot is handed on after the rest.
      const rest = (performance.now() - started) * this.restRatio;
      if (rest > 0 && this.waiting.length > 0) setTimeout(() => this.release(), rest);
      else this.release();
    }
  }

  private release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.running--;
  }
}
