/**
 * Demo agent (issue 9): agent code, PIN and a bound device whose private key (JWK) goes into
 * DATA_DIR/demo.json so a script can sign the login proof (core/agents/device.ts), and a float
 * funded by a settled TOPUP instruction (settlement → float through the ledger, audited like any
 * other). Idempotent: a re-run reuses the agent and the credentials of the previous demo.json;
 * if those are lost, the PIN is re-set and a new device bound (the old one revoked).
 */
import { generateKeyPairSync, createPublicKey, type JsonWebKey } from 'node:crypto';
import { randomInt } from 'node:crypto';
import type { Db } from '../../shared/db/pool.ts';
import { identityDeps } from '../identity/context.ts';
import type { KeyStore } from '../keys/keys.ts';
import { createLogger } from '../../shared/log.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { opsFloat, requestFloat } from './float.ts';
import { provisionAgent } from './provision.ts';

export const demoAgent = Object.freeze({
  code: 'DEMO0001',
  phone: '+254700000901',
  name: 'Demo Agent',
  float: '100000.00',
});

interface PrevAgent {
  agentCode: string;
  pin: string;
  deviceId: string;
  devicePrivateJwk: JsonWebKey;
}

function previousAgent(previous: Record<string, unknown>): PrevAgent | undefined {
  const a = previous.agent;
  if (!a || typeof a !== 'object') return undefined;
  const { agentCode, pin, deviceId, devicePrivateJwk } = a as Record<string, unknown>;
  if (
    typeof agentCode !== 'string' ||
    typeof pin !== 'string' ||
    typeof deviceId !== 'string' ||
    !devicePrivateJwk ||
    typeof devicePrivateJwk !== 'object'
  )
    return undefined;
  return { agentCode, pin, deviceId, devicePrivateJwk: devicePrivateJwk as JsonWebKey };
}

/** The device row still bound and matching the previous private key, if any. */
async function liveDevice(
  db: Db,
  tenantId: string,
  agentId: string,
  prev: PrevAgent | undefined,
): Promise<boolean> {
  if (!prev) return false;
  const { rows } = await db.query<{ public_key: Buffer }>(
    'SELECT public_key FROM agent_devices WHERE tenant_id = $1 AND agent_id = $2 AND id = $3 AND revoked_at IS NULL',
    [tenantId, agentId, prev.deviceId],
  );
  const row = rows[0];
  if (!row) return false;
  try {
    const x = createPublicKey({ key: prev.devicePrivateJwk, format: 'jwk' }).export({ format: 'jwk' }).x;
    return x === row.public_key.toString('base64url');
  } catch {
    return false;
  }
}

/** The demo agent already provisioned in the tenant, if any. */
async function existingDemoAgent(db: Db, tenantId: string) {
  const { rows } = await db.query<{ id: string; float_account_id: string; commission_account_id: string }>(
    'SELECT id, float_account_id, commission_account_id FROM agents WHERE tenant_id = $1 AND code = $2',
    [tenantId, demoAgent.code],
  );
  return rows[0]
    ? {
        id: rows[0].id,
        floatAccountId: rows[0].float_account_id,
        commissionAccountId: rows[0].commission_account_id,
      }
    : undefined;
}

/** A new random PIN for the demo agent (the previous one is not known), hashed with the tenant pepper. */
async function resetDemoPin(
  db: Db,
  identity: ReturnType<typeof identityDeps>,
  tenantId: string,
  agentId: string,
): Promise<string> {
  const pin = String(randomInt(100_000, 1_000_000));
  const secrets = await identity.secrets.get(tenantId);
  if (!secrets) throw new Error(`tenant ${tenantId} does not exist`);
  const ph = await identity.pins.hash(pin, secrets.pin);
  await db.query(
    'UPDATE agents SET pin_hash = $3, pin_salt = $4, kdf_version = $5 WHERE tenant_id = $1 AND id = $2',
    [tenantId, agentId, ph.hash, ph.salt, ph.kdfVersion],
  );
  return pin;
}

/** A new device key pair bound to the demo agent, any bound device revoked in the same transaction. */
async function bindDemoDevice(db: Db, tenantId: string, agentId: string, now: number) {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const id = uuidv7(now);
  await db.tx(async (q) => {
    await q.query(
      'UPDATE agent_devices SET revoked_at = to_timestamp($3 / 1000.0) WHERE tenant_id = $1 AND agent_id = $2 AND revoked_at IS NULL',
      [tenantId, agentId, now],
    );
    await q.query(
      'INSERT INTO agent_devices (id, tenant_id, agent_id, public_key, label, created_at) VALUES ($1, $2, $3, $4, $5, to_timestamp($6 / 1000.0))',
      [
        id,
        tenantId,
        agentId,
        Buffer.from(String(publicKey.export({ format: 'jwk' }).x), 'base64url'),
        'demo device (seed)',
        now,
      ],
    );
  });
  return { id, jwk: privateKey.export({ format: 'jwk' }) };
}

/** The demo float funded as any agent's is: a TOPUP instruction approved and settled by ops. */
async function fundDemoFloat(db: Db, tenantId: string, agentId: string, now: number): Promise<void> {
  await db.tx(async (q) => {
    const ins = await requestFloat(
      q,
      { kind: 'agent', tenantId, agentId, sessionId: 'seed', aal: 2 },
      'TOPUP',
      { amount: demoAgent.float, reference: 'demo seed' },
      'seed',
      now,
    );
    const ops = { kind: 'ops' as const, tenantId, principalId: 'seed' };
    await opsFloat(q, ops, ins.id, 'approve', undefined, 'seed', now);
    await opsFloat(q, ops, ins.id, 'settle', undefined, 'seed', now);
  });
}

export async function seedDemoAgent(ctx: {
  db: Db;
  tenantId: string;
  previous: Record<string, unknown>;
  keys?: KeyStore | undefined;
}): Promise<Record<string, unknown>> {
  const { db, tenantId, keys } = ctx;
  // The PIN hash needs the tenant pepper, sealed by the master key: without the key store, no agent.
  if (!keys) return {};
  const now = Date.now();
  const identity = identityDeps({ db, keys, log: createLogger('silent'), now: () => now });
  const prev = previousAgent(ctx.previous);
  const existing = await existingDemoAgent(db, tenantId);
  let pin = prev?.agentCode === demoAgent.code ? prev.pin : String(randomInt(100_000, 1_000_000));
  const fresh = existing === undefined;
  const agent =
    existing ??
    (await provisionAgent(
      db,
      identity,
      { tenantId, code: demoAgent.code, phone: demoAgent.phone, name: demoAgent.name, pin, currency: 'KES' },
      now,
    ));
  let device =
    prev && (await liveDevice(db, tenantId, agent.id, prev))
      ? { id: prev.deviceId, jwk: prev.devicePrivateJwk }
      : undefined;
  if (!device || (!fresh && prev?.agentCode !== demoAgent.code)) {
    // Credentials lost (or first run): a new PIN when we cannot know the old one, and a new device.
    if (!fresh && prev?.agentCode !== demoAgent.code) {
      pin = await resetDemoPin(db, identity, tenantId, agent.id);
    }
    device = await bindDemoDevice(db, tenantId, agent.id, now);
  }
  if (fresh) await fundDemoFloat(db, tenantId, agent.id, now);
  return {
    agent: {
      tenantId,
      agentId: agent.id,
      agentCode: demoAgent.code,
      phone: demoAgent.phone,
      pin,
      floatAccountId: agent.floatAccountId,
      commissionAccountId: agent.commissionAccountId,
      deviceId: device.id,
      devicePrivateJwk: device.jwk,
      proof:
        'login/refresh `device`: {deviceId, timestamp: ms since epoch, signature: base64url Ed25519 over UTF-8 `agent-login|<tenantId>|<agentCode>|<deviceId>|<timestamp>`} (core/agents/device.ts)',
    },
  };
}
