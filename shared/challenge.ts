/**
 * Step-up challenges (SPEC 4.3 rule 2, SPEC 3, SPEC 8: 300 s). Shared by the edge (which issues
 * one when a request-bound action arrives without a step-up for it: core/identity/bound.ts) and
 * core (`/customers/auth/stepup/complete`).
 *
 * `orig` binds a challenge to one request:
 *   orig = base64url( SHA-256( UTF-8( METHOD + "|" + path + "|" + normalizedBody ) ) )
 * where METHOD is upper-case, `path` is the request target exactly as received: the path and,
 * when present, `?` and the query string (Envoy's `:path`; no decoding or trailing-slash
 * changes). The query is part of the request: a step-up for `/v1/transfers` is not one for
 * `/v1/transfers?x=1` (issue 13 item 2). normalizedBody is
 *   - ""                              for an empty body,
 *   - canonicalJson(JSON.parse(body)) when the body is JSON (shared/canonical-json.ts: keys sorted
 *                                     by code unit, no whitespace, JS number form), so key order
 *                                     and spacing do not matter but every value does,
 *   - the body as UTF-8 text          otherwise (also for JSON with a number that overflows to
 *                                     Infinity, which core refuses with 400).
 * base64url is RFC 4648 §5 without padding.
 *
 * The challenge token is a JWT signed with the challenge key (ChallengeKeys below), a key that
 * signs step-up challenges and nothing else; the edge and core both hold it, neither needs a
 * token-signing key for it:
 *   header {alg: HS256, kid, typ: "stepup+jwt"}
 *   claims {kind: "stepup", sub, tid, orig, methods[], jti, iat, exp = iat + 300, iss, aud: "payments-stepup"}
 * It is single use: stepup/complete records its jti (table used_challenges).
 */
import { createHash, hash } from 'node:crypto';
import { SignJWT, decodeProtectedHeader, type JWTPayload } from 'jose';
import { canonicalJson } from './canonical-json.ts';
import { verifyJwt } from './jws.ts';
import { asJsonBody, type JsonBody } from './json-body.ts';
import { uuidv7 } from './uuid.ts';
import { AppError } from './errors.ts';
import { issuerFor } from './token-keys.ts';

export const challengeAudience = 'payments-stepup';
export const challengeTyp = 'stepup+jwt';
/** SPEC 8: step-up challenge lifetime. */
export const challengeTtlS = 300;

/** Customers: an OTP or a device key; staff: a passkey (issue 16 item 2). */
export type StepUpMethod = 'otp' | 'device' | 'passkey';
const stepUpMethods: readonly string[] = ['otp', 'device', 'passkey'];

/** The normalized body of SPEC 4.3 rule 2 (see the file comment); the edge passes the body it already parsed. */
export function normalizedBody(body: Buffer | string | JsonBody): string {
  const { text, json } = asJsonBody(body);
  if (text.length === 0) return '';
  if (!json) return text;
  try {
    return canonicalJson(json.value);
  } catch {
    // JSON canonical JSON cannot hold (a number overflowing to Infinity): the text itself.
    // Never a throw, which at the edge would fail every such request closed (503).
    return text;
  }
}

/** base64url(SHA-256(`METHOD|path[?query]|normalized body`)). */
export function origOf(method: string, path: string, body: Buffer | string | JsonBody): string {
  // One-shot: no Hash object per Check (issue 18 item 1).
  return hash('sha256', `${method.toUpperCase()}|${path}|${normalizedBody(body)}`, 'base64url');
}

/**
 * The challenge key: HMAC-SHA256 keys (32 bytes), the first signs, all verify (so a new key can
 * be rolled out to every edge and core before it signs). It can mint step-up challenges only: the
 * access-token verifier accepts EdDSA tokens under a tenant key set and nothing else.
 */
export class ChallengeKeys {
  private readonly keys: { kid: string; key: Uint8Array }[];
  private readonly now: () => number;

  constructor(current: Buffer, previous: Buffer[] = [], opts: { now?: () => number } = {}) {
    this.keys = [current, ...previous].map((k) => {
      if (k.length !== 32) throw new Error('challenge key must be 32 bytes');
      return {
        kid: `ch-${createHash('sha256').update(k).digest('base64url').slice(0, 12)}`,
        key: new Uint8Array(k),
      };
    });
    this.now = opts.now ?? Date.now;
  }

  /** Sign with the current key; `iat`, `exp`, `iss`, `tid` and `kid` are set here. */
  async sign(
    tenantId: string,
    claims: JWTPayload & Record<string, unknown>,
    opts: { expiresInS: number; typ?: string },
  ): Promise<string> {
    const signer = this.keys[0] as { kid: string; key: Uint8Array };
    const nowS = Math.floor(this.now() / 1000);
    return new SignJWT({ ...claims, tid: tenantId })
      .setProtectedHeader({ alg: 'HS256', kid: signer.kid, typ: opts.typ ?? 'JWT' })
      .setIssuer(issuerFor(tenantId))
      .setIssuedAt(nowS)
      .setExpirationTime(nowS + opts.expiresInS)
      .sign(signer.key);
  }

  /** Verify signature, audience, type, expiry and that `iss` is the issuer of the token's `tid`. */
  async verify(
    token: string,
    opts: { audience: string; typ?: string; clockToleranceS?: number },
  ): Promise<JWTPayload & { tid: string }> {
    const kid = decodeProtectedHeader(token).kid;
    const key = this.keys.find((k) => k.kid === kid);
    if (!key) throw new Error('unknown challenge key');
    const { payload } = await verifyJwt(token, key.key, {
      algorithms: ['HS256'],
      audience: opts.audience,
      currentDate: new Date(this.now()),
      clockTolerance: opts.clockToleranceS ?? 5,
      ...(opts.typ ? { typ: opts.typ } : {}),
    });
    if (typeof payload.tid !== 'string' || payload.iss !== issuerFor(payload.tid))
      throw new Error('challenge issuer does not match its tenant');
    return payload as JWTPayload & { tid: string };
  }
}

export interface ChallengeInput {
  tenantId: string;
  sub: string;
  orig: string;
  methods: StepUpMethod[];
}

/**
 * Sign a challenge. `now` only seeds the time-ordered jti; iat/exp come from the ChallengeKeys'
 * clock, so inject the clock there.
 */
export async function issueChallenge(
  keys: ChallengeKeys,
  c: ChallengeInput,
  now: number = Date.now(),
): Promise<string> {
  return keys.sign(
    c.tenantId,
    {
      kind: 'stepup',
      sub: c.sub,
      orig: c.orig,
      methods: c.methods,
      jti: uuidv7(now),
      aud: challengeAudience,
    },
    { expiresInS: challengeTtlS, typ: challengeTyp },
  );
}

export interface ChallengeClaims {
  jti: string;
  sub: string;
  tid: string;
  orig: string;
  methods: StepUpMethod[];
  exp: number;
}

function mismatch(why: string): AppError {
  return new AppError('challenge_mismatch', `challenge token is not valid for this request (${why})`);
}

/**
 * Verify signature, audience, type and expiry, then that the challenge is a step-up for this
 * tenant and subject, a customer or a staff member (and request, when `orig` is given). Every failure is `challenge_mismatch`.
 */
export async function verifyChallenge(
  keys: ChallengeKeys,
  token: string,
  expect: { tenantId: string; sub: string; orig?: string },
): Promise<ChallengeClaims> {
  let claims: Record<string, unknown>;
  try {
    claims = await keys.verify(token, { audience: challengeAudience, typ: challengeTyp, clockToleranceS: 0 });
  } catch {
    throw mismatch('signature, type or expiry');
  }
  const { kind, sub, tid, orig, jti, exp, methods } = claims;
  if (kind !== 'stepup') throw mismatch('kind');
  if (tid !== expect.tenantId) throw mismatch('tenant');
  if (sub !== expect.sub) throw mismatch('subject');
  if (typeof orig !== 'string' || (expect.orig !== undefined && orig !== expect.orig))
    throw mismatch('request');
  if (typeof jti !== 'string' || typeof exp !== 'number') throw mismatch('claims');
  const ms = Array.isArray(methods)
    ? methods.filter((m): m is StepUpMethod => typeof m === 'string' && stepUpMethods.includes(m))
    : [];
  return { jti, sub, tid, orig, methods: ms, exp };
}
