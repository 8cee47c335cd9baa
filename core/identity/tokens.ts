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
import { Type } from '@sinclair/typebox';
import { bearerToken } from '../../shared/bearer.ts';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { uuidv7 } from '../../shared/uuid.ts';
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import type { EdgeIdentity } from '../http/route.ts';
import type { KeyStore } from '../keys/keys.ts';

export const accessAudience = 'payments-api';
export const accessTyp = 'at+jwt';
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

const Claims = Type.Object({
  sub: Type.String({ minLength: 1 }),
  tid: Type.String({ minLength: 1 }),
  sid: Type.String({ minLength: 1 }),
  jti: Type.String({ minLength: 1 }),
  aal: Type.Integer({ minimum: 1, maximum: 3 }),
  amr: Type.Array(Type.String()),
  exp: Type.Number(),
  orig: Type.Optional(Type.String()),
  dvc: Type.Optional(Type.String()),
  cnf: Type.Optional(Type.Object({ jkt: Type.Optional(Type.String()) })),
});
const checkClaims = TypeCompiler.Compile(Claims);

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
 * The customer behind `Authorization: Bearer <access token>`: signature, audience, type, expiry,
 * a live session of that customer in that tenant, and (defence in depth) agreement with the
 * identity headers the edge set. Any failure is 401 INVALID_TOKEN; a tenant disagreement 403.
 */
export async function authenticate(
  keys: KeyStore,
  q: Queryable,
  headers: Readonly<Record<string, string>>,
  identity: EdgeIdentity,
): Promise<Caller> {
  const token = bearerToken(headers.authorization);
  if (!token) throw new AppError('INVALID_TOKEN', 'a bearer access token is required');
  let raw: unknown;
  try {
    raw = await keys.verify(token, { audience: accessAudience, typ: accessTyp });
  } catch {
    throw new AppError('INVALID_TOKEN', 'access token is invalid or expired');
  }
  if (!checkClaims.Check(raw)) throw new AppError('INVALID_TOKEN', 'access token is invalid or expired');
  if (identity.tenantId !== undefined && identity.tenantId !== raw.tid) {
    throw new AppError('TENANT_MISMATCH', 'access token belongs to another tenant');
  }
  if (identity.principalId !== undefined && identity.principalId !== raw.sub) {
    throw new AppError('INVALID_TOKEN', 'access token does not match the authenticated principal');
  }
  const { rows } = await q.query<{ subject_id: string }>(
    `SELECT subject_id FROM sessions WHERE tenant_id = $1 AND id = $2 AND subject_type = 'customer' AND revoked_at IS NULL`,
    [raw.tid, raw.sid],
  );
  if (rows[0]?.subject_id !== raw.sub) throw new AppError('INVALID_TOKEN', 'session is revoked or unknown');
  if (raw.dvc !== undefined) {
    // Issue 13 item 1: removing a device ends what it stepped up (the edge refuses it too).
    const dev = await q.query(
      'SELECT 1 FROM customer_devices WHERE tenant_id = $1 AND customer_id = $2 AND id::text = $3 AND revoked_at IS NULL',
      [raw.tid, raw.sub, raw.dvc],
    );
    if (dev.rows.length === 0)
      throw new AppError('INVALID_TOKEN', 'the device that stepped this token up was removed');
  }
  return {
    tenantId: raw.tid,
    customerId: raw.sub,
    sessionId: raw.sid,
    aal: raw.aal,
    amr: raw.amr,
    jti: raw.jti,
    expS: raw.exp,
    ...(raw.orig ? { orig: raw.orig } : {}),
    ...(raw.cnf?.jkt ? { cnfJkt: raw.cnf.jkt } : {}),
  };
}
