/**
 * Per-key admission, in front of the engine's global queue: at most `maxConcurrent` calls of one
 * key in flight (queued or running), and a token bucket of `ratePerMinute` with `burst`.
 * Refusals say how long to wait (Retry-After); nothing ever queues here. One pure rule
 * (`decideQuota`), kept in memory by one server (`KeyQuota`) or in Postgres for API replicas
 * (src/store/shared-quota.ts).
 */
export interface KeyLimits {
  maxConcurrent: number;
  ratePerMinute: number;
  burst: number;
}

export type QuotaDecision =
  | { ok: true; release: () => void }
  | { ok: false; reason: "concurrency" | "rate"; retryAfterS: number };

export interface Bucket {
  tokens: number;
  at: number;
}

export type QuotaVerdict =
  | { ok: true; bucket: Bucket }
  | { ok: false; reason: "concurrency" | "rate"; retryAfterS: number; bucket: Bucket | null };

/**
 * Pure: may a key with `running` calls in flight and this bucket (none yet: full) start one more
 * call now? Returns the bucket to store either way (null: leave it as it was).
 */
export function decideQuota(
  limits: KeyLimits,
  running: number,
  bucket: Bucket | undefined,
  now: number,
): QuotaVerdict {
  const { maxConcurrent, ratePerMinute, burst } = limits;
  if (running >= maxConcurrent)
    return { ok: false, reason: "concurrency", retryAfterS: 1, bucket: null };
  const msPerToken = 60_000 / ratePerMinute;
  const b = bucket ?? { tokens: burst, at: now };
  // Replicas' clocks (and calls stamped before they won the key's lock) may run behind the
  // bucket's last update: time never runs backwards for a bucket.
  const at = Math.max(now, b.at);
  const tokens = Math.min(burst, b.tokens + (at - b.at) / msPerToken);
  if (tokens < 1)
    return {
      ok: false,
      reason: "rate",
      retryAfterS: Math.max(1, Math.ceil(((1 - tokens) * msPerToken) / 1000)),
      bucket: { tokens, at },
    };
  return { ok: true, bucket: { tokens: tokens - 1, at } };
}

export class KeyQuota {
  private readonly inFlight = new Map<string, number>();
  private readonly buckets = new Map<string, Bucket>();

  constructor(readonly limits: KeyLimits) {}

  active(keyId: string): number {
    return this.inFlight.get(keyId) ?? 0;
  }

  /** `limits`: the key's own (its policy), else the server's. */
  tryAcquire(keyId: string, now = Date.now(), limits: KeyLimits = this.limits): QuotaDecision {
    const running = this.active(keyId);
    const v = decideQuota(limits, running, this.buckets.get(keyId), now);
    if (v.bucket) this.buckets.set(keyId, v.bucket);
    if (!v.ok) return { ok: false, reason: v.reason, retryAfterS: v.retryAfterS };
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
