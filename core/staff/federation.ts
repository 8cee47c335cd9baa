/**
 * Federated staff sign-in (SPEC 4.4 `POST /auth/login` with method "federation", then the
 * provider redirects the browser to `GET /auth/callback`; issue 14 item 2): OpenID Connect
 * authorization code flow with PKCE (S256), state and nonce, through openid-client.
 *
 * - State: random, single use, 10 minutes, kept server-side (table staff_federation_states, by
 *   its SHA-256) so any core instance can finish the sign-in; the PKCE verifier is sealed there.
 *   A replayed or unknown state is refused before the provider is asked anything.
 * - The ID token is checked by openid-client: signature against the provider's JWKS, iss, aud
 *   (our client id), exp/iat, nonce; a code obtained for another sign-in fails PKCE at the provider.
 *   Its spelling too (shared/jws.ts): padding or unused bits the decoder would overlook refuse it.
 * - The person: an active `staff_users` row of the tenant, matched first by the ID token's `sub`
 *   against `externalId` (what SCIM provisions from the same provider: stable across renames),
 *   else by `preferred_username`, else by a verified `email`, against `userName` (case-insensitive),
 *   and by a name only a member without an `externalId` or with this very `sub`.
 *   Nobody is created here: provisioning is SCIM's (issue 14 item 1); an unknown or inactive
 *   person is refused 403 STAFF_NOT_PROVISIONED.
 * - Roles: the groups in the configured claim map to roles (rolesForGroups) and replace the
 *   member's roles (setStaffRoles), so the provider stays the source of truth at every sign-in.
 *   A token without the claim leaves the SCIM-provisioned roles as they are. The groups are
 *   recorded (staff_users.idp_groups) so that a mapping removed later takes its roles away at
 *   once (issue 16; mapping-change.ts).
 * - AAL 2 when the provider asserts multi-factor authentication (`amr` naming a possession or
 *   inherence factor, or mfa/mca; `acr` naming a multi-factor level), else AAL 1.
 * - Every outcome is audited (action auth.staff_login); no token, code or secret is logged.
 */
import { signInBinding } from '../http/dpop.ts';
import { tenantSettings } from '../identity/settings.ts';
import { createHash } from 'node:crypto';
import { errors } from 'jose';
import * as oidc from 'openid-client';
import type { Db, Queryable, TxClient } from '../../shared/db/pool.ts';
import { isCompactJws } from '../../shared/jws.ts';
import { storable } from '../../shared/audit.ts';
import { AppError } from '../../shared/errors.ts';
import type { TargetGuard } from '../admin/webhooks/target.ts';
import type { RequestContext } from '../http/route.ts';
import { auditAuth, clientIpOf } from '../identity/context.ts';
import type { KeyStore } from '../keys/keys.ts';
import { discover, identityProviderOf, type IdentityProvider } from './idp.ts';
import {
  lockGroupMappings,
  recordIdpGroups,
  rolesForGroups,
  setStaffRoles,
  staffUserByName,
  type StaffUser,
} from './store.ts';
import { startStaffSession, type StaffTokens } from './tokens.ts';

export const stateTtlMs = 10 * 60_000;

export interface FederationDeps {
  db: Db;
  keys: KeyStore;
  guard: TargetGuard;
  now: () => number;
}

type Ctx = RequestContext<unknown, unknown, unknown>;

const hashOf = (state: string) => createHash('sha256').update(state, 'utf8').digest();
const verifierAad = (hash: Buffer) => `fedstate:${hash.toString('hex')}`;

/** Second factors and multi-factor markers of RFC 8176 `amr`. */
const secondFactors = new Set([
  'mfa',
  'mca',
  'otp',
  'hwk',
  'sc',
  'swk',
  'fpt',
  'face',
  'iris',
  'retina',
  'vbm',
  'pop',
  'sms',
  'tel',
]);
const multiFactorAcr = /(mfa|multi-?factor|aal[23]|loa[34]|phrh?$)/i;

/** AAL 2 when the provider asserts MFA (amr or acr), else 1. */
export function aalOf(amr: unknown, acr: unknown): 1 | 2 {
  const methods = Array.isArray(amr) ? amr.filter((m): m is string => typeof m === 'string') : [];
  // Two methods of one kind (a password and a security question) are not two factors: only a
  // method that is a possession or inherence factor, or the provider's own mfa/mca, counts.
  if (methods.some((m) => secondFactors.has(m))) return 2;
  return typeof acr === 'string' && multiFactorAcr.test(acr) ? 2 : 1;
}

/** Begin: an authorization URL carrying a fresh state, nonce and PKCE challenge. */
export async function beginFederation(
  deps: FederationDeps,
  ctx: Ctx,
  tenantId: string,
): Promise<{ authorizationUrl: string; expiresIn: number }> {
  const idp = await identityProviderOf(deps.db, deps.keys, tenantId);
  if (!idp)
    throw new AppError('IDP_NOT_CONFIGURED', 'this tenant has no identity provider for staff sign-in');
  const config = await configOf(deps, idp);
  const state = oidc.randomState();
  const nonce = oidc.randomNonce();
  const verifier = oidc.randomPKCECodeVerifier();
  const hash = hashOf(state);
  const t = deps.now();
  const url = oidc.buildAuthorizationUrl(config, {
    redirect_uri: idp.redirectUri,
    scope: idp.scopes.join(' '),
    state,
    nonce,
    code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
  });
  // The state and the record of the redirect commit together (SPEC 6.3), or the sign-in is not begun.
  await deps.db.tx(async (q) => {
    await q.query(
      `INSERT INTO staff_federation_states (state_hash, tenant_id, verifier_enc, nonce, idp_version, created_at, expires_at)
       VALUES ($1, $2, $3, $4, $5, to_timestamp($6 / 1000.0), to_timestamp($7 / 1000.0))`,
      [
        hash,
        tenantId,
        deps.keys.sealSecret(Buffer.from(verifier, 'utf8'), verifierAad(hash)),
        nonce,
        idp.version,
        t,
        t + stateTtlMs,
      ],
    );
    await auditAuth(
      q,
      {
        tenantId,
        action: 'auth.staff_login',
        actor: { type: 'anonymous', id: clientIpOf(ctx) },
        target: { type: 'identity_provider', id: tenantId },
        allow: true,
        attrs: { ip: clientIpOf(ctx), outcome: 'redirected' },
        requestId: ctx.requestId,
      },
      t,
    );
  });
  return { authorizationUrl: url.href, expiresIn: stateTtlMs / 1000 };
}

/** Provider configurations by tenant, for the configuration version they were discovered with. */
const configs = new Map<
  string,
  { version: number; issuer: string; at: number; config: oidc.Configuration }
>();
const configTtlMs = 5 * 60_000;

async function configOf(deps: FederationDeps, idp: IdentityProvider): Promise<oidc.Configuration> {
  const hit = configs.get(idp.tenantId);
  if (hit && hit.version === idp.version && hit.issuer === idp.issuer && deps.now() - hit.at < configTtlMs)
    return hit.config;
  let config: oidc.Configuration;
  try {
    config = await discover(deps.guard, idp);
  } catch {
    throw new AppError('IDP_UNREACHABLE', 'the identity provider could not be reached');
  }
  configs.set(idp.tenantId, { version: idp.version, issuer: idp.issuer, at: deps.now(), config });
  return config;
}

interface StateRow {
  tenant_id: string;
  verifier_enc: Buffer;
  nonce: string;
  idp_version: number;
}

/** Use the state up (single use, unexpired); undefined when it is unknown, used or expired. */
async function takeState(
  q: Queryable,
  state: string,
  now: number,
): Promise<(StateRow & { hash: Buffer }) | undefined> {
  const hash = hashOf(state);
  const { rows } = await q.query<StateRow>(
    `UPDATE staff_federation_states SET used_at = to_timestamp($2 / 1000.0)
     WHERE state_hash = $1 AND used_at IS NULL AND expires_at > to_timestamp($2 / 1000.0)
     RETURNING tenant_id, verifier_enc, nonce, idp_version`,
    [hash, now],
  );
  return rows[0] && { ...rows[0], hash };
}

/** The member an ID token names (see the file comment for the order). */
async function memberOf(
  q: Queryable,
  tenantId: string,
  claims: oidc.IDToken,
): Promise<StaffUser | undefined> {
  if (!storableText(claims.sub)) return undefined;
  const { rows } = await q.query<{ user_name: string }>(
    'SELECT user_name FROM staff_users WHERE tenant_id = $1 AND external_id = $2 AND deleted_at IS NULL',
    [tenantId, claims.sub],
  );
  // An email counts only when the provider says it verified it (OIDC Core 5.1: email_verified).
  const names = [
    rows[0]?.user_name,
    claims.preferred_username,
    claims.email_verified === true ? claims.email : undefined,
  ];
  for (const name of names) {
    if (!storableText(name) || name.length === 0) continue;
    const u = await staffUserByName(q, tenantId, name);
    // A member provisioned for a subject (externalId) is that subject only: names are claims an
    // account can choose, so another account naming their userName or email is not them.
    if (u && (u.externalId === null || u.externalId === claims.sub)) return u;
  }
  return undefined;
}

/**
 * Text PostgreSQL can hold (no NUL, no lone surrogate): a claim carrying anything else names no
 * member and no group, instead of failing the sign-in's queries with a 500. The provider's
 * administrators write these values; its signature does not make them storable.
 */
const storableText = (v: unknown): v is string => typeof v === 'string' && storable(v) === v;

const groupsOf = (claims: oidc.IDToken, claim: string): string[] | undefined => {
  const v = claims[claim];
  return Array.isArray(v) ? v.filter(storableText).slice(0, 200) : undefined;
};

/** Records a refused federated sign-in (when the tenant is known) and returns the error to throw. */
async function refusal(
  deps: FederationDeps,
  ctx: Ctx,
  ip: string,
  tenantId: string,
  outcome: string,
): Promise<AppError> {
  if (tenantId) {
    await deps.db.tx((q) =>
      auditAuth(
        q,
        {
          tenantId,
          action: 'auth.staff_login',
          actor: { type: 'anonymous', id: ip },
          target: { type: 'identity_provider', id: tenantId },
          allow: false,
          attrs: { ip, outcome },
          requestId: ctx.requestId,
        },
        deps.now(),
      ),
    );
  }
  return outcome === 'not_provisioned'
    ? new AppError(
        'STAFF_NOT_PROVISIONED',
        "no active staff member of this tenant matches the identity provider's account",
      )
    : new AppError('FEDERATION_FAILED', `federated sign-in failed (${outcome})`);
}

type Refuse = (tenantId: string, outcome: string) => Promise<AppError>;

/**
 * Whether the token request failed for want of an answer, not on one: the provider could not be
 * reached (fetch's TypeError), did not answer in time, or answered a server error (5xx,
 * `temporarily_unavailable`, `server_error`). Everything else is the provider's or openid-client's
 * verdict on this code and ID token: a refused sign-in. openid-client and oauth4webapi throw
 * TypeErrors of their own for an answer they cannot use (an ID token whose signature is not even
 * base64url: ERR_INVALID_ARG_VALUE); those carry a code, fetch's carries none.
 */
function providerDidNotAnswer(err: unknown): boolean {
  const e = err as { code?: unknown; status?: unknown; error?: unknown; cause?: unknown };
  if (err instanceof TypeError) return e.code === undefined;
  if (e.code === 'OAUTH_TIMEOUT' || e.code === 'OAUTH_ABORT') return true;
  if (e.error === 'temporarily_unavailable' || e.error === 'server_error') return true;
  // ResponseBodyError carries the status; an unexpected non-OAuth answer carries its Response.
  const status =
    typeof e.status === 'number' ? e.status : (e.cause as { status?: unknown } | undefined)?.status;
  return typeof status === 'number' && status >= 500;
}

/** Exchanges the authorization code (PKCE, state, nonce) and returns the verified ID token's claims. */
async function idTokenClaims(
  deps: FederationDeps,
  idp: IdentityProvider,
  taken: StateRow & { hash: Buffer },
  query: Record<string, string>,
  refuse: Refuse,
): Promise<oidc.IDToken> {
  const tenantId = taken.tenant_id;
  const config = await configOf(deps, idp);
  const callbackUrl = new URL(idp.redirectUri);
  for (const [k, v] of Object.entries(query)) callbackUrl.searchParams.set(k, v);
  // Our own sealed verifier: a failure to open it is ours, never the sign-in's.
  const pkceCodeVerifier = deps.keys.openSecret(taken.verifier_enc, verifierAad(taken.hash)).toString('utf8');
  let claims: oidc.IDToken | undefined;
  try {
    const tokens = await oidc.authorizationCodeGrant(config, callbackUrl, {
      pkceCodeVerifier,
      expectedState: query.state ?? '',
      expectedNonce: taken.nonce,
      idTokenExpected: true,
    });
    // openid-client decodes base64url leniently: a second spelling of the token is refused here.
    if (tokens.id_token !== undefined && !isCompactJws(tokens.id_token))
      throw new errors.JWSInvalid('the ID token is not a compact JWS in its one spelling');
    claims = tokens.claims();
  } catch (err) {
    // As when its discovery document cannot be fetched (configOf): the person did nothing wrong.
    if (providerDidNotAnswer(err))
      throw new AppError('IDP_UNREACHABLE', 'the identity provider could not be reached');
    // The reason is recorded by its class only: openid-client's messages can quote what it received.
    throw await refuse(tenantId, `id_token_or_code_refused:${(err as { code?: string }).code ?? 'error'}`);
  }
  if (!claims) throw await refuse(tenantId, 'no_id_token');
  return claims;
}

/** In the caller's transaction: the matched active member's roles from its groups, a session, the audit. */
async function signInMember(
  q: TxClient,
  deps: FederationDeps,
  ctx: Ctx,
  s: {
    tenantId: string;
    idp: IdentityProvider;
    idClaims: oidc.IDToken;
    ip: string;
    pop: Awaited<ReturnType<typeof signInBinding>>;
    t: number;
  },
): Promise<StaffTokens | undefined> {
  const { tenantId, idp, idClaims, ip, pop, t } = s;
  const member = await memberOf(q, tenantId, idClaims);
  if (!member?.active || member.deletedAt) return undefined;
  const groups = groupsOf(idClaims, idp.groupsClaim);
  if (groups) {
    // The groups are recorded with the roles they gave, so a mapping removed later takes those
    // roles away at once (issue 16); under the mappings' lock, so a concurrent PUT sees both.
    await lockGroupMappings(q, tenantId);
    const roles = await rolesForGroups(q, tenantId, groups);
    await setStaffRoles(q, tenantId, member.id, roles);
    await recordIdpGroups(q, tenantId, member.id, groups, roles);
  }
  const aal = aalOf(idClaims.amr, idClaims.acr);
  const amr = [
    'fed',
    ...(Array.isArray(idClaims.amr)
      ? idClaims.amr.filter((m): m is string => typeof m === 'string').slice(0, 8)
      : []),
  ];
  const tokens = await startStaffSession(
    q,
    deps.keys,
    {
      tenantId,
      userId: member.id,
      aal,
      amr,
      ip,
      method: 'federation',
      ...(pop ? { cnf: { jkt: pop.jkt } } : {}),
    },
    t,
  );
  await auditAuth(
    q,
    {
      tenantId,
      action: 'auth.staff_login',
      actor: { type: 'staff', id: `staff:${member.id}` },
      target: { type: 'session', id: tokens.sessionId },
      allow: true,
      attrs: { ip, outcome: 'signed_in', aal, groups: groups ?? null },
      requestId: ctx.requestId,
    },
    t,
  );
  return tokens;
}

/** Finish: exchange the code, verify the ID token, match the member, start the session. */
export async function completeFederation(
  deps: FederationDeps,
  ctx: Ctx,
  query: Record<string, string>,
): Promise<StaffTokens> {
  const t = deps.now();
  const ip = clientIpOf(ctx);
  const state = query.state ?? '';
  const taken = state ? await takeState(deps.db, state, t) : undefined;
  const refuse: Refuse = (tenantId, outcome) => refusal(deps, ctx, ip, tenantId, outcome);
  if (!taken) throw await refuse('', 'state_unknown_used_or_expired');
  const tenantId = taken.tenant_id;
  const idp = await identityProviderOf(deps.db, deps.keys, tenantId);
  if (!idp || idp.version !== taken.idp_version) throw await refuse(tenantId, 'provider_changed');
  if (query.error) throw await refuse(tenantId, 'provider_error');
  const idClaims = await idTokenClaims(deps, idp, taken, query, refuse);
  const pop = await signInBinding(deps, ctx, await tenantSettings(deps.db, tenantId));
  const result = await deps.db.tx((q) => signInMember(q, deps, ctx, { tenantId, idp, idClaims, ip, pop, t }));
  if (!result) throw await refuse(tenantId, 'not_provisioned');
  return result;
}
