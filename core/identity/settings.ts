/** Tenant status and security settings (SPEC 2.10) as identity reads them. */
import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import type { Queryable } from '../db/pool.ts';

const Security = Type.Object({
  mfa_required_for_all_users: Type.Optional(Type.Boolean()),
  session_timeout_minutes: Type.Optional(Type.Integer({ minimum: 1, maximum: 30 * 24 * 60 })),
  /** Issue 13 item 1: hours a newly registered device key waits before it may step up or sign. */
  device_cooloff_hours: Type.Optional(Type.Integer({ minimum: 0, maximum: 30 * 24 })),
});
const checkSecurity = TypeCompiler.Compile(Security);

/** Idle timeout when a tenant sets none (NIST 800-63B AAL2 re-authentication after 30 min idle). */
export const defaultSessionTimeoutMinutes = 30;
/**
 * Cool-off of a new device key when a tenant sets none (issue 13 item 1): long enough for the
 * customer to read the notification and remove a key they did not add. A SIM swap hands the
 * attacker the OTPs, so an OTP step-up never shortens it.
 */
export const defaultDeviceCooloffHours = 24;

export interface TenantAuthSettings {
  active: boolean;
  mfaRequiredForAll: boolean;
  sessionTimeoutMinutes: number;
  deviceCooloffHours: number;
}

/** undefined: no such tenant. Malformed settings fail closed (MFA on, default timeout). */
export async function tenantSettings(q: Queryable, tenantId: string): Promise<TenantAuthSettings | undefined> {
  const { rows } = await q.query<{ status: string; security: unknown }>('SELECT status, security FROM tenants WHERE id = $1', [tenantId]);
  const row = rows[0];
  if (!row) return undefined;
  const sec: Static<typeof Security> | undefined = checkSecurity.Check(row.security) ? row.security : undefined;
  return {
    active: row.status === 'ACTIVE',
    mfaRequiredForAll: sec ? sec.mfa_required_for_all_users === true : true,
    sessionTimeoutMinutes: sec?.session_timeout_minutes ?? defaultSessionTimeoutMinutes,
    deviceCooloffHours: sec?.device_cooloff_hours ?? defaultDeviceCooloffHours,
  };
}
