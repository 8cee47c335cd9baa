/** Tenant status and security settings (SPEC 2.10) as identity reads them. */
import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import type { Queryable } from '../../shared/db/pool.ts';
import { defaultAddressPolicy, type AddressPolicy } from './address-throttle.ts';

const Security = Type.Object({
  mfa_required_for_all_users: Type.Optional(Type.Boolean()),
  session_timeout_minutes: Type.Optional(Type.Integer({ minimum: 1, maximum: 30 * 24 * 60 })),
  /** Issue 13 item 1: hours a newly registered device key waits before it may step up or sign. */
  device_cooloff_hours: Type.Optional(Type.Integer({ minimum: 0, maximum: 30 * 24 })),
  /** SPEC 2.10, issue 17 item 3: sign in only with a DPoP proof (USSD sessions excepted: README). */
  require_dpop: Type.Optional(Type.Boolean()),
  /** Issue 17 item 3: proofs at sign-in, refresh and the token endpoint carry a server nonce (RFC 9449 §8). */
  require_dpop_nonce: Type.Optional(Type.Boolean()),
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

/**
 * `security.address_throttle` (issue 13 item 4): the per-address sign-in throttle, each field
 * defaulting to defaultAddressPolicy. Bounds: fewer than 20 failures (four customers' full
 * per-phone allowances) would lock a carrier NAT out again; the window (6 h) and the longest
 * delay (12 h) stay short enough that a counter idle for a day is inert, which is when
 * housekeeping deletes it (core/housekeeping/prune.ts).
 */
export const AddressThrottle = Type.Object(
  {
    failures: Type.Optional(Type.Integer({ minimum: 20, maximum: 100_000 })),
    window_minutes: Type.Optional(Type.Integer({ minimum: 1, maximum: 6 * 60 })),
    delay_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 3600 })),
    max_delay_minutes: Type.Optional(Type.Integer({ minimum: 1, maximum: 12 * 60 })),
  },
  { additionalProperties: false },
);
const checkAddressThrottle = TypeCompiler.Compile(AddressThrottle);

/** Every problem of a `security.address_throttle` value; [] when it may be stored (absent included). */
export function addressThrottleProblems(value: unknown): string[] {
  if (value === undefined) return [];
  const problems = [...checkAddressThrottle.Errors(value)].map(
    (e) => `address_throttle${e.path.replaceAll('/', '.')}: ${e.message}`,
  );
  if (problems.length === 0 && checkAddressThrottle.Check(value)) {
    const p = addressPolicyOf(value);
    if (p.maxDelayMs < p.delayMs)
      problems.push('address_throttle.max_delay_minutes: shorter than delay_seconds');
  }
  return problems;
}

function addressPolicyOf(v: Static<typeof AddressThrottle>): AddressPolicy {
  const d = defaultAddressPolicy;
  return {
    failures: v.failures ?? d.failures,
    windowMs: v.window_minutes !== undefined ? v.window_minutes * 60_000 : d.windowMs,
    delayMs: v.delay_seconds !== undefined ? v.delay_seconds * 1000 : d.delayMs,
    maxDelayMs: v.max_delay_minutes !== undefined ? v.max_delay_minutes * 60_000 : d.maxDelayMs,
  };
}

const checkHolder = TypeCompiler.Compile(Type.Object({ address_throttle: Type.Optional(Type.Unknown()) }));

/** The tenant's address throttle; a malformed value (refused at write) reads as the defaults. */
function addressThrottleOf(security: unknown): AddressPolicy {
  const value = checkHolder.Check(security) ? security.address_throttle : undefined;
  return checkAddressThrottle.Check(value) && addressThrottleProblems(value).length === 0
    ? addressPolicyOf(value)
    : defaultAddressPolicy;
}

export interface TenantAuthSettings {
  active: boolean;
  mfaRequiredForAll: boolean;
  sessionTimeoutMinutes: number;
  addressThrottle: AddressPolicy;
  deviceCooloffHours: number;
  requireDpop: boolean;
  requireDpopNonce: boolean;
}

function flagOf(security: unknown, name: string): boolean {
  return (
    typeof security === 'object' && security !== null && (security as Record<string, unknown>)[name] === true
  );
}

/** undefined: no such tenant. Malformed settings fail closed (MFA on, default timeout). */
export async function tenantSettings(
  q: Queryable,
  tenantId: string,
): Promise<TenantAuthSettings | undefined> {
  const { rows } = await q.query<{ status: string; security: unknown }>(
    'SELECT status, security FROM tenants WHERE id = $1',
    [tenantId],
  );
  const row = rows[0];
  if (!row) return undefined;
  const sec: Static<typeof Security> | undefined = checkSecurity.Check(row.security)
    ? row.security
    : undefined;
  return {
    active: row.status === 'ACTIVE',
    mfaRequiredForAll: sec ? sec.mfa_required_for_all_users === true : true,
    sessionTimeoutMinutes: sec?.session_timeout_minutes ?? defaultSessionTimeoutMinutes,
    addressThrottle: addressThrottleOf(row.security),
    deviceCooloffHours: sec?.device_cooloff_hours ?? defaultDeviceCooloffHours,
    // Read on their own, as the edge reads them: another malformed field neither hides a
    // require_dpop (the edge would refuse every unbound token) nor invents one (no sign-in at all).
    requireDpop: flagOf(row.security, 'require_dpop'),
    requireDpopNonce: flagOf(row.security, 'require_dpop_nonce'),
  };
}
