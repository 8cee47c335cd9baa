/**
 * A tenant's SPEC 2.10 security settings on the staff routes core verifies itself
 * (core/staff/auth.ts): the edge applies `allowed_ip_ranges` (its policy's tenant_ip_ranges) and
 * `require_dpop` (edge/auth/dpop.ts) to every route it decides, but passes the signed-in person's
 * routes (passkeys, sessions, step-up, sign-out) as public, so without these a staff token used
 * from outside the ranges, or as a bearer token where DPoP is required, still worked there.
 */
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { addressAllowed } from '../../shared/ip-ranges.ts';

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

/** 403 FORBIDDEN unless the tenant sets no ranges or `ip` (the edge's x-client-ip) is inside one. */
export function requireAllowedAddress(rules: StaffTenantRules, ip: string | undefined): void {
  if (!addressAllowed(rules.allowedRanges, ip))
    throw new AppError('FORBIDDEN', "the source address is outside the tenant's allowed IP ranges");
}
