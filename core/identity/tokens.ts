/**
 * Access tokens (SPEC 2.4.1) and the bearer check of customer routes.
 *
 * Access token: EdDSA JWT signed with the tenant's active key, header typ "at+jwt", lifetime
 * 600 s (SPEC 8: 5–10 min), claims
 *   sub (customer id), tid, jti (unique), sid (session id), aal (1 | 2), amr (["pin"],
 *   ["pin","otp"] or ["pin","device"]), iat, exp, iss (KeyStore.issuerFor(tid)), aud "payments-api",
 *   optional cnf, and after a step-up `orig` (the request the step-up was for) and, when the
 *   step-up was a device assertion, `dvc` (that device's id: the edge refuses the token once the
 *   device is revoked).
 * Refresh token: 32 random bytes, base64url, opaque; only its SHA-256 is stored.
 */
import { createHash, randomBytes } from 'node:crypto';
import { uuidv7 } from '../../shared/uuid.ts';
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { accessAudience, accessTokenTyp, bindingOf } from '../../shared/access-token.ts';
import { requireLiveSession, verifiedToken } from '../http/access-token.ts';
import type { EdgeIdentity } from '../http/route.ts';
import type { KeyStore } from '../keys/keys.ts';

export { accessAudience };
export const accessTyp = accessTokenTyp;
/** SPEC 8: access tokens live 5–10 minutes; AAL 2 tokens "about 10 minutes". */
export const accessTtlS = 600;

export type Amr = 'pin' | 'otp' | 'device';

export interface AccessClaims {
  tenantId: string;
  sub: string;
  sid: string;
  aal: 1 | 2;
  amr: Amr[];
  cnf?: Record<string, unknown>;
  orig?: string;
  /** The device whose assertion completed the step-up. */
  dvc?: string;
}

/** Sign an access token; returns it with its jti (recorded on the session). */
export async function issueAccessToken(
  keys: KeyStore,
  c: AccessClaims,
  now: number,
): Promise<{ token: string; jti: string }> {
  const jti = uuidv7(now);
  const claims: Record<string, unknown> = {
    sub: c.sub,
    sid: c.sid,
    aal: c.aal,
    amr: c.amr,
    jti,
    aud: accessAudience,
  };
  if (c.cnf) claims.cnf = c.cnf;
  if (c.orig) claims.orig = c.orig;
  if (c.dvc) claims.dvc = c.dvc;
  return { token: await keys.sign(c.tenantId, claims, { expiresInS: accessTtlS, typ: accessTyp }), jti };
}

/** A new opaque refresh token and the hash that is stored. */
export function newRefreshToken(): { token: string; hash: Buffer } {
  const token = randomBytes(32).toString('base64url');
  return { token, hash: hashRefreshToken(token) };
}

export function hashRefreshToken(token: string): Buffer {
  return createHash('sha256').update(token, 'utf8').digest();
}

export interface Caller {
  tenantId: string;
  customerId: string;
  sessionId: string;
  aal: number;
  amr: string[];
  jti: string;
  /** After a step-up: the request (SPEC 4.3 `orig`) the AAL 2 token was issued for. */
  orig?: string;
  /** Expiry of the token (seconds since the epoch): a request-bound grant lasts as long. */
  expS: number;
  /** The DPoP key the token is bound to (the edge checked this request's proof by it). */
  cnfJkt?: string;
}

/**
 * The customer behind `Authorization: Bearer <access token>`, through the one verifier
 * (shared/access-token.ts: signature, audience, type, expiry, claims; its table of refusal
 * codes), agreement with the identity headers the edge set (core/http/access-token.ts), a live
 * session of that customer, and the device that stepped the token up not removed.
 */
export async function authenticate(
  deps: { keys: KeyStore; db: Queryable; now: () => number },
  ctx: { headers: Readonly<Record<string, string>>; identity: EdgeIdentity },
): Promise<Caller> {
  const { claims: raw } = await verifiedToken(deps.keys, ctx, 'customer', deps.now());
  await requireLiveSession(deps.db, 'customer', raw, deps.now());
  if (raw.dvc !== undefined) {
    // Issue 13 item 1: removing a device ends what it stepped up (the edge refuses it too).
    const dev = await deps.db.query(
      'SELECT 1 FROM customer_devices WHERE tenant_id = $1 AND customer_id = $2 AND id::text = $3 AND revoked_at IS NULL',
      [raw.tid, raw.sub, raw.dvc],
    );
    if (dev.rows.length === 0)
      throw new AppError(
        'device_revoked',
        'the device key that stepped this token up was removed from the account',
      );
  }
  const cnfJkt = bindingOf(raw.cnf).jkt;
  return {
    tenantId: raw.tid,
    customerId: raw.sub,
    sessionId: raw.sid,
    aal: raw.aal,
    amr: raw.amr,
    jti: raw.jti,
    expS: raw.exp,
    ...(raw.orig ? { orig: raw.orig } : {}),
    ...(cnfJkt ? { cnfJkt } : {}),
  };
}
