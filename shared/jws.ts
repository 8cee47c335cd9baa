/**
 * One spelling per compact JWS (RFC 7515 §7.1): three segments of base64url without padding
 * (§2), each the only spelling of its bytes. The decoders under jose and openid-client on Node 20
 * (atob) also read `=` padding, whitespace and unused low bits in a segment's last character, so
 * `token==`, or a signature whose last character differs only in those bits, verified as the
 * same token: a second spelling, cached, counted and replay-checked as another token. Every
 * verification of a compact token (access tokens at the edge and at core, step-up challenges,
 * DPoP proofs, client assertions: through verifyJwt; federated ID tokens, which openid-client
 * verifies: with isCompactJws) refuses any other spelling as it refuses any malformed token.
 * biome.json keeps jose's verify functions out of every other module.
 */
import {
  errors,
  jwtVerify,
  type JWTPayload,
  type JWTVerifyGetKey,
  type JWTVerifyOptions,
  type JWTVerifyResult,
  type KeyInput,
} from 'jose';

/** The 6-bit value of a base64url character (RFC 4648 §5), or -1 for any other code unit. */
function sextet(c: number): number {
  if (c >= 0x41 && c <= 0x5a) return c - 0x41; // A-Z
  if (c >= 0x61 && c <= 0x7a) return c - 0x61 + 26; // a-z
  if (c >= 0x30 && c <= 0x39) return c - 0x30 + 52; // 0-9
  if (c === 0x2d) return 62; // -
  if (c === 0x5f) return 63; // _
  return -1;
}

/**
 * Whether `s[start, end)` is canonical unpadded base64url: only [A-Za-z0-9_-], a length no
 * encoding has (4n + 1) refused, and the bits past the last whole byte zero (RFC 4648 §3.5), so
 * decoding and encoding again gives the same text. No allocation: the edge checks every new token.
 */
export function isCanonicalBase64url(s: string, start = 0, end = s.length): boolean {
  const n = end - start;
  if (n % 4 === 1) return false;
  let last = 0;
  for (let i = start; i < end; i++) {
    last = sextet(s.charCodeAt(i));
    if (last < 0) return false;
  }
  // 2 characters carry 1 byte and 4 spare bits; 3 carry 2 bytes and 2 spare bits.
  if (n % 4 === 2) return (last & 0x0f) === 0;
  if (n % 4 === 3) return (last & 0x03) === 0;
  return true;
}

/** Whether `token` is a compact JWS in its one spelling: exactly three canonical base64url segments. */
export function isCompactJws(token: string): boolean {
  const first = token.indexOf('.');
  const second = first < 0 ? -1 : token.indexOf('.', first + 1);
  if (second < 0 || token.indexOf('.', second + 1) >= 0) return false;
  return (
    isCanonicalBase64url(token, 0, first) &&
    isCanonicalBase64url(token, first + 1, second) &&
    isCanonicalBase64url(token, second + 1, token.length)
  );
}

/**
 * jose's jwtVerify, for a token in its one spelling only: any other is refused with a jose error
 * (ERR_JWS_INVALID), so every caller answers it exactly as it answers a malformed token.
 */
export function verifyJwt(
  token: string,
  key: KeyInput | JWTVerifyGetKey,
  options: JWTVerifyOptions,
): Promise<JWTVerifyResult<JWTPayload>> {
  if (!isCompactJws(token))
    return Promise.reject(
      new errors.JWSInvalid('not a compact JWS: segments must be unpadded, canonical base64url'),
    );
  return jwtVerify(token, key, options);
}
