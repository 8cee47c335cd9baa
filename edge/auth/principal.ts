/**
 * Who is calling: verify the credential a route requires and return the principal. Customer,
 * agent, staff and core-client access tokens go through the one verifier of
 * shared/access-token.ts (EdDSA under the tenant's active/grace keys; its table of refusal codes,
 * the same at core), then the session (not revoked, not idle past the tenant's timeout); staff
 * tooling presents a service token, SCIM clients their credential.
 */
import type { RequestView } from '../check.ts';
import type { Credential } from '../routes.ts';
import type { EdgeState, SessionState, TenantState } from '../state/store.ts';
import { CredentialError, bearerOf } from './bearer.ts';
import { liveSession, verified } from './session-token.ts';
import { checkBinding } from './dpop.ts';
import { verifyApiKey, type ApiKeyPrincipal } from './api-key.ts';
import { staffBearer, staffPrincipal, type StaffPrincipal } from './staff.ts';
import { bindingOf } from '../../shared/access-token.ts';
import { clientTokenMtlsRefusal } from '../../shared/mtls.ts';
import { asVerified, requireMachineMtls, tenantMtlsRule } from './machine-mtls.ts';

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

const invalid = (message: string) => new CredentialError(401, 'invalid_token', message);

async function customer(
  view: RequestView,
  state: EdgeState,
  tenantOf: (id: string) => Promise<TenantState | undefined>,
  nowMs: number,
): Promise<Principal> {
  const { token, claims } = await verified(view, state, 'customer', nowMs);
  const session = await liveSession(view, state, tenantOf, nowMs, 'customer', token, claims);
  await refuseRevokedDevices(view, state, claims.tid, claims.sub, claims.dvc);
  state.touchSession(session);
  return {
    kind: 'customer',
    tenantId: claims.tid,
    subjectId: claims.sub,
    session,
    aal: claims.aal,
    amr: claims.amr,
    issuedAtS: claims.iat,
    orig: claims.orig,
    jti: claims.jti,
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
  const { token, claims } = await verified(view, state, 'agent', nowMs);
  const session = await liveSession(view, state, tenantOf, nowMs, 'agent', token, claims);
  state.touchSession(session);
  return {
    kind: 'user',
    tenantId: claims.tid,
    subjectId: claims.sub,
    session,
    aal: claims.aal,
    amr: claims.amr,
    roles: ['agent'],
    issuedAtS: claims.iat,
  };
}

/**
 * SPEC 2.10 `require_mtls_for_m2m` covers OAuth client tokens as it covers every machine credential
 * (machine-mtls.ts): the tenant's rule, and the token bound to the very certificate presented
 * (403 mtls_required). Customer, agent and staff tokens are people, not machines (SPEC 2.10 says
 * machine-to-machine): the setting does not reach them.
 */
async function requireTenantMtls(
  view: RequestView,
  tenantOf: (id: string) => Promise<TenantState | undefined>,
  claims: { tid: string; cnf?: unknown },
  nowMs: number,
): Promise<void> {
  const rule = await tenantMtlsRule(tenantOf, claims.tid);
  const refused = clientTokenMtlsRefusal(rule, bindingOf(claims.cnf).x5t, view.peerCertificate, nowMs);
  if (refused !== undefined) throw new CredentialError(403, 'mtls_required', refused);
}

async function coreClient(
  view: RequestView,
  state: EdgeState,
  tenantOf: (id: string) => Promise<TenantState | undefined>,
  nowMs: number,
): Promise<Principal> {
  const { token, claims } = await verified(view, state, 'client', nowMs);
  // The token's signature held: its tenant's audit shows which client was refused.
  await asVerified(claims.tid, claims.sub, async () => {
    // A revoked client's tokens stop at once, not when they expire (NOTIFY oauth_clients_changed).
    if (!(await state.oauthClientActive(claims.tid, claims.sub)))
      throw new CredentialError(401, 'invalid_token', 'the OAuth client of this token is revoked');
    // Then the tenant's rule and the token's proof, in core's order (core/oauth/bearer.ts).
    await requireTenantMtls(view, tenantOf, claims, nowMs);
    // Issue 17 item 2: a certificate- or DPoP-bound client token is refused without its proof.
    await checkBinding(view, state, token, claims.cnf, nowMs);
  });
  const scopes = claims.scope !== undefined ? claims.scope.split(' ').filter(Boolean) : (claims.scp ?? []);
  return {
    kind: 'service',
    tenantId: claims.tid,
    subjectId: claims.sub,
    roles: [],
    scopes,
    via: 'core-client',
  };
}

/**
 * A service token (SPEC 5.5; issue 14 item 6): a machine of its tenant, so once the token is
 * known and live, the tenant's mutual-TLS rule for machines (machine-mtls.ts).
 */
async function serviceToken(
  view: RequestView,
  state: EdgeState,
  tenantOf: (id: string) => Promise<TenantState | undefined>,
  nowMs: number,
): Promise<Principal> {
  const token = bearerOf(view.headers);
  if (!token) throw new CredentialError(401, 'UNAUTHENTICATED', 'a service token is required');
  const st = await state.serviceToken(token);
  if (!st || st.revoked || (st.expiresAtMs !== null && st.expiresAtMs <= nowMs))
    throw invalid('service token is not valid');
  const subjectId = `service-token:${st.id}`;
  await asVerified(st.tenantId, subjectId, () => requireMachineMtls(view, tenantOf, st.tenantId, nowMs));
  return {
    kind: 'service',
    tenantId: st.tenantId,
    subjectId,
    roles: st.roles,
    scopes: [],
    via: 'service-token',
  };
}

/**
 * A SCIM client (issue 14 item 1): the tenant's SCIM bearer credential, looked up by hash. The
 * principal is `scim-credential:<id>` with the one role `scim`, in the credential's tenant only.
 * The identity provider's SCIM client is a machine (DESIGN "People and machines"): the tenant's
 * mutual-TLS rule for machines applies to it (machine-mtls.ts).
 */
async function scimCredential(
  view: RequestView,
  state: EdgeState,
  tenantOf: (id: string) => Promise<TenantState | undefined>,
  nowMs: number,
): Promise<Principal> {
  const token = bearerOf(view.headers);
  if (!token) throw new CredentialError(401, 'UNAUTHENTICATED', 'a SCIM bearer credential is required');
  const c = await state.scimCredential(token);
  if (!c || c.revoked) throw invalid('SCIM credential is not valid');
  const subjectId = `scim-credential:${c.id}`;
  await asVerified(c.tenantId, subjectId, () => requireMachineMtls(view, tenantOf, c.tenantId, nowMs));
  return {
    kind: 'service',
    tenantId: c.tenantId,
    subjectId,
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
      return coreClient(view, state, tenantOf, nowMs);
    case 'staff': {
      // Issue 14 item 5: a person's staff access token (a JWT); an opaque bearer is a service token.
      const jwt = staffBearer(view);
      return jwt ? staffPrincipal(view, state, tenantOf, nowMs) : serviceToken(view, state, tenantOf, nowMs);
    }
    case 'service':
      return serviceToken(view, state, tenantOf, nowMs);
    case 'scim':
      return scimCredential(view, state, tenantOf, nowMs);
    default:
      return { kind: 'anonymous' };
  }
}
