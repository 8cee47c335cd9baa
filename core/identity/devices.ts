/**
 * Device keys for step-up (SPEC 2.4.1 AAL 2 "device key signature").
 *
 * A device registers an Ed25519 public key: a JWK {kty: "OKP", crv: "Ed25519", x} or the raw
 * 32-byte key as base64url. A device assertion is
 *   {deviceId, signature}  with  signature = base64url( Ed25519.sign(devicePrivateKey, bytes) )
 * where `bytes` are the UTF-8 (= ASCII) bytes of the challenge token string exactly as
 * received (the compact JWS `header.payload.signature`, no newline, no hashing).
 */
import { createPublicKey, verify } from 'node:crypto';
import { Type, type Static } from '@sinclair/typebox';
import type { Queryable } from '../db/pool.ts';
import { AppError } from '../http/errors.ts';
import { ed25519KeyProblem } from '../../lib/ed25519-key.ts';

export const DeviceJwk = Type.Object({
  kty: Type.Literal('OKP'),
  crv: Type.Literal('Ed25519'),
  x: Type.String({ pattern: '^[A-Za-z0-9_-]{43}$' }),
});
export const PublicKeyInput = Type.Union([Type.String({ pattern: '^[A-Za-z0-9_-]{43}$' }), DeviceJwk]);

export const DeviceAssertion = Type.Object({
  deviceId: Type.String({ pattern: '^[0-9a-f-]{36}$' }),
  signature: Type.String({ pattern: '^[A-Za-z0-9_-]{86}$', description: 'base64url Ed25519 signature (64 bytes)' }),
}, { additionalProperties: false });

/** The 32 raw public-key bytes of a registration input; 400 when it is not a usable key. */
export function rawPublicKey(input: Static<typeof PublicKeyInput>): Buffer {
  const raw = Buffer.from(typeof input === 'string' ? input : input.x, 'base64url');
  if (raw.length !== 32) throw new AppError('VALIDATION_FAILED', 'publicKey must be a 32-byte Ed25519 key');
  const weak = ed25519KeyProblem(raw);
  if (weak) throw new AppError('PUBLIC_KEY_INVALID', `publicKey ${weak.text} (${weak.code})`);
  try {
    keyObject(raw);
  } catch {
    throw new AppError('VALIDATION_FAILED', 'publicKey is not a valid Ed25519 key');
  }
  return raw;
}

function keyObject(raw: Buffer) {
  return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: raw.toString('base64url') }, format: 'jwk' });
}

/** True when `a` is a valid signature over `challengeToken` by an active device of the customer. */
export async function verifyDeviceAssertion(
  q: Queryable, tenantId: string, customerId: string, challengeToken: string, a: Static<typeof DeviceAssertion>,
): Promise<boolean> {
  const { rows } = await q.query<{ public_key: Buffer }>(
    `SELECT public_key FROM customer_devices WHERE tenant_id = $1 AND customer_id = $2 AND id = $3 AND revoked_at IS NULL`,
    [tenantId, customerId, a.deviceId],
  );
  const row = rows[0];
  if (!row) return false;
  try {
    return verify(null, Buffer.from(challengeToken, 'utf8'), keyObject(row.public_key), Buffer.from(a.signature, 'base64url'));
  } catch {
    return false;
  }
}
