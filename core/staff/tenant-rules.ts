/**
 * A tenant's SPEC 2.10 security settings on the staff routes core verifies itself
 * (core/staff/auth.ts): the edge applies `allowed_ip_ranges` (its policy's tenant_ip_ranges) and
 * `require_dpop` (edge/auth/dpop.ts) to every route it decides, but passes the signed-in person's
 * routes (passkeys, sessions, step-up, sign-out) as public, so without these a staff token used
 * from outside the ranges, or as a bearer token where DPoP is required, still worked there.
 */
import { BlockList, isIP } from 'node:net';
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { parseCidr } from '../admin/webhooks/target.ts';

export interface StaffTenantRules {
  allowedRanges: string[];
  requireDpop: boolean;
  suspended: boolean;
}

/** The strings of a stored `security -> 'allowed_ip_ranges'` (anything else: none). */
export function rangesOf(stored: unknown): string[] {
  return Array.isArray(stored) ? stored.filter((r): r is string => typeof r === 'string') : [];
}

export async function staffTenantRules(q: Queryable, tenantId: string): Promise<StaffTenantRules> {
  const { rows } = await q.query<{ ranges: unknown; dpop: unknown; status: string }>(
    `SELECT security -> 'allowed_ip_ranges' AS ranges, security -> 'require_dpop' AS dpop, status FROM tenants WHERE id = $1`,
    [tenantId],
  );
  return {
    allowedRanges: rangesOf(rows[0]?.ranges),
    requireDpop: rows[0]?.dpop === true,
    suspended: rows[0]?.status === 'SUSPENDED',
  };
}

/**
 * A suspended tenant's staff keep step-up and sign-out (a suspended operator's Admin must reach
 * AAL 2 to activate it again, the one thing the edge still lets a suspended tenant do) but not
 * their sessions list or passkey management, which the edge would refuse on any route it decides.
 */
export function requireActiveTenant(rules: StaffTenantRules, path: string): void {
  if (rules.suspended && !/^\/auth\/(mfa\/|logout$)/.test(path))
    throw new AppError('FORBIDDEN', 'the tenant is suspended: only step-up and sign-out remain');
}

/** The eight 16-bit groups of an IPv6 address (a trailing dotted quad is two of them). */
function groupsOf(ip6: string): number[] {
  const text = ip6.replace(/%.*$/, '');
  const quad = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  const hex = quad
    ? `${text.slice(0, quad.index)}${((Number(quad[1]) << 8) | Number(quad[2])).toString(16)}:${((Number(quad[3]) << 8) | Number(quad[4])).toString(16)}`
    : text;
  const [head = '', tail] = hex.split('::');
  const part = (t: string) => (t === '' ? [] : t.split(':').map((g) => Number.parseInt(g, 16)));
  const h = part(head);
  const t = tail === undefined ? [] : part(tail);
  return [...h, ...new Array<number>(8 - h.length - t.length).fill(0), ...t];
}

/** An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, `::ffff:a00:1`) as its IPv4 address; anything else as it is. */
function unmapped(ip: string): string {
  if (isIP(ip) !== 6) return ip;
  const g = groupsOf(ip);
  if (g.slice(0, 5).some((x) => x !== 0) || g[5] !== 0xffff) return ip;
  const [hi = 0, lo = 0] = g.slice(6);
  return `${hi >> 8}.${hi & 0xff}.${lo >> 8}.${lo & 0xff}`;
}

/**
 * A range as the policy reads it (OPA's net.cidr_contains, Go's IPNet.Contains): an IPv4-mapped
 * IPv6 range (`::ffff:10.0.0.0/104`) is that IPv4 range, and otherwise a range holds addresses of
 * its own family only. Node's BlockList also finds IPv4 addresses inside IPv6 ranges such as
 * `::/0`, so core let an IPv4 caller through where the edge refused it.
 */
function rangeOf(text: string): { address: string; prefix: number; family: 'ipv4' | 'ipv6' } | undefined {
  const c = parseCidr(text);
  if (c?.family !== 'ipv6' || isIP(unmapped(c.address)) !== 4 || c.prefix < 96) return c;
  return { address: unmapped(c.address), prefix: c.prefix - 96, family: 'ipv4' };
}

/** Whether `ip` is inside one of `ranges` (an IPv4 client on a dual-stack socket read as IPv4). */
export function insideRanges(ranges: readonly string[], ip: string): boolean {
  const plain = unmapped(ip);
  const version = isIP(plain);
  if (version === 0) return false;
  const family = version === 6 ? 'ipv6' : 'ipv4';
  const list = new BlockList();
  for (const r of ranges) {
    const c = rangeOf(r);
    if (c && c.family === family) list.addSubnet(c.address, c.prefix, c.family);
  }
  return list.check(plain, family);
}

/** Whether the tenant sets no ranges or `ip` (the edge's x-client-ip; none without the edge) is inside one. */
export function addressAllowed(ranges: readonly string[], ip: string | undefined): boolean {
  return ranges.length === 0 || (ip !== undefined && insideRanges(ranges, ip));
}

/** 403 FORBIDDEN unless the tenant sets no ranges or `ip` (the edge's x-client-ip) is inside one. */
export function requireAllowedAddress(rules: StaffTenantRules, ip: string | undefined): void {
  if (!addressAllowed(rules.allowedRanges, ip))
    throw new AppError('FORBIDDEN', "the source address is outside the tenant's allowed IP ranges");
}
