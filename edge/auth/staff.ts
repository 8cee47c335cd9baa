/**
 * Staff access tokens at the edge (issue 14 item 5; SPEC 2.4.1 internal claims). On `staff`
 * credential routes (administration, ops tooling, simulate) a JWT bearer is a staff member's
 * access token (core/staff/tokens.ts): EdDSA under the tenant's keys, typ at+jwt, aud "staff".
 * It counts only while its session (subject_type 'user') is live and not idle past the tenant's
 * timeout, and while the member is active: SCIM deprovisioning NOTIFYs `staff_changed` and the
 * next request is refused even though the token has not expired; a role taken away stops counting
 * at the next request the same way. An opaque `svc_` bearer stays
 * a service token (machines).
 */
import type { RequestView } from '../check.ts';
import type { EdgeState, SessionState, TenantState } from '../state/store.ts';
import { bearerOf } from './bearer.ts';
import { liveSession, verified } from './session-token.ts';

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

/** A compact JWS (three base64url parts); anything else on a staff route is a service token. */
export function looksLikeJwt(token: string): boolean {
  return /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(token);
}

/**
 * Verify a staff access token (the one verifier, shared/access-token.ts) and its live state: the
 * session rule, the member still active, the token's proof of possession; throws CredentialError.
 */
export async function staffPrincipal(
  view: RequestView,
  state: EdgeState,
  tenantOf: (id: string) => Promise<TenantState | undefined>,
  nowMs: number,
): Promise<StaffPrincipal> {
  const { token, claims: c } = await verified(view, state, 'staff', nowMs);
  const session = await liveSession(view, state, tenantOf, nowMs, 'staff', token, c);
  state.touchSession(session);
  // The token's roles count only while the member still holds them (liveSession has just read
  // the member, so this is the cache's copy): a role removed by SCIM or the admin API stops
  // counting at once; one added counts from the member's next token.
  const held = new Set((await state.staffMember(c.tid, c.sub))?.roles ?? []);
  const stillHeld = (roles: string[]) => roles.filter((r) => held.has(r));
  return {
    kind: 'staff',
    tenantId: c.tid,
    subjectId: `staff:${c.sub}`,
    userId: c.sub,
    session,
    aal: c.aal,
    amr: c.amr,
    orgRoles: stillHeld(c.org_roles),
    tenantRoles: c.tenant_roles.map((t) => ({ tenant: t.tenant, roles: stillHeld(t.roles) })),
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
