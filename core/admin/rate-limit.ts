/**
 * SPEC 5.5: mutating administration routes are rate limited per source address and per tenant.
 * Fixed one-minute windows in process memory (each core instance limits what it serves; the
 * edge's shared counters cover the public routes). Over the limit: 429 RATE_LIMITED with
 * Retry-After in whole seconds until the window ends.
 */
import { AppError } from '../http/errors.ts';

export interface RateLimits {
  perSourcePerMinute: number;
  perTenantPerMinute: number;
}

/** Generous for consoles and scripts, small enough to stop a runaway loop within a minute. */
export const defaultRateLimits: RateLimits = Object.freeze({ perSourcePerMinute: 120, perTenantPerMinute: 600 });
const windowMs = 60_000;
/** Bound on remembered windows; beyond it, expired windows are dropped first. */
const maxKeys = 50_000;

export class RateLimiter {
  private readonly windows = new Map<string, { start: number; count: number }>();
  constructor(private readonly limits: RateLimits = defaultRateLimits) {}

  /** Count one mutation for the caller's address and tenant, or throw 429. */
  take(caller: { ip: string; tenantId: string }, now: number): void {
    const start = Math.floor(now / windowMs) * windowMs;
    if (this.windows.size > maxKeys) {
      for (const [k, w] of this.windows) if (w.start < start) this.windows.delete(k);
    }
    const keys: [string, number][] = [[`ip:${caller.ip}`, this.limits.perSourcePerMinute], [`tenant:${caller.tenantId}`, this.limits.perTenantPerMinute]];
    for (const [key, limit] of keys) {
      const w = this.windows.get(key);
      if (w && w.start === start && w.count >= limit) {
        const retryAfter = Math.max(1, Math.ceil((start + windowMs - now) / 1000));
        throw new AppError('RATE_LIMITED', `more than ${limit} changes a minute from this ${key.split(':')[0] === 'ip' ? 'address' : 'tenant'}`, { headers: { 'retry-after': String(retryAfter) } });
      }
    }
    for (const [key] of keys) {
      const w = this.windows.get(key);
      if (w && w.start === start) w.count++;
      else this.windows.set(key, { start, count: 1 });
    }
  }
}
