/**
 * Creating an agent (ops tooling, the demo seed, tests): an outlet, the agent's float and
 * commission accounts in the ledger, the agent row with its argon2id PIN, and the `member`
 * tuple of the tenant the edge requires for every subject (subject_ns 'user': agents are users
 * with role agent at the edge). One transaction; audited.
 */
import type { Db, TxClient } from '../../shared/db/pool.ts';
import type { IdentityDeps } from '../identity/context.ts';
import type { PinHash } from '../identity/pin.ts';
import { openAccount } from '../ledger/accounts.ts';
import { toDb, type Micro } from '../../shared/money.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { auditAgent } from './context.ts';
import { ensureAgentLedger } from './ledger.ts';

export interface NewAgent {
  tenantId: string;
  code: string;
  phone: string;
  name: string;
  pin: string;
  currency: string;
  tier?: 'basic' | 'standard' | 'super';
  outlet?: { name: string; region: string; address?: string };
  /** An existing outlet of the tenant (the administration API); else `outlet` is created. */
  outletId?: string;
  txnMaxAmount?: Micro;
  dayMaxAmount?: Micro;
}

export interface ProvisionedAgent {
  id: string;
  outletId: string;
  floatAccountId: string;
  commissionAccountId: string;
}

export async function provisionAgent(
  db: Db,
  identity: IdentityDeps,
  a: NewAgent,
  now: number,
): Promise<ProvisionedAgent> {
  const ph = await hashAgentPin(identity, a.tenantId, a.pin);
  return db.tx((q) => insertAgent(q, a, ph, { type: 'system', id: 'provisioning' }, 'provisioning', now));
}

/** The PIN hashed exactly like a customer's (argon2id + the tenant's pepper), outside any transaction. */
export async function hashAgentPin(identity: IdentityDeps, tenantId: string, pin: string): Promise<PinHash> {
  const secrets = await identity.secrets.get(tenantId);
  if (!secrets) throw new Error(`tenant ${tenantId} does not exist`);
  return identity.pins.hash(pin, secrets.pin);
}

/**
 * The agent's rows in the caller's transaction (the administration API's own, or the seed's):
 * its outlet (`a.outletId`, an existing one, or a new one), ledger accounts, agent row and tuple.
 */
export async function insertAgent(
  q: TxClient,
  a: NewAgent,
  ph: PinHash,
  actor: { type: string; id: string },
  requestId: string,
  now: number,
): Promise<ProvisionedAgent> {
  await ensureAgentLedger(q, a.tenantId);
  const id = uuidv7(now);
  const outletId = a.outletId ?? uuidv7(now);
  if (a.outletId === undefined) {
    const outlet = a.outlet ?? { name: `${a.name} outlet`, region: 'Nairobi' };
    await q.query(
      'INSERT INTO agent_outlets (tenant_id, id, name, region, address) VALUES ($1, $2, $3, $4, $5)',
      [a.tenantId, outletId, outlet.name, outlet.region, outlet.address ?? ''],
    );
  }
  const open = (product: string) =>
    openAccount(
      q,
      {
        tenantId: a.tenantId,
        ownerType: 'agent',
        ownerId: id,
        productCode: product,
        currency: a.currency,
        viaApi: false,
      },
      now,
    );
  const float = await open('AGENT_FLOAT');
  const commission = await open('AGENT_COMMISSION');
  await q.query(
    `INSERT INTO agents (tenant_id, id, code, phone_e164, name, tier, outlet_id, currency, pin_hash, pin_salt, kdf_version,
       float_account_id, commission_account_id, txn_max_amount, day_max_amount, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, to_timestamp($16 / 1000.0), to_timestamp($16 / 1000.0))`,
    [
      a.tenantId,
      id,
      a.code,
      a.phone,
      a.name,
      a.tier ?? 'standard',
      outletId,
      a.currency,
      ph.hash,
      ph.salt,
      ph.kdfVersion,
      float.id,
      commission.id,
      a.txnMaxAmount !== undefined ? toDb(a.txnMaxAmount) : null,
      a.dayMaxAmount !== undefined ? toDb(a.dayMaxAmount) : null,
      now,
    ],
  );
  await q.query(
    `INSERT INTO relationship_tuples (tenant_id, subject_ns, subject_id, relation, object_ns, object_id)
     VALUES ($1, 'user', $2, 'member', 'tenant', $1) ON CONFLICT DO NOTHING`,
    [a.tenantId, id],
  );
  await auditAgent(
    q,
    {
      tenantId: a.tenantId,
      actor,
      action: 'agent.provision',
      target: { type: 'agent', id },
      attrs: { code: a.code, outlet: outletId },
      requestId,
    },
    now,
  );
  return { id, outletId, floatAccountId: float.id, commissionAccountId: commission.id };
}
