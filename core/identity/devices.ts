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
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { ed25519KeyProblem } from '../../shared/ed25519-key.ts';
import { isCanonicalBase64url } from '../../shared/jws.ts';

export const DeviceJwk = Type.Object({
  kty: Type.Literal('OKP'),
  crv: Type.Literal('Ed25519'),
  x: Type.String({ pattern: '^[A-Za-z0-9_-]{43}$' }),
});
export const PublicKeyInput = Type.Union([Type.String({ pattern: '^[A-Za-z0-9_-]{43}$' }), DeviceJwk]);

export const DeviceAssertion = Type.Object(
  {
    deviceId: Type.String({ pattern: '^[0-9a-f-]{36}$' }),
    signature: Type.String({
      pattern: '^[A-Za-z0-9_-]{86}$',
      description: 'base64url Ed25519 signature (64 bytes)',
    }),
  },
  { additionalProperties: false },
);

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
  return createPublicKey({
    key: { kty: 'OKP', crv: 'Ed25519', x: raw.toString('base64url') },
    format: 'jwk',
  });
}

/** 403 DEVICE_COOLING_OFF: the key is valid but may not approve anything before `usableFrom`. */
export function coolingOff(usableFrom: Date): AppError {
  return new AppError(
    'DEVICE_COOLING_OFF',
    `this device key was added recently; it can approve from ${usableFrom.toISOString()}`,
  );
}

/** Outcome of a device signature check: `cooling_off` is a valid key still in its cool-off; `usableFrom` when the key became usable. */
export type AssertionResult =
  | { ok: true; usableFrom: Date }
  | { ok: false; reason: 'invalid' }
  | { ok: false; reason: 'cooling_off'; usableFrom: Date };

/**
 * Is `a` a valid signature over `message` by a live device of the customer? A key is usable
 * only once the customer was notified and the cool-off has passed (issue 13 item 1); a
 * successful use is recorded as the device's last use.
 */
export async function verifyDeviceAssertion(
  q: Queryable,
  tenantId: string,
  customerId: string,
  message: string,
  a: Static<typeof DeviceAssertion>,
  nowMs: number,
): Promise<AssertionResult> {
  // One spelling per signature (shared/jws.ts): the decoder also reads `=`, `+`, `/` and ignores
  // the 4 spare bits of its 86th character; an intent signature (a header) has no schema before this.
  if (!isCanonicalBase64url(a.signature)) return { ok: false, reason: 'invalid' };
  const { rows } = await q.query<{ public_key: Buffer; usable_from: Date; notified_at: Date | null }>(
    `SELECT public_key, usable_from, notified_at FROM customer_devices WHERE tenant_id = $1 AND customer_id = $2 AND id = $3 AND revoked_at IS NULL`,
    [tenantId, customerId, a.deviceId],
  );
  const row = rows[0];
  if (!row) return { ok: false, reason: 'invalid' };
  let valid: boolean;
  try {
    valid = verify(
      null,
      Buffer.from(message, 'utf8'),
      keyObject(row.public_key),
      Buffer.from(a.signature, 'base64url'),
    );
  } catch {
    valid = false;
  }
  if (!valid) return { ok: false, reason: 'invalid' };
  if (row.notified_at === null || row.usable_from.getTime() > nowMs)
    return { ok: false, reason: 'cooling_off', usableFrom: row.usable_from };
  await q.query(
    'UPDATE customer_devices SET last_used_at = to_timestamp($3 / 1000.0) WHERE tenant_id = $1 AND id = $2',
    [tenantId, a.deviceId, nowMs],
  );
  return { ok: true, usableFrom: row.usable_from };
}
