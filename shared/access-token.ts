/**
 * The one bearer access-token verifier (issue 21 item 2), used by the edge for every JWT
 * credential and by core wherever it checks a token again (defence in depth): the same reading of
 * the Authorization header (./bearer.ts), the same signature, issuer, audience, type, expiry and
 * claim checks, the same session rule, and ONE code per refusal, at the edge and at core:
 *
 * | refusal                                                          | code              | status |
 * |------------------------------------------------------------------|-------------------|--------|
 * | no token in `Authorization` (RFC 6750 §3.1: no `error` attribute) | `UNAUTHENTICATED` | 401    |
 * | not a JWT, no tenant or key id, unknown or retired key            | `invalid_token`   | 401    |
 * | bad signature, wrong issuer, wrong audience or `typ`              | `invalid_token`   | 401    |
 * | expired (beyond 5 s of skew) or issued in the future (beyond 30 s) | `invalid_token`   | 401    |
 * | a claim missing or malformed for its kind of token                | `invalid_token`   | 401    |
 * | the token disagrees with the principal the edge vouched for (core) | `invalid_token`   | 401    |
 * | session unknown, revoked, of another subject, or staff member gone | `session_revoked` | 401    |
 * | session idle past the tenant's timeout (edge; core with slack)     | `session_expired` | 401    |
 * | the device key that stepped the token up was removed               | `device_revoked`  | 401    |
 * | the token is of another tenant than the edge's identity (core)     | `TENANT_MISMATCH` | 403    |
 *
 * RFC 6750 §3.1 names every refusal but the first `invalid_token` on the wire; the message
 * says which (expired, revoked key...). Proof-of-possession refusals of a bound token
 * (`invalid_dpop_proof`) are the edge's (edge/auth/dpop.ts) and core's (core/http/dpop.ts).
 */
import { type Static, type TSchema, Type } from '@sinclair/typebox';
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import { bearerToken } from './bearer.ts';
import { isTokenFault, type TokenVerifier } from './token-keys.ts';

export type TokenRefusalCode =
  | 'UNAUTHENTICATED'
  | 'invalid_token'
  | 'session_revoked'
  | 'session_expired'
  | 'device_revoked';

/** A refused token; the edge answers it as a CredentialError, core as an AppError, same code. */
export class TokenRefusal extends Error {
  constructor(
    readonly code: TokenRefusalCode,
    message: string,
  ) {
    super(message);
  }
}

/** Tolerated difference between an issuer's clock and ours for `iat` (a token from the future). */
export const maxClockSkewMs = 30_000;
/** SPEC 2.10 session_timeout_minutes when the tenant sets none. */
export const defaultSessionTimeoutMin = 30;

/** SPEC 2.4.1: customer and agent access tokens. */
export const accessAudience = 'payments-api';
/** Issue 14 item 5: a staff member's access tokens. */
export const staffAudience = 'staff';
/** SPEC 5.1: OAuth client-credentials tokens for /v1/core/*. */
export const coreAudience = 'core';
/** RFC 9068: every access token this platform issues has this `typ`. */
export const accessTokenTyp = 'at+jwt';

const sessionClaims = {
  sub: Type.String({ minLength: 1, maxLength: 64 }),
  tid: Type.String({ minLength: 1 }),
  sid: Type.String({ minLength: 1, maxLength: 64 }),
  jti: Type.String({ minLength: 1, maxLength: 64 }),
  aal: Type.Integer({ minimum: 1, maximum: 3 }),
  amr: Type.Array(Type.String({ maxLength: 32 }), { maxItems: 16 }),
  iat: Type.Number(),
  exp: Type.Number(),
  /** After a step-up: the request (SPEC 4.3 `orig`) the AAL 2 token was issued for. */
  orig: Type.Optional(Type.String({ maxLength: 64 })),
  /** The device whose assertion completed the step-up (issue 13 item 1). */
  dvc: Type.Optional(Type.String({ maxLength: 64 })),
  cnf: Type.Optional(Type.Unknown()),
};
const Role = Type.String({ maxLength: 32 });

const SessionClaims = Type.Object(sessionClaims);
const StaffClaims = Type.Object({
  ...sessionClaims,
  org_roles: Type.Array(Role, { maxItems: 16 }),
  tenant_roles: Type.Array(
    Type.Object({ tenant: Type.String({ maxLength: 64 }), roles: Type.Array(Role, { maxItems: 16 }) }),
    { maxItems: 1000 },
  ),
});
const ClientClaims = Type.Object({
  sub: Type.String({ minLength: 1 }),
  tid: Type.String({ minLength: 1 }),
  iat: Type.Number(),
  /** Every token expires: the signature library checks `exp` only when a token carries one. */
  exp: Type.Number(),
  scope: Type.Optional(Type.String()),
  scp: Type.Optional(Type.Array(Type.String())),
  cnf: Type.Optional(Type.Unknown()),
});

export type SessionTokenClaims = Static<typeof SessionClaims>;
export type StaffTokenClaims = Static<typeof StaffClaims>;
export type ClientTokenClaims = Static<typeof ClientClaims>;

interface Kind<T extends TSchema> {
  audience: string;
  /** The bare JWT without a scheme (SPEC 5.1, core clients only). */
  bare: boolean;
  check: TypeCheck<T>;
  /** The session's subject_type a token of this kind must name. */
  subjectType?: string;
}

const sessionCheck = TypeCompiler.Compile(SessionClaims);
export const tokenKinds = {
  customer: { audience: accessAudience, bare: false, check: sessionCheck, subjectType: 'customer' },
  agent: { audience: accessAudience, bare: false, check: sessionCheck, subjectType: 'agent' },
  staff: {
    audience: staffAudience,
    bare: false,
    check: TypeCompiler.Compile(StaffClaims),
    subjectType: 'user',
  },
  client: { audience: coreAudience, bare: true, check: TypeCompiler.Compile(ClientClaims) },
} as const satisfies Record<string, Kind<TSchema>>;
export type TokenKind = keyof typeof tokenKinds;
interface ClaimsByKind {
  customer: SessionTokenClaims;
  agent: SessionTokenClaims;
  staff: StaffTokenClaims;
  client: ClientTokenClaims;
}
export type ClaimsOf<K extends TokenKind> = ClaimsByKind[K];

/**
 * The token in `authorization` verified as a `kind` token at `nowMs`: the refusals of the table
 * above up to the claims; the session, device and principal rows are the caller's to check.
 */
export async function verifyAccessToken<K extends TokenKind>(
  verifier: Pick<TokenVerifier, 'verify'>,
  authorization: string | undefined,
  kind: K,
  nowMs: number,
): Promise<{ token: string; claims: ClaimsOf<K> }> {
  const k: Kind<TSchema> = tokenKinds[kind];
  const token = bearerToken(authorization, { bare: k.bare });
  if (!token) throw new TokenRefusal('UNAUTHENTICATED', 'a bearer access token is required');
  let raw: unknown;
  try {
    raw = await verifier.verify(token, { audience: k.audience, typ: accessTokenTyp });
  } catch (err) {
    // Only the token's own faults are refusals; a key set that could not be read is not one.
    if (!isTokenFault(err)) throw err;
    const expired = (err as { code?: unknown }).code === 'ERR_JWT_EXPIRED';
    throw new TokenRefusal('invalid_token', expired ? 'access token expired' : 'access token is not valid');
  }
  if (!k.check.Check(raw)) throw new TokenRefusal('invalid_token', 'access token lacks its claims');
  const claims = raw as ClaimsOf<K>;
  if (claims.iat * 1000 > nowMs + maxClockSkewMs)
    throw new TokenRefusal('invalid_token', 'access token is future-dated');
  return { token, claims };
}

/** Which proof of possession a verified token's `cnf` claim demands (RFC 9449 `jkt`, RFC 8705 `x5t#S256`). */
export function bindingOf(cnf: unknown): { jkt?: string; x5t?: string } {
  if (!cnf || typeof cnf !== 'object') return {};
  const c = cnf as Record<string, unknown>;
  return {
    ...(typeof c.jkt === 'string' ? { jkt: c.jkt } : {}),
    ...(typeof c['x5t#S256'] === 'string' ? { x5t: c['x5t#S256'] } : {}),
  };
}

/** What the session rule reads of a session, wherever it comes from (edge cache, core's table). */
export interface SessionFacts {
  subjectType: string;
  subjectId: string;
  revoked: boolean;
  /** Last activity; the edge holds it, core's copy lags (core adds slack: core/http/access-token.ts). */
  lastSeenMs?: number;
}

/**
 * The session rule for a session token (SPEC 2.10): the session exists, is of this token's
 * subject and kind, is not revoked, and (where `idle` is given) has not been idle past the
 * tenant's timeout.
 */
export function checkSession<S extends SessionFacts>(
  session: S | undefined,
  kind: 'customer' | 'agent' | 'staff',
  sub: string,
  idle?: { nowMs: number; timeoutMin: number },
): asserts session is S {
  if (!session || session.subjectId !== sub || session.subjectType !== tokenKinds[kind].subjectType)
    throw new TokenRefusal('session_revoked', 'session not found');
  if (session.revoked) throw new TokenRefusal('session_revoked', 'session has been revoked');
  if (idle && session.lastSeenMs !== undefined && idle.nowMs - session.lastSeenMs > idle.timeoutMin * 60_000)
    throw new TokenRefusal('session_expired', 'session idle timeout');
}
