/**
 * Who is calling: the bearer token from the Authorization header (pure), and a per-address limit
 * on failed attempts so keys cannot be guessed at speed.
 */

/** The token of `Authorization: Bearer <token>`, or null. Case-insensitive scheme, one space. */
export function parseBearer(header: string | string[] | undefined): string | null {
  if (typeof header !== "string") return null;
  // 8 KiB: room for an external issuer's JWT (RS256 with its claims is 1-2 KiB); keys are 64.
  const m = /^Bearer ([\x21-\x7e]{1,8192})$/i.exec(header);
  return m?.[1] ?? null;
}

/**
 * A token bucket per client address, charged only by failed authentications: `burst` failures
 * go through at once, then one more per `refillMs`. Bounded memory: the oldest entries go first.
 */
export class FailureLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(
    readonly burst = 20,
    readonly refillMs = 3000,
    private readonly maxEntries = 10_000,
  ) {}

  private level(addr: string, now: number): { tokens: number; at: number } {
    const b = this.buckets.get(addr);
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
    const b = this.level(addr, now);
    this.buckets.delete(addr);
    this.buckets.set(addr, { tokens: Math.max(0, b.tokens - 1), at: now });
    while (this.buckets.size > this.maxEntries) {
      const oldest = this.buckets.keys().next().value;
      if (oldest === undefined) break;
      this.buckets.delete(oldest);
    }
  }
}
