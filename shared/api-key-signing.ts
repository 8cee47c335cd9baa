/**
 * Signing requests with an API key (SPEC 5.4), for merchants and partner systems:
 *
 *   canonical = UPPER(method) "\n" path "\n" hex(SHA-256(body)) "\n" date "\n" nonce
 *   x-signature = base64url( HMAC-SHA256( key = UTF-8(secret), message = UTF-8(canonical) ) )
 *
 * - `path` is the raw request target exactly as sent: path plus query string (`/v1/transfers?x=1`),
 *   no decoding, no normalisation.
 * - hex is lower-case; the body is the exact bytes sent (the empty string hashes to e3b0c442…).
 * - `date` is the `date` header verbatim (an RFC 9110 IMF-fixdate such as
 *   `Sun, 22 Nov 2026 10:00:00 GMT`); it must lie within the replay window of the edge clock.
 * - `nonce` is the `x-nonce` header: 16–128 characters of [A-Za-z0-9_-], never reused per key.
 * - base64url is RFC 4648 §5 without padding.
 */
import { createHmac, hash, randomBytes } from 'node:crypto';

export interface SignInput {
  method: string;
  /** Path with query string, as sent. */
  path: string;
  body?: string | Buffer;
  keyId: string;
  secret: string;
  /** Defaults to now, formatted as an IMF-fixdate. */
  date?: string;
  /** Defaults to 24 random bytes, base64url. */
  nonce?: string;
}

export function canonicalString(
  method: string,
  path: string,
  body: string | Buffer,
  date: string,
  nonce: string,
): string {
  const bodyHash = hash('sha256', body, 'hex');
  return `${method.toUpperCase()}\n${path}\n${bodyHash}\n${date}\n${nonce}`;
}

export function signature(secret: string, canonical: string): string {
  return createHmac('sha256', secret).update(canonical, 'utf8').digest('base64url');
}

/** The headers to send with a signed request. */
export function signRequest(
  input: SignInput,
): Record<'x-api-key-id' | 'x-signature' | 'x-nonce' | 'date', string> {
  const date = input.date ?? new Date().toUTCString();
  const nonce = input.nonce ?? randomBytes(24).toString('base64url');
  const canonical = canonicalString(input.method, input.path, input.body ?? '', date, nonce);
  return {
    'x-api-key-id': input.keyId,
    'x-signature': signature(input.secret, canonical),
    'x-nonce': nonce,
    date,
  };
}
