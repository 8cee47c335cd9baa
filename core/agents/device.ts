/**
 * Proof of the agent's bound device (issue 9 item 1: "later logins require that device").
 *
 * The device holds an Ed25519 key registered by device-bind. Login and refresh carry
 *   {deviceId, timestamp, signature}
 * with signature = base64url( Ed25519.sign(devicePrivateKey, UTF-8 bytes of
 *   `${purpose}|${tenantId}|${agentCode}|${deviceId}|${timestamp}` ) )
 * where purpose is "agent-login" or "agent-refresh" and timestamp is milliseconds since the
 * epoch as decimal text. A proof is accepted within ±`proofSkewMs` of the server clock and only
 * once (its signature's hash is recorded in `used_challenges` until it would have expired; the
 * signature in its one base64url spelling), so a captured proof cannot be replayed. PIN + device key = two factors: agent sessions are AAL 2.
 */
import { createHash, createPublicKey, verify } from 'node:crypto';
import { Type, type Static } from '@sinclair/typebox';
import type { Queryable } from '../../shared/db/pool.ts';
import { isCanonicalBase64url } from '../../shared/jws.ts';
import { Uuid } from '../ledger/schemas.ts';

/** A device clock may differ from ours by this much either way. */
export const proofSkewMs = 120_000;

export const DeviceProof = Type.Object(
  {
    deviceId: Uuid,
    timestamp: Type.String({ pattern: '^[0-9]{10,16}$', description: 'milliseconds since the epoch' }),
    signature: Type.String({
      pattern: '^[A-Za-z0-9_-]{86}$',
      description: 'base64url Ed25519 signature (64 bytes)',
    }),
  },
  { additionalProperties: false },
);
export type DeviceProof = Static<typeof DeviceProof>;

export type ProofPurpose = 'agent-login' | 'agent-refresh';

export function proofMessage(
  purpose: ProofPurpose,
  tenantId: string,
  agentCode: string,
  deviceId: string,
  timestamp: string,
): string {
  return `${purpose}|${tenantId}|${agentCode}|${deviceId}|${timestamp}`;
}

/**
 * True when `p` is a fresh, unused signature by the agent's live bound device. Records the
 * proof as used (inside the caller's transaction) when it is valid.
 */
export async function checkDeviceProof(
  q: Queryable,
  purpose: ProofPurpose,
  tenantId: string,
  agent: { id: string; code: string },
  p: DeviceProof,
  now: number,
): Promise<boolean> {
  const ts = Number(p.timestamp);
  if (!Number.isSafeInteger(ts) || Math.abs(ts - now) > proofSkewMs) return false;
  // One spelling per signature (shared/jws.ts): 86 characters carry its 64 bytes and 4 bits more,
  // which the decoder ignores; set, they made the same proof another text, and another use.
  if (!isCanonicalBase64url(p.signature)) return false;
  const signature = Buffer.from(p.signature, 'base64url');
  // A login locks the device row until its session is open (FOR SHARE): a bind revoking it either
  // committed before (the device is no longer bound) or waits, then revokes that session too; not
  // locked, its revocation missed a session opened by a proof it checked first. A refresh holds its
  // session row (FOR UPDATE), which the bind's revocation waits for; locking the device there too
  // would take the two in the bind's opposite order.
  const { rows } = await q.query<{ public_key: Buffer }>(
    `SELECT public_key FROM agent_devices WHERE tenant_id = $1 AND agent_id = $2 AND id = $3 AND revoked_at IS NULL${
      purpose === 'agent-login' ? ' FOR SHARE' : ''
    }`,
    [tenantId, agent.id, p.deviceId],
  );
  const row = rows[0];
  if (!row) return false;
  let ok = false;
  try {
    const key = createPublicKey({
      key: { kty: 'OKP', crv: 'Ed25519', x: row.public_key.toString('base64url') },
      format: 'jwk',
    });
    ok = verify(
      null,
      Buffer.from(proofMessage(purpose, tenantId, agent.code, p.deviceId, p.timestamp), 'utf8'),
      key,
      signature,
    );
  } catch {
    ok = false;
  }
  if (!ok) return false;
  // Used once by its bytes, whatever text carried them.
  const jti = `agent-proof:${createHash('sha256').update(signature).digest('base64url')}`;
  const ins = await q.query(
    `INSERT INTO used_challenges (tenant_id, jti, used_at, expires_at) VALUES ($1, $2, to_timestamp($3 / 1000.0), to_timestamp($4 / 1000.0))
     ON CONFLICT DO NOTHING`,
    [tenantId, jti, now, ts + proofSkewMs],
  );
  return ins.rowCount === 1;
}
