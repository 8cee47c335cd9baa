/**
 * Bearer tokens on /v1/core/* (SPEC 5.1): `Authorization: Bearer <jwt>` or the bare JWT.
 * The edge checks them first; core checks again (defence in depth) and takes the tenant from
 * the verified token, never from the request body. No token detail reaches the client or logs.
 */
import {
  accessTokenTyp,
  coreAudience,
  TokenRefusal,
  verifyAccessToken,
  type ClientTokenClaims,
} from '../../shared/access-token.ts';
import type { KeyStore } from '../keys/keys.ts';
import type { Queryable } from '../../shared/db/pool.ts';
import type { EdgeIdentity } from '../http/route.ts';
import { AppError } from '../../shared/errors.ts';
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

/**
 * Verify the caller's token and scope; `core:write` includes `core:read`. A machine client
 * that signed its request with an API key has no token: the edge verified the signature, and
 * its identity counts only when it provably came from the edge (`identity.fromEdge`).
 */
export async function authenticate(
  deps: { keys: KeyStore; db: Queryable },
  headers: Readonly<Record<string, string>>,
  need: CoreScope,
  identity?: EdgeIdentity,
): Promise<CorePrincipal> {
  const { keys } = deps;
  // The edge judged the request on the API key (x-api-key-id wins over any Authorization
  // header there), so core acts for that key too: its budget is counted (core/http/money.ts).
  if (identity?.fromEdge && identity.credential === 'api-key' && identity.tenantId && identity.principalId) {
    const scopes = new Set(identity.scopes);
    if (!hasScope(scopes, need)) throw new AppError('INSUFFICIENT_SCOPE', `scope ${need} is required`);
    return { tenantId: identity.tenantId, clientId: identity.principalId, scopes };
  }
  // The one verifier (shared/access-token.ts): the same refusal codes as at the edge.
  let claims: ClientTokenClaims;
  try {
    ({ claims } = await verifyAccessToken(keys, headers.authorization, 'client', keys.now()));
  } catch (err) {
    if (err instanceof TokenRefusal) throw new AppError(err.code, err.message, { headers: challenge });
    throw err;
  }
  // As the edge does (edge/auth/principal.ts): a revoked client's tokens stop at once.
  const { rows } = await deps.db.query(
    'SELECT 1 FROM oauth_clients WHERE client_id = $1 AND tenant_id = $2 AND revoked_at IS NULL',
    [claims.sub, claims.tid],
  );
  if (!rows[0])
    throw new AppError('invalid_token', 'the OAuth client of this token is revoked', { headers: challenge });
  const scopes = scopesOf(claims);
  if (!hasScope(scopes, need)) throw new AppError('INSUFFICIENT_SCOPE', `scope ${need} is required`);
  return { tenantId: claims.tid, clientId: claims.sub, scopes };
}
