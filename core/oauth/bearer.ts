/**
 * Bearer tokens on /v1/core/* (SPEC 5.1): `Authorization: Bearer <jwt>` or the bare JWT.
 * The edge checks them first; core checks again (defence in depth) and takes the tenant from
 * the verified token, never from the request body. No token detail reaches the client or logs.
 */
import {
  accessTokenTyp,
  bindingOf,
  coreAudience,
  TokenRefusal,
  verifyAccessToken,
  type ClientTokenClaims,
} from '../../shared/access-token.ts';
import type { KeyStore } from '../keys/keys.ts';
import type { Queryable } from '../../shared/db/pool.ts';
import type { RequestContext } from '../http/route.ts';
import { AppError } from '../../shared/errors.ts';
import {
  certificateThumbprint,
  machineMtlsRefusal,
  machineMtlsRule,
  tenantMtlsRefusal,
  type MachineMtlsRule,
} from '../../shared/mtls.ts';
import { requireTokenProof } from '../http/dpop.ts';
import { addressAllowed } from '../../shared/ip-ranges.ts';
import { rangesOf } from '../staff/tenant-rules.ts';
import type { CoreScope } from './clients.ts';

export { coreAudience };
export const accessTokenType = accessTokenTyp;

export interface CorePrincipal {
  tenantId: string;
  clientId: string;
  scopes: ReadonlySet<string>;
}

const challenge = { 'www-authenticate': 'Bearer realm="core"' };

function scopesOf(claims: ClientTokenClaims): Set<string> {
  const out = new Set<string>();
  for (const s of claims.scp ?? []) out.add(s);
  if (typeof claims.scope === 'string') for (const s of claims.scope.split(' ')) if (s) out.add(s);
  return out;
}

function hasScope(scopes: ReadonlySet<string>, need: CoreScope): boolean {
  return scopes.has(need) || (need === 'core:read' && scopes.has('core:write'));
}

type Ctx = Pick<RequestContext<unknown, unknown, unknown>, 'headers' | 'path' | 'identity' | 'method'>;
interface Deps {
  keys: KeyStore;
  db: Queryable;
  now: () => number;
}

/**
 * Issue 17 item 2 (RFC 9449 §7.1, RFC 8705 §3): a bound client token counts only with its proof.
 * The edge checked it (and used up the DPoP proof's jti) when it vouches for this very client;
 * anywhere else (core reached without the edge) core demands the proof itself, as the edge would.
 */
async function requireClientBinding(deps: Deps, ctx: Ctx, token: string, claims: ClientTokenClaims) {
  const id = ctx.identity;
  if (
    id.fromEdge &&
    id.credential === 'core-client' &&
    id.principalId === claims.sub &&
    id.tenantId === claims.tid
  )
    return;
  const { jkt, x5t } = bindingOf(claims.cnf);
  if (x5t !== undefined) {
    const presented =
      id.fromEdge && id.clientCertificate ? certificateThumbprint(id.clientCertificate) : undefined;
    if (presented !== x5t)
      throw new AppError(
        'invalid_token',
        'this token is bound to a client certificate that was not presented',
        {
          headers: challenge,
        },
      );
  }
  if (jkt !== undefined) await requireTokenProof(deps, ctx, token, jkt);
}

/**
 * The client's row and its tenant in one round trip: as the edge does (edge/auth/principal.ts,
 * the policy's tenant_active and tenant_ip_ranges), a revoked client's tokens stop at once, a
 * suspended tenant's clients act no more, and outside the tenant's SPEC 2.10 allowed_ip_ranges
 * (the edge's x-client-ip; no address when core is reached without the edge) nothing is done.
 * Returns the tenant's SPEC 2.10 mutual-TLS rule for machine calls, read as the edge reads it
 * (shared/mtls.ts machineMtlsRule).
 */
async function requireLiveClient(deps: Deps, ctx: Ctx, claims: ClientTokenClaims): Promise<MachineMtlsRule> {
  const { rows } = await deps.db.query<{ status: string; ranges: unknown; security: unknown }>(
    `SELECT t.status, t.security -> 'allowed_ip_ranges' AS ranges, t.security
       FROM oauth_clients c JOIN tenants t ON t.id = c.tenant_id
      WHERE c.client_id = $1 AND c.tenant_id = $2 AND c.revoked_at IS NULL`,
    [claims.sub, claims.tid],
  );
  const row = rows[0];
  if (!row)
    throw new AppError('invalid_token', 'the OAuth client of this token is revoked', { headers: challenge });
  if (row.status !== 'ACTIVE') throw new AppError('FORBIDDEN', 'the tenant is suspended');
  if (!addressAllowed(rangesOf(row.ranges), ctx.identity.clientIp))
    throw new AppError('FORBIDDEN', "the source address is outside the tenant's allowed IP ranges");
  return machineMtlsRule(row.security);
}

/**
 * SPEC 2.10 require_mtls_for_m2m, the edge's rule (shared/mtls.ts): the request came with a
 * certificate the tenant trusts, and the token is bound to that very certificate (only the edge
 * forwards one, so never on core reached directly). Checked even when the edge vouched: a
 * certificate, unlike a DPoP proof, is not used up. Customer, agent and staff tokens never come
 * here: people, not machines (SPEC 2.10).
 */
function requireTenantMtls(ctx: Ctx, claims: ClientTokenClaims, rule: MachineMtlsRule, nowMs: number): void {
  if (!rule.required) return;
  const id = ctx.identity;
  const certificate = id.fromEdge ? id.clientCertificate : undefined;
  const refused =
    tenantMtlsRefusal(rule, certificate, nowMs) ?? machineMtlsRefusal(bindingOf(claims.cnf).x5t, certificate);
  if (refused !== undefined) throw new AppError('mtls_required', refused);
}

/**
 * Verify the caller's token and scope; `core:write` includes `core:read`. A machine client
 * that signed its request with an API key has no token: the edge verified the signature, and
 * its identity counts only when it provably came from the edge (`identity.fromEdge`).
 */
export async function authenticate(deps: Deps, ctx: Ctx, need: CoreScope): Promise<CorePrincipal> {
  const { keys } = deps;
  const identity = ctx.identity;
  // The edge judged the request on the API key (x-api-key-id wins over any Authorization
  // header there), so core acts for that key too: its budget is counted (core/http/money.ts).
  if (identity.fromEdge && identity.credential === 'api-key' && identity.tenantId && identity.principalId) {
    const scopes = new Set(identity.scopes);
    if (!hasScope(scopes, need)) throw new AppError('INSUFFICIENT_SCOPE', `scope ${need} is required`);
    return { tenantId: identity.tenantId, clientId: identity.principalId, scopes };
  }
  // The one verifier (shared/access-token.ts): the same refusal codes as at the edge.
  let verified: { token: string; claims: ClientTokenClaims };
  try {
    verified = await verifyAccessToken(keys, ctx.headers.authorization, 'client', keys.now());
  } catch (err) {
    if (err instanceof TokenRefusal) throw new AppError(err.code, err.message, { headers: challenge });
    throw err;
  }
  const { token, claims } = verified;
  // The client and its tenant first: what the tenant requires (mTLS) decides the refusal's code.
  const mtls = await requireLiveClient(deps, ctx, claims);
  requireTenantMtls(ctx, claims, mtls, keys.now());
  await requireClientBinding(deps, ctx, token, claims);
  const scopes = scopesOf(claims);
  if (!hasScope(scopes, need)) throw new AppError('INSUFFICIENT_SCOPE', `scope ${need} is required`);
  return { tenantId: claims.tid, clientId: claims.sub, scopes };
}
