/**
 * DPoP proofs (RFC 9449): one implementation for the edge (proofs that accompany a bound access
 * token) and core (proofs at sign-in, step-up, refresh and the token endpoint, which bind new
 * tokens to the proof's key). A proof is a JWT of type `dpop+jwt`, signed by the public key in
 * its own `jwk` header; `htm` and `htu` name this request, `iat` is within the window, `jti` is
 * used once across every process (the caller's `firstUse`, a database table), `ath` is the
 * access token's hash when one is presented, and `nonce` is a server nonce when one is asked for.
 */
import { createHmac, hash, timingSafeEqual } from 'node:crypto';
import { EmbeddedJWK, calculateJwkThumbprint, decodeProtectedHeader, type JWK } from 'jose';
import { verifyJwt } from './jws.ts';

/** RFC 9449 §11.1: accept proofs issued within this many seconds of now. */
export const dpopWindowS = 60;
/** Asymmetric algorithms accepted for proofs (issue 17: EdDSA, ES256, PS256; never none or HMAC). */
export const dpopAlgorithms = ['EdDSA', 'ES256', 'PS256'] as const;
const maxProofChars = 8192;

export type DpopErrorCode = 'invalid_dpop_proof' | 'use_dpop_nonce';

export class DpopError extends Error {
  constructor(
    readonly code: DpopErrorCode,
    message: string,
  ) {
    super(message);
  }
}

/** RFC 9449 §7.1: the challenge a refusal carries (`WWW-Authenticate`). */
export function dpopChallenge(err?: { code: string; message: string }): string {
  const base = `DPoP algs="${dpopAlgorithms.join(' ')}"`;
  return err ? `${base}, error="${err.code}", error_description="${err.message.replaceAll('"', "'")}"` : base;
}

/** RFC 9449 §4.3: the request URI without query and fragment, scheme and host lower-cased. */
export function htuOf(url: string): string | undefined {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname}`.replace(/^[A-Za-z]+:/, (s) => s.toLowerCase());
  } catch {
    return undefined;
  }
}

export interface ProofCheck {
  /** The `DPoP` header as received (more than one header, joined by a comma, is refused). */
  proof: string;
  method: string;
  /** The URL the client addressed (scheme://host/path; query and fragment are ignored). */
  url: string;
  nowMs: number;
  /** When the request presents an access token: its hash must be the proof's `ath`. */
  accessToken?: string;
  /** When the token or session is bound: the proof's key must have this thumbprint. */
  expectedJkt?: string;
  /** Server nonces: when given, a proof must carry a nonce this accepts. */
  nonce?: (value: string) => boolean;
  /** Record a one-time value across every instance; false when already seen. */
  firstUse: (value: string, ttlMs: number) => Promise<boolean>;
}

const invalid = (message: string) => new DpopError('invalid_dpop_proof', message);

async function verified(proof: string): Promise<{ payload: Record<string, unknown>; jwk: JWK }> {
  if (proof.length > maxProofChars || proof.includes(','))
    throw invalid('exactly one DPoP proof is expected');
  try {
    const header = decodeProtectedHeader(proof);
    const jwk = header.jwk;
    // A private key in the header would be the client's secret sent in the clear: refused.
    if (!jwk || 'd' in jwk || 'k' in jwk) throw new Error('no public jwk');
    const { payload } = await verifyJwt(proof, EmbeddedJWK, {
      typ: 'dpop+jwt',
      algorithms: [...dpopAlgorithms],
    });
    return { payload, jwk };
  } catch {
    throw invalid('DPoP proof does not verify');
  }
}

/** Verify a proof for this request; returns the thumbprint of its key (the `cnf.jkt` to bind). */
export async function verifyDpopProof(c: ProofCheck): Promise<{ jkt: string }> {
  const { payload, jwk } = await verified(c.proof);
  const jkt = await calculateJwkThumbprint(jwk, 'sha256');
  if (c.expectedJkt !== undefined && jkt !== c.expectedJkt)
    throw invalid('DPoP key does not match the token binding');
  if (payload.htm !== c.method) throw invalid('DPoP htm does not match the request method');
  const htu = typeof payload.htu === 'string' ? htuOf(payload.htu) : undefined;
  if (htu === undefined || htu !== htuOf(c.url)) throw invalid('DPoP htu does not match the request URI');
  const iat = typeof payload.iat === 'number' ? payload.iat : Number.NaN;
  if (!(Math.abs(c.nowMs / 1000 - iat) <= dpopWindowS))
    throw invalid('DPoP proof is outside its time window');
  if (c.accessToken !== undefined) {
    const ath = hash('sha256', c.accessToken, 'base64url');
    if (payload.ath !== ath) throw invalid('DPoP ath does not match the access token');
  }
  if (typeof payload.jti !== 'string' || payload.jti.length < 8 || payload.jti.length > 256)
    throw invalid('DPoP proof has no usable jti');
  if (c.nonce) {
    if (payload.nonce === undefined)
      throw new DpopError('use_dpop_nonce', 'a server nonce is required in the DPoP proof');
    if (typeof payload.nonce !== 'string' || !c.nonce(payload.nonce))
      throw new DpopError('use_dpop_nonce', 'the DPoP nonce is not valid; use the one just sent');
  }
  if (!(await c.firstUse(`${jkt}:${payload.jti}`, 2 * dpopWindowS * 1000)))
    throw invalid('DPoP proof replayed');
  return { jkt };
}

/**
 * Server nonces (RFC 9449 §8) without storage: an HMAC of the current time period under a key
 * every instance holds, so a nonce one instance issued is accepted by another. A nonce is good
 * for the period it was issued in and the next.
 */
export class DpopNonces {
  constructor(
    private readonly key: Buffer,
    private readonly periodMs = 5 * 60_000,
  ) {}

  private at(period: number): string {
    return createHmac('sha256', this.key).update(`dpop-nonce:${period}`).digest('base64url').slice(0, 32);
  }

  issue(nowMs: number): string {
    return this.at(Math.floor(nowMs / this.periodMs));
  }

  valid(value: string, nowMs: number): boolean {
    const period = Math.floor(nowMs / this.periodMs);
    const given = Buffer.from(value);
    return [period, period - 1].some((p) => {
      const want = Buffer.from(this.at(p));
      return want.length === given.length && timingSafeEqual(want, given);
    });
  }
}
