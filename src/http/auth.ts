/**
 * Who is calling: the bearer token from the Authorization header (pure), and a per-address limit
 * on failed attempts so keys cannot be guessed at speed.
 */
import { bucketOf } from "./client-address.js";

/** The token of `Authorization: Bearer <token>`, or null. Case-insensitive scheme, one space. */
export function parseBearer(header: string | string[] | undefined): string | null {
  if (typeof header !== "string") return null;
  // 8 KiB: room for an external issuer's JWT (RS256 with its claims is 1-2 KiB); keys are 64.
  const m = /^Bearer ([\x21-\x7e]{1,8192})$/i.exec(header);
  return m?.[1] ?? null;
}

/**
 * A token bucket per client address (an IPv6 one by its /64), charged only by failed attempts:
 * `burst` failures go through at once, then one more per `refillMs`. Bounded memory: the oldest
 * entries go first. Work that is slow or concurrent (a password check) takes its token before it
 * starts (`take`) and gives it back when it succeeds, so a burst of attempts sent at once is held
 * to the bucket as a sequence of them is.
 */
export class FailureLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(
    readonly burst = 20,
    readonly refillMs = 3000,
    private readonly maxEntries = 10_000,
  ) {}

  private level(addr: string, now: number): { tokens: number; at: number } {
    const b = this.buckets.get(bucketOf(addr));
    if (!b) return { tokens: this.burst, at: now };
    const refilled = Math.min(this.burst, b.tokens + (now - b.at) / this.refillMs);
    return { tokens: refilled, at: now };
  }

  /** Seconds until this address may try again, or 0 if it may try now. */
  retryAfterS(addr: string, now = Date.now()): number {
    const { tokens } = this.level(addr, now);
    return tokens >= 1 ? 0 : Math.max(1, Math.ceil(((1 - tokens) * this.refillMs) / 1000));
  }

  recordFailure(addr: string, now = Date.now()): void {
    this.charge(addr, -1, now);
  }

  /**
   * Takes a token before the attempt, in one step (nothing else runs between the check and the
   * charge): null when the address has none left (wait `retryAfterS`), else the refund to call if
   * the attempt succeeds.
   */
  take(addr: string, now = Date.now()): { refund: (at?: number) => void } | null {
    if (this.retryAfterS(addr, now) > 0) return null;
    this.charge(addr, -1, now);
    let refunded = false;
    return {
      refund: (at = Date.now()) => {
        if (refunded) return;
        refunded = true;
        this.charge(addr, 1, at);
      },
    };
  }

  private charge(addr: string, by: number, now: number): void {
    const key = bucketOf(addr);
    const b = this.level(addr, now);
    this.buckets.delete(key);
    this.buckets.set(key, { tokens: Math.min(this.burst, Math.max(0, b.tokens + by)), at: now });
    while (this.buckets.size > this.maxEntries) {
      const oldest = this.buckets.keys().next().value;
      if (oldest === undefined) break;
      this.buckets.delete(oldest);
    }
  }
}
