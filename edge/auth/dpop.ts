/**
 * DPoP proof checks (RFC 9449) for tenants with `require_dpop`: the proof is a JWT of type
 * `dpop+jwt` signed by the key in its own `jwk` header; `htm` and `htu` name this request,
 * `iat` is within the window, `jti` is used once across every edge, `ath` is the hash of the
 * access token, and the token's `cnf.jkt` is that key's thumbprint.
 */
import { createHash } from 'node:crypto';
import { EmbeddedJWK, calculateJwkThumbprint, decodeProtectedHeader, jwtVerify, type JWK } from 'jose';
import { CredentialError } from './bearer.ts';

/** RFC 9449 §11.1: accept proofs issued within this many seconds of now. */
export const dpopWindowS = 60;

export interface DpopContext {
  proof: string | undefined;
  method: string;
  /** scheme://host/path, without query and fragment (RFC 9449 §4.3). */
  htu: string;
  accessToken: string;
  cnfJkt: string | undefined;
  nowMs: number;
  firstUse: (value: string, ttlMs: number) => Promise<boolean>;
}

const fail = (message: string) => new CredentialError(401, 'invalid_dpop_proof', message);

export async function checkDpop(c: DpopContext): Promise<void> {
  if (!c.proof) throw fail('DPoP proof required by this tenant');
  if (!c.cnfJkt) throw fail('access token is not bound to a DPoP key');
  let payload: Record<string, unknown>;
  let jwk: JWK | undefined;
  try {
    jwk = decodeProtectedHeader(c.proof).jwk;
    ({ payload } = await jwtVerify(c.proof, EmbeddedJWK, { typ: 'dpop+jwt', algorithms: ['EdDSA', 'ES256'] }));
  } catch {
    throw fail('DPoP proof does not verify');
  }
  if (!jwk || (await calculateJwkThumbprint(jwk)) !== c.cnfJkt) throw fail('DPoP key does not match the token binding');
  if (payload.htm !== c.method) throw fail('DPoP htm does not match the request method');
  if (payload.htu !== c.htu) throw fail('DPoP htu does not match the request URI');
  const iat = typeof payload.iat === 'number' ? payload.iat : Number.NaN;
  if (!(Math.abs(c.nowMs / 1000 - iat) <= dpopWindowS)) throw fail('DPoP proof is outside its time window');
  const ath = createHash('sha256').update(c.accessToken).digest('base64url');
  if (payload.ath !== ath) throw fail('DPoP ath does not match the access token');
  if (typeof payload.jti !== 'string' || payload.jti.length < 8) throw fail('DPoP proof has no jti');
  if (!(await c.firstUse(`${c.cnfJkt}:${payload.jti}`, 2 * dpopWindowS * 1000))) throw fail('DPoP proof replayed');
}
