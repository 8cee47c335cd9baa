/**
 * Staff access tokens at the edge (issue 14 item 5; SPEC 2.4.1 internal claims). On `staff`
 * credential routes (administration, ops tooling, simulate) a JWT bearer is a staff member's
 * access token (core/staff/tokens.ts): EdDSA under the tenant's keys, typ at+jwt, aud "staff".
 * It counts only while its session (subject_type 'user') is live and not idle past the tenant's
 * timeout, and while the member is active: SCIM deprovisioning NOTIFYs `staff_changed` and the
 * next request is refused even though the token has not expired. An opaque `svc_` bearer stays
 * a service token (machines).
 */
import { Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import type { RequestView } from '../check.ts';
import type { EdgeState, SessionState, TenantState } from '../state/store.ts';
import { CredentialError, bearerOf } from './bearer.ts';
import { checkBinding } from './dpop.ts';

export const staffAudience = 'staff';
export const staffTokenTyp = 'at+jwt';

export interface StaffPrincipal {
  kind: 'staff';
  tenantId: string;
  /** `staff:<id>`: how audit records and idempotency frames name the person (issue 14 item 6). */
  subjectId: string;
  userId: string;
  session: SessionState;
  aal: number;
  amr: string[];
  /** Roles in the member's own tenant. */
  orgRoles: string[];
  /** Roles in the tenants the member's tenant owns (cross-tenant administration). */
  tenantRoles: { tenant: string; roles: string[] }[];
  /** After a step-up: the one request the AAL 2 token was issued for. */
  orig: string | undefined;
  jti: string;
  expS: number;
  issuedAtS: number;
}

const Role = Type.String({ maxLength: 32 });
const Claims = Type.Object({
  sub: Type.String({ minLength: 1, maxLength: 64 }),
  tid: Type.String({ minLength: 1 }),
  sid: Type.String({ minLength: 1, maxLength: 64 }),
  jti: Type.String({ minLength: 1, maxLength: 64 }),
  aal: Type.Integer({ minimum: 1, maximum: 3 }),
  amr: Type.Array(Type.String({ maxLength: 32 }), { maxItems: 16 }),
  iat: Type.Number(),
  exp: Type.Number(),
  org_roles: Type.Array(Role, { maxItems: 16 }),
  tenant_roles: Type.Array(
    Type.Object({ tenant: Type.String({ maxLength: 64 }), roles: Type.Array(Role, { maxItems: 16 }) }),
    { maxItems: 1000 },
  ),
  orig: Type.Optional(Type.String({ maxLength: 64 })),
  cnf: Type.Optional(Type.Unknown()),
});
const checkClaims = TypeCompiler.Compile(Claims);

/** A compact JWS (three base64url parts); anything else on a staff route is a service token. */
export function looksLikeJwt(token: string): boolean {
  return /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(token);
}

const invalid = (message: string) => new CredentialError(401, 'invalid_token', message);

/** Verify a staff access token and its live state; throws CredentialError. */
export async function staffPrincipal(
  token: string,
  view: RequestView,
  state: EdgeState,
  tenantOf: (id: string) => Promise<TenantState | undefined>,
  nowMs: number,
  sessionTimeoutMin: (t: TenantState | undefined) => number,
  maxSkewMs: number,
): Promise<StaffPrincipal> {
  let raw: unknown;
  try {
    raw = await state.keys.verify(token, { audience: staffAudience, typ: staffTokenTyp });
  } catch (err) {
    throw invalid(
      (err as { code?: string }).code === 'ERR_JWT_EXPIRED'
        ? 'access token expired'
        : 'access token is not valid',
    );
  }
  if (!checkClaims.Check(raw)) throw invalid('staff token lacks its claims');
  const c = raw;
  if (c.iat * 1000 > nowMs + maxSkewMs) throw invalid('access token is future-dated');
  const session = await state.session(c.tid, c.sid);
  if (!session || session.subjectId !== c.sub || session.subjectType !== 'user')
    throw new CredentialError(401, 'session_revoked', 'session not found');
  if (session.revoked) throw new CredentialError(401, 'session_revoked', 'session has been revoked');
  const tenant = await tenantOf(c.tid);
  if (nowMs - session.lastSeenMs > sessionTimeoutMin(tenant) * 60_000)
    throw new CredentialError(401, 'session_expired', 'session idle timeout');
  const member = await state.staffMember(c.tid, c.sub);
  if (!member?.active) throw new CredentialError(401, 'session_revoked', 'the staff member is not active');
  // Issue 17 item 3, one rule for customers, agents and staff: a bound token needs its proof
  // (or certificate); a require_dpop tenant refuses unbound ones.
  await checkBinding(view, state, token, c.cnf, nowMs, tenant?.security.require_dpop === true);
  state.touchSession(session);
  return {
    kind: 'staff',
    tenantId: c.tid,
    subjectId: `staff:${c.sub}`,
    userId: c.sub,
    session,
    aal: c.aal,
    amr: c.amr,
    orgRoles: c.org_roles,
    tenantRoles: c.tenant_roles,
    orig: c.orig,
    jti: c.jti,
    expS: c.exp,
    issuedAtS: c.iat,
  };
}

export function staffBearer(view: RequestView): string | undefined {
  const token = bearerOf(view.headers);
  return token !== undefined && looksLikeJwt(token) ? token : undefined;
}

/**
 * The roles a staff member holds in `tenant`: its own tenant's from `org_roles`, an owned
 * tenant's from `tenant_roles`, none anywhere else (another tenant's admin route is refused).
 */
export function staffRolesIn(p: StaffPrincipal, tenant: string): string[] {
  if (tenant === p.tenantId) return p.orgRoles;
  return p.tenantRoles.find((t) => t.tenant === tenant)?.roles ?? [];
}
