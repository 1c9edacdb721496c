/**
 * Per-key admission, in front of the engine's global queue: at most `maxConcurrent` calls of one
 * key in flight (queued or running), and a token bucket of `ratePerMinute` with `burst`.
 * Refusals say how long to wait (Retry-After); nothing ever queues here.
 */
export interface KeyLimits {
  maxConcurrent: number;
  ratePerMinute: number;
  burst: number;
}

export type QuotaDecision =
  | { ok: true; release: () => void }
  | { ok: false; reason: "concurrency" | "rate"; retryAfterS: number };

export class KeyQuota {
  private readonly inFlight = new Map<string, number>();
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(readonly limits: KeyLimits) {}

  active(keyId: string): number {
    return this.inFlight.get(keyId) ?? 0;
  }

  tryAcquire(keyId: string, now = Date.now()): QuotaDecision {
    const { maxConcurrent, ratePerMinute, burst } = this.limits;
    const running = this.active(keyId);
    if (running >= maxConcurrent) return { ok: false, reason: "concurrency", retryAfterS: 1 };
    const msPerToken = 60_000 / ratePerMinute;
    const b = this.buckets.get(keyId) ?? { tokens: burst, at: now };
    const tokens = Math.min(burst, b.tokens + (now - b.at) / msPerToken);
    if (tokens < 1) {
      this.buckets.set(keyId, { tokens, at: now });
      return {
        ok: false,
        reason: "rate",
        retryAfterS: Math.max(1, Math.ceil(((1 - tokens) * msPerToken) / 1000)),
      };
    }
    this.buckets.set(keyId, { tokens: tokens - 1, at: now });
    this.inFlight.set(keyId, running + 1);
    let released = false;
    return {
      ok: true,
      release: () => {
        if (released) return;
        released = true;
        const n = this.active(keyId) - 1;
        if (n <= 0) this.inFlight.delete(keyId);
        else this.inFlight.set(keyId, n);
      },
    };
  }
}
