/**
 * Step-up challenges (SPEC 4.3 rule 2, SPEC 3, SPEC 8: 300 s). Shared by the edge (which issues
 * one when a transfer arrives below AAL 2) and core (`/customers/auth/stepup/complete`).
 *
 * `orig` binds a challenge to one request:
 *   orig = base64url( SHA-256( UTF-8( METHOD + "|" + path + "|" + normalizedBody ) ) )
 * where METHOD is upper-case, `path` is the request path without the query string exactly as
 * received (no decoding or trailing-slash changes), and normalizedBody is
 *   - ""                              for an empty body,
 *   - canonicalJson(JSON.parse(body)) when the body is JSON (lib/canonical-json.ts: keys sorted
 *                                     by code unit, no whitespace, JS number form), so key order
 *                                     and spacing do not matter but every value does,
 *   - the body as UTF-8 text          otherwise (also for JSON with a number that overflows to
 *                                     Infinity, which core refuses with 400).
 * base64url is RFC 4648 §5 without padding.
 *
 * The challenge token is an EdDSA JWT signed with the tenant's active key:
 *   header {alg: EdDSA, kid, typ: "stepup+jwt"}
 *   claims {kind: "stepup", sub, tid, orig, methods[], jti, iat, exp = iat + 300, iss, aud: "payments-stepup"}
 * It is single use: stepup/complete records its jti (table used_challenges).
 */
import { createHash } from 'node:crypto';
import { canonicalJson } from '../../lib/canonical-json.ts';
import { uuidv7 } from '../../lib/uuid.ts';
import { AppError } from '../http/errors.ts';
import type { KeyStore } from '../keys/keys.ts';

export const challengeAudience = 'payments-stepup';
export const challengeTyp = 'stepup+jwt';
/** SPEC 8: step-up challenge lifetime. */
export const challengeTtlS = 300;

export type StepUpMethod = 'otp' | 'device';

/** The normalized body of SPEC 4.3 rule 2 (see the file comment). */
export function normalizedBody(body: Buffer | string): string {
  const text = typeof body === 'string' ? body : body.toString('utf8');
  if (text.length === 0) return '';
  try {
    return canonicalJson(JSON.parse(text));
  } catch {
    // Not JSON, or JSON canonical JSON cannot hold (a number overflowing to Infinity): the text
    // itself. Never a throw, which at the edge would fail every such request closed (503).
    return text;
  }
}

/** base64url(SHA-256(`METHOD|path|normalized body`)). */
export function origOf(method: string, path: string, body: Buffer | string): string {
  return createHash('sha256').update(`${method.toUpperCase()}|${path}|${normalizedBody(body)}`, 'utf8').digest('base64url');
}

export interface ChallengeInput {
  tenantId: string;
  sub: string;
  orig: string;
  methods: StepUpMethod[];
}

/**
 * Sign a challenge. `now` only seeds the time-ordered jti; iat/exp come from the KeyStore's
 * clock, so inject the clock there.
 */
export async function issueChallenge(keys: KeyStore, c: ChallengeInput, now: number = Date.now()): Promise<string> {
  return keys.sign(
    c.tenantId,
    { kind: 'stepup', sub: c.sub, orig: c.orig, methods: c.methods, jti: uuidv7(now), aud: challengeAudience },
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
 * tenant and customer (and request, when `orig` is given). Every failure is `challenge_mismatch`.
 */
export async function verifyChallenge(
  keys: KeyStore, token: string, expect: { tenantId: string; sub: string; orig?: string },
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
  if (typeof orig !== 'string' || (expect.orig !== undefined && orig !== expect.orig)) throw mismatch('request');
  if (typeof jti !== 'string' || typeof exp !== 'number') throw mismatch('claims');
  const ms = Array.isArray(methods) ? methods.filter((m): m is StepUpMethod => m === 'otp' || m === 'device') : [];
  return { jti, sub, tid, orig, methods: ms, exp };
}
