/**
 * Who is calling: verify the credential a route requires and return the principal. Customer
 * access tokens are EdDSA JWTs checked against the tenant's active/grace keys, then against
 * the session (not revoked, not idle past the tenant's timeout); core clients present an
 * OAuth client-credentials JWT; staff tooling presents a service token.
 */
import type { RequestView } from '../check.ts';
import type { Credential } from '../routes.ts';
import type { EdgeState, SessionState, TenantState } from '../state/store.ts';
import { CredentialError, bearerOf } from './bearer.ts';
import { checkBinding } from './dpop.ts';
import { verifyApiKey, type ApiKeyPrincipal } from './api-key.ts';
import { staffBearer, staffPrincipal, type StaffPrincipal } from './staff.ts';

export const customerAudience = 'payments-api';
export const customerTokenTyp = 'at+jwt';
export const coreAudience = 'core';
/** Tolerated difference between an issuer's clock and ours. */
export const maxClockSkewMs = 30_000;
/** SPEC 2.10 session_timeout_minutes when the tenant sets none. */
export const defaultSessionTimeoutMin = 30;

export type Principal =
  | { kind: 'anonymous' }
  | {
      kind: 'customer';
      tenantId: string;
      subjectId: string;
      session: SessionState;
      aal: number;
      amr: string[];
      issuedAtS: number;
      /** After a step-up, the request (SPEC 4.3 orig) the AAL 2 token was issued for. */
      orig: string | undefined;
      /** The token's id: a request-bound step-up is used up per token (core/identity/bound.ts). */
      jti: string;
    }
  | {
      kind: 'user';
      tenantId: string;
      subjectId: string;
      session: SessionState;
      aal: number;
      amr: string[];
      roles: string[];
      issuedAtS: number;
    }
  | {
      kind: 'service';
      tenantId: string;
      subjectId: string;
      roles: string[];
      scopes: string[];
      via: 'core-client' | 'service-token' | 'scim-credential';
    }
  | StaffPrincipal
  | ApiKeyPrincipal;

const sessionTimeoutOf = (t: TenantState | undefined): number =>
  Number(t?.security.session_timeout_minutes ?? defaultSessionTimeoutMin);

function stringArray(v: unknown): string[] {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
}

function invalid(message: string): CredentialError {
  return new CredentialError(401, 'invalid_token', message);
}

async function verifyJwt(state: EdgeState, token: string, audience: string, typ?: string) {
  try {
    return await state.keys.verify(token, { audience, ...(typ ? { typ } : {}) });
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === 'ERR_JWT_EXPIRED') throw invalid('access token expired');
    throw invalid('access token is not valid');
  }
}

async function customer(
  view: RequestView,
  state: EdgeState,
  tenantOf: (id: string) => Promise<TenantState | undefined>,
  nowMs: number,
): Promise<Principal> {
  const token = bearerOf(view.headers);
  if (!token) throw new CredentialError(401, 'UNAUTHENTICATED', 'a bearer access token is required');
  const claims = await verifyJwt(state, token, customerAudience, customerTokenTyp);
  // A token issued in the future (beyond clock skew) is refused like an expired one.
  if (typeof claims.iat !== 'number' || claims.iat * 1000 > nowMs + maxClockSkewMs)
    throw invalid('access token is future-dated');
  const sid = claims.sid;
  const aal = claims.aal;
  if (
    typeof claims.sub !== 'string' ||
    typeof sid !== 'string' ||
    typeof aal !== 'number' ||
    !Number.isInteger(aal)
  ) {
    throw invalid('access token lacks sub, sid or aal');
  }
  const session = await state.session(claims.tid, sid);
  if (!session || session.subjectId !== claims.sub || session.subjectType !== 'customer')
    throw new CredentialError(401, 'session_revoked', 'session not found');
  if (session.revoked) throw new CredentialError(401, 'session_revoked', 'session has been revoked');
  const tenant = await tenantOf(claims.tid);
  const timeoutMin = Number(tenant?.security.session_timeout_minutes ?? defaultSessionTimeoutMin);
  if (nowMs - session.lastSeenMs > timeoutMin * 60_000)
    throw new CredentialError(401, 'session_expired', 'session idle timeout');
  // Issue 17 item 3: a bound token needs its proof; require_dpop refuses unbound ones.
  await checkBinding(view, state, token, claims.cnf, nowMs, tenant?.security.require_dpop === true);
  await refuseRevokedDevices(view, state, claims.tid, claims.sub, claims.dvc);
  state.touchSession(session);
  return {
    kind: 'customer',
    tenantId: claims.tid,
    subjectId: claims.sub,
    session,
    aal,
    amr: stringArray(claims.amr),
    issuedAtS: typeof claims.iat === 'number' ? claims.iat : 0,
    orig: typeof claims.orig === 'string' ? claims.orig : undefined,
    jti: typeof claims.jti === 'string' ? claims.jti : '',
  };
}

const deviceIdPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * Issue 13 item 1: a device key the customer removed is refused from the next request: a token
 * whose step-up that device signed (`dvc`), and an intent signature naming it. Only a device of
 * this customer that exists and is revoked is refused here; anything else is core's to judge.
 */
async function refuseRevokedDevices(
  view: RequestView,
  state: EdgeState,
  tenantId: string,
  customerId: string,
  dvc: unknown,
): Promise<void> {
  const named: [unknown, 401 | 403, string][] = [
    [dvc, 401, 'the device key that stepped this token up was removed from the account'],
    [
      view.headers['x-intent-device-id'],
      403,
      'the device key named by x-intent-device-id was removed from the account',
    ],
  ];
  for (const [id, status, message] of named) {
    if (typeof id !== 'string' || !deviceIdPattern.test(id)) continue;
    const d = await state.device(tenantId, id);
    if (d && d.customerId === customerId && d.revoked)
      throw new CredentialError(status, 'device_revoked', message);
  }
}

/**
 * Agents (issue 9): the same access tokens as customers, on a live session of subject_type
 * 'agent' (idle timeout as for customers); the principal is a `user` with role agent.
 */
async function agent(
  view: RequestView,
  state: EdgeState,
  tenantOf: (id: string) => Promise<TenantState | undefined>,
  nowMs: number,
): Promise<Principal> {
  const token = bearerOf(view.headers);
  if (!token) throw new CredentialError(401, 'UNAUTHENTICATED', 'a bearer access token is required');
  const claims = await verifyJwt(state, token, customerAudience, customerTokenTyp);
  if (typeof claims.iat !== 'number' || claims.iat * 1000 > nowMs + maxClockSkewMs)
    throw invalid('access token is future-dated');
  const { sub, sid, aal } = claims;
  if (typeof sub !== 'string' || typeof sid !== 'string' || typeof aal !== 'number' || !Number.isInteger(aal))
    throw invalid('access token lacks sub, sid or aal');
  const session = await state.session(claims.tid, sid);
  if (!session || session.subjectId !== sub || session.subjectType !== 'agent')
    throw new CredentialError(401, 'session_revoked', 'session not found');
  if (session.revoked) throw new CredentialError(401, 'session_revoked', 'session has been revoked');
  const tenant = await tenantOf(claims.tid);
  const timeoutMin = Number(tenant?.security.session_timeout_minutes ?? defaultSessionTimeoutMin);
  if (nowMs - session.lastSeenMs > timeoutMin * 60_000)
    throw new CredentialError(401, 'session_expired', 'session idle timeout');
  await checkBinding(view, state, token, claims.cnf, nowMs, tenant?.security.require_dpop === true);
  state.touchSession(session);
  return {
    kind: 'user',
    tenantId: claims.tid,
    subjectId: sub,
    session,
    aal,
    amr: stringArray(claims.amr),
    roles: ['agent'],
    issuedAtS: claims.iat,
  };
}

async function coreClient(view: RequestView, state: EdgeState, nowMs: number): Promise<Principal> {
  const token = bearerOf(view.headers, true);
  if (!token) throw new CredentialError(401, 'UNAUTHENTICATED', 'a core access token is required');
  const claims = await verifyJwt(state, token, coreAudience);
  if (typeof claims.sub !== 'string') throw invalid('token has no subject');
  // Issue 17 item 2: a certificate- or DPoP-bound client token is refused without its proof.
  await checkBinding(view, state, token, claims.cnf, nowMs);
  // A revoked client's tokens stop at once, not when they expire (NOTIFY oauth_clients_changed).
  if (!(await state.oauthClientActive(claims.tid, claims.sub)))
    throw invalid('the OAuth client of this token is revoked');
  const scopes =
    typeof claims.scope === 'string' ? claims.scope.split(' ').filter(Boolean) : stringArray(claims.scp);
  return {
    kind: 'service',
    tenantId: claims.tid,
    subjectId: claims.sub,
    roles: [],
    scopes,
    via: 'core-client',
  };
}

async function serviceToken(view: RequestView, state: EdgeState, nowMs: number): Promise<Principal> {
  const token = bearerOf(view.headers);
  if (!token) throw new CredentialError(401, 'UNAUTHENTICATED', 'a service token is required');
  const st = await state.serviceToken(token);
  if (!st || st.revoked || (st.expiresAtMs !== null && st.expiresAtMs <= nowMs))
    throw invalid('service token is not valid');
  return {
    kind: 'service',
    tenantId: st.tenantId,
    subjectId: `service-token:${st.id}`,
    roles: st.roles,
    scopes: [],
    via: 'service-token',
  };
}

/**
 * A SCIM client (issue 14 item 1): the tenant's SCIM bearer credential, looked up by hash. The
 * principal is `scim-credential:<id>` with the one role `scim`, in the credential's tenant only.
 */
async function scimCredential(view: RequestView, state: EdgeState): Promise<Principal> {
  const token = bearerOf(view.headers);
  if (!token) throw new CredentialError(401, 'UNAUTHENTICATED', 'a SCIM bearer credential is required');
  const c = await state.scimCredential(token);
  if (!c || c.revoked) throw invalid('SCIM credential is not valid');
  return {
    kind: 'service',
    tenantId: c.tenantId,
    subjectId: `scim-credential:${c.id}`,
    roles: ['scim'],
    scopes: [],
    via: 'scim-credential',
  };
}

/**
 * Verify the credential `credential` names; throws CredentialError (401/403) on failure. A
 * request carrying `x-api-key-id` is a signed machine request whatever the route (SPEC 5.4);
 * what that key may do is then the policy's call, from its scopes.
 */
export async function authenticate(
  credential: Credential | undefined,
  view: RequestView,
  state: EdgeState,
  tenantOf: (id: string) => Promise<TenantState | undefined>,
  nowMs: number,
  replayWindowMs?: number,
): Promise<Principal> {
  if (view.headers['x-api-key-id'] !== undefined)
    return verifyApiKey(view, state, tenantOf, nowMs, replayWindowMs);
  switch (credential) {
    case 'customer':
      return customer(view, state, tenantOf, nowMs);
    case 'agent':
      return agent(view, state, tenantOf, nowMs);
    case 'core-client':
      return coreClient(view, state, nowMs);
    case 'staff': {
      // Issue 14 item 5: a person's staff access token (a JWT); an opaque bearer is a service token.
      const jwt = staffBearer(view);
      return jwt
        ? staffPrincipal(jwt, view, state, tenantOf, nowMs, sessionTimeoutOf, maxClockSkewMs)
        : serviceToken(view, state, nowMs);
    }
    case 'service':
      return serviceToken(view, state, nowMs);
    case 'scim':
      return scimCredential(view, state);
    default:
      return { kind: 'anonymous' };
  }
}
