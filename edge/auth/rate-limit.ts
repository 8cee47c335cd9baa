/**
 * Per-source rate limits for unauthenticated routes (sign-in, OTP, token endpoints): a token
 * bucket per (source address, route) in this edge instance. Lockout and budgets that must
 * agree across instances live in PostgreSQL; this limiter only blunts floods cheaply.
 *
 * Per instance on purpose (issue 23 item 6): it answers before any database work, so a flood
 * costs no query and cannot eat the 100 ms decision deadline. With N edges behind a load
 * balancer one address may get up to N times these figures in all; each edge's load stays
 * bounded, which is what this limiter is for. Guessing is stopped by the shared lockout and
 * OTP send and verify counters (core/identity/throttle.ts), which count once however many
 * edges there are.
 */

/**
 * Sustained requests per minute per source address and route, with this burst on top. Generous
 * on purpose: mobile carriers put many customers behind one address (CGNAT); per-phone lockout
 * (core/identity) is what stops guessing, this only stops floods.
 */
export const publicPerMinute = 600;
export const publicBurst = 120;
const maxKeys = 100_000;

interface Bucket {
  tokens: number;
  at: number;
}

export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();

  constructor(
    private readonly perMinute = publicPerMinute,
    private readonly burst = publicBurst,
    private readonly now: () => number = Date.now,
  ) {}

  /** The seconds until a token is available for `key` (0: one is), taking nothing. */
  peek(key: string): number {
    const b = this.buckets.get(key);
    if (!b) return 0;
    const rate = this.perMinute / 60_000;
    const tokens = Math.min(this.burst, b.tokens + (this.now() - b.at) * rate);
    return tokens >= 1 ? 0 : Math.ceil((1 - tokens) / rate / 1000);
  }

  /** Take one token; returns 0 when allowed, else the seconds until one is available. */
  take(key: string): number {
    const now = this.now();
    const rate = this.perMinute / 60_000;
    const b = this.buckets.get(key) ?? { tokens: this.burst, at: now };
    b.tokens = Math.min(this.burst, b.tokens + (now - b.at) * rate);
    b.at = now;
    this.buckets.delete(key);
    this.buckets.set(key, b);
    if (this.buckets.size > maxKeys) this.buckets.delete(this.buckets.keys().next().value as string);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.ceil((1 - b.tokens) / rate / 1000);
  }
}

/**
 * Issue 14 item 5: wrong guessable bearer credentials (SCIM credentials and service tokens,
 * looked up by hash) per source address. The same token buckets count failures only: `burst`
 * wrong credentials from one address, then `perMinute` more a minute; past that the address is
 * answered 429 before any lookup until a token refills. A 256-bit random credential cannot be
 * guessed; this keeps an address from hammering the lookups (and the cache of misses) at all.
 * Per edge instance like the flood limiter above (with N edges an address gets N times this).
 */
export const credentialFailuresPerMinute = 10;
export const credentialFailureBurst = 20;

export class CredentialGuard {
  private readonly buckets: RateLimiter;

  constructor(
    perMinute = credentialFailuresPerMinute,
    burst = credentialFailureBurst,
    now: () => number = Date.now,
  ) {
    this.buckets = new RateLimiter(perMinute, burst, now);
  }

  /** Seconds the address must wait before presenting another credential (0: it may). */
  retryAfterS(address: string): number {
    return this.buckets.peek(address);
  }

  /** Count a wrong credential from the address. */
  failed(address: string): void {
    this.buckets.take(address);
  }
}
