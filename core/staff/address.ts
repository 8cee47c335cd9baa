/**
 * SPEC 2.10 `allowed_ip_ranges` on the staff routes core verifies itself (core/staff/auth.ts):
 * the edge applies a tenant's ranges in its policy (tenant_ip_ranges) to every route it decides,
 * but passes the signed-in person's routes (passkeys, sessions, step-up, sign-out) as public, so
 * without this a staff token used from outside the ranges still managed passkeys and stepped up.
 */
import { BlockList, isIP } from 'node:net';
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { parseCidr } from '../admin/webhooks/target.ts';

/** Whether `ip` is inside one of `ranges` (an IPv4 client on a dual-stack socket read as IPv4). */
export function insideRanges(ranges: readonly string[], ip: string): boolean {
  const plain = /^::ffff:/i.test(ip) && isIP(ip.slice(7)) === 4 ? ip.slice(7) : ip;
  const version = isIP(plain);
  if (version === 0) return false;
  const list = new BlockList();
  for (const r of ranges) {
    const c = parseCidr(r);
    if (c) list.addSubnet(c.address, c.prefix, c.family);
  }
  return list.check(plain, version === 6 ? 'ipv6' : 'ipv4');
}

/** 403 FORBIDDEN unless the tenant sets no ranges or `ip` (the edge's x-client-ip) is inside one. */
export async function requireAllowedAddress(
  q: Queryable,
  tenantId: string,
  ip: string | undefined,
): Promise<void> {
  const { rows } = await q.query<{ ranges: unknown }>(
    `SELECT security -> 'allowed_ip_ranges' AS ranges FROM tenants WHERE id = $1`,
    [tenantId],
  );
  const stored = rows[0]?.ranges;
  const ranges = Array.isArray(stored) ? stored.filter((r): r is string => typeof r === 'string') : [];
  if (ranges.length === 0) return;
  if (ip === undefined || !insideRanges(ranges, ip))
    throw new AppError('FORBIDDEN', "the source address is outside the tenant's allowed IP ranges");
}
