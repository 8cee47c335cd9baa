/**
 * SPEC 5.5: mutating administration routes are rate limited per source address and per tenant.
 * Fixed one-minute windows counted in PostgreSQL (`admin_rate_counters`, migration 0750), so
 * every core instance draws on one budget: with N instances the limit is still the limit, not N
 * times it (issue 23 item 6). Over the limit: 429 RATE_LIMITED with Retry-After in whole seconds
 * until the window ends.
 */
import type { Db } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';

export interface RateLimits {
  perSourcePerMinute: number;
  perTenantPerMinute: number;
}

/** Generous for consoles and scripts, small enough to stop a runaway loop within a minute. */
export const defaultRateLimits: RateLimits = Object.freeze({
  perSourcePerMinute: 120,
  perTenantPerMinute: 600,
});
export const rateWindowMs = 60_000;

/**
 * One statement per request. The address is counted first and the tenant only when the address
 * was under its limit, so a caller refused for its own address does not spend its tenant's
 * budget. Each upsert increments only below the limit, under the row lock, so concurrent
 * instances never count past it. The window start comes from the application clock (the same
 * on every instance within NTP's skew, far below the window).
 */
const takeSql = `
WITH ip AS (
  INSERT INTO admin_rate_counters AS c (window_start, scope, count) SELECT $1, $2, 1 WHERE $3 >= 1
  ON CONFLICT (window_start, scope) DO UPDATE SET count = c.count + 1 WHERE c.count < $3
  RETURNING count
), tenant AS (
  INSERT INTO admin_rate_counters AS c (window_start, scope, count) SELECT $1, $4, 1 WHERE $5 >= 1 AND EXISTS (SELECT 1 FROM ip)
  ON CONFLICT (window_start, scope) DO UPDATE SET count = c.count + 1 WHERE c.count < $5
  RETURNING count
)
SELECT EXISTS (SELECT 1 FROM ip) AS ip_ok, EXISTS (SELECT 1 FROM tenant) AS tenant_ok`;

export class RateLimiter {
  constructor(
    private readonly db: Db,
    private readonly limits: RateLimits = defaultRateLimits,
  ) {}

  /** Count one mutation for the caller's address and tenant, or throw 429. */
  async take(caller: { ip: string; tenantId: string }, now: number): Promise<void> {
    const start = Math.floor(now / rateWindowMs) * rateWindowMs;
    const window = new Date(start);
    const ipScope = `ip:${caller.ip}`;
    const { rows } = await this.db.query<{ ip_ok: boolean; tenant_ok: boolean }>(takeSql, [
      window,
      ipScope,
      this.limits.perSourcePerMinute,
      `tenant:${caller.tenantId}`,
      this.limits.perTenantPerMinute,
    ]);
    const r = rows[0];
    if (r?.ip_ok === true && r.tenant_ok) return;
    const byIp = r?.ip_ok !== true;
    // Refused for the tenant: give the address back the slot this request took.
    if (!byIp)
      await this.db.query(
        'UPDATE admin_rate_counters SET count = count - 1 WHERE window_start = $1 AND scope = $2 AND count > 0',
        [window, ipScope],
      );
    const limit = byIp ? this.limits.perSourcePerMinute : this.limits.perTenantPerMinute;
    const retryAfter = Math.max(1, Math.ceil((start + rateWindowMs - now) / 1000));
    throw new AppError(
      'RATE_LIMITED',
      `more than ${limit} changes a minute from this ${byIp ? 'address' : 'tenant'}`,
      { headers: { 'retry-after': String(retryAfter) } },
    );
  }
}
