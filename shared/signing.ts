/**
 * Detached Ed25519 signatures over canonical JSON, used for the purpose registry and the
 * policy bundle manifest: `signature` = base64url(Ed25519(canonicalJson(document without signature))).
 */
import { createPublicKey, sign, verify, type KeyObject } from 'node:crypto';
import { canonicalJson } from './canonical-json.ts';
import { isCanonicalBase64url } from './jws.ts';

function payloadOf(doc: Record<string, unknown>): Buffer {
  const { signature: _ignored, ...rest } = doc;
  return Buffer.from(canonicalJson(rest));
}

export function signDocument<T extends Record<string, unknown>>(
  doc: T,
  privateKey: KeyObject,
): T & { signature: string } {
  return { ...doc, signature: sign(null, payloadOf(doc), privateKey).toString('base64url') };
}

/**
 * True when `doc.signature` verifies under any of `trusted`. The signature is read in its one
 * spelling only (shared/jws.ts): Node's base64url decoder also takes `=` padding, `+` and `/`, and
 * ignores the bits past the last whole byte, so the same signed document had other texts.
 */
export function verifyDocument(doc: Record<string, unknown>, trusted: KeyObject[]): boolean {
  const sig = doc.signature;
  if (typeof sig !== 'string' || sig.length === 0 || !isCanonicalBase64url(sig)) return false;
  const payload = payloadOf(doc);
  const bytes = Buffer.from(sig, 'base64url');
  return trusted.some((key) => {
    try {
      return verify(null, payload, key, bytes);
    } catch {
      return false;
    }
  });
}

/** Public keys from a list of JWKs (OKP / Ed25519 only). */
export function publicKeysFromJwks(jwks: unknown): KeyObject[] {
  const keys = (jwks as { keys?: unknown }).keys;
  if (!Array.isArray(keys)) throw new Error('trusted key file has no "keys" array');
  return keys.map((k) => {
    const jwk = k as { kty?: unknown; crv?: unknown };
    if (jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519') throw new Error('trusted keys must be Ed25519 JWKs');
    return createPublicKey({ key: k as import('node:crypto').JsonWebKey, format: 'jwk' });
  });
}
