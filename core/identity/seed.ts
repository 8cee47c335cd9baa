/**
 * Demo customer (issue 15 item 3): a newcomer gets a customer access token with one call,
 * `POST /customers/auth/login` with this phone and PIN from DATA_DIR/demo.json, instead of the
 * four-call sign-up (OTP to the dev inbox, verify, set PIN, log in). Development seed only (the
 * stack's `npm start`, never a production service). The customer is what a sign-up makes:
 * verified phone, PIN credential, tenant membership and a wallet, and the PIN setting is
 * audited like one. Idempotent: a re-run reuses the previous demo.json's PIN; if that is lost,
 * a new one is set.
 */
import { randomInt } from 'node:crypto';
import { createLogger } from '../../shared/log.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { ensureWallet } from '../ledger/wallets.ts';
import type { Seeder } from '../seed.ts';
import { auditAuth, identityDeps } from './context.ts';
import { isWeakPin } from './routes-phone.ts';

/** A Kenyan number no real subscriber has (the 0700 000 1xx block is the seed's). */
export const demoCustomer = Object.freeze({ phone: '+254700000101' });

function previousPin(previous: Record<string, unknown>): string | undefined {
  const c = previous.customer;
  if (!c || typeof c !== 'object') return undefined;
  const { phone, pin } = c as Record<string, unknown>;
  return phone === demoCustomer.phone && typeof pin === 'string' ? pin : undefined;
}

function newPin(): string {
  for (;;) {
    const pin = String(randomInt(100_000, 1_000_000));
    if (!isWeakPin(pin)) return pin;
  }
}

export const demoCustomerSeeder: Seeder = async ({ db, tenantId, previous, keys }) => {
  // The PIN hash needs the tenant pepper, sealed by the master key: without the key store, no customer.
  if (!keys) return {};
  const now = Date.now();
  const identity = identityDeps({ db, keys, log: createLogger('silent'), now: () => now });
  const { rows } = await db.query<{ id: string }>(
    `SELECT c.id FROM customers c JOIN credentials cr ON cr.tenant_id = c.tenant_id AND cr.customer_id = c.id
      WHERE c.tenant_id = $1 AND c.phone_e164 = $2`,
    [tenantId, demoCustomer.phone],
  );
  const known = previousPin(previous);
  const existing = rows[0]?.id;
  if (existing && known) return { customer: describe(tenantId, existing, known) };
  const secrets = await identity.secrets.get(tenantId);
  if (!secrets) throw new Error(`tenant ${tenantId} does not exist`);
  const pin = newPin();
  const ph = await identity.pins.hash(pin, secrets.pin);
  const customerId = await db.tx(async (q) => {
    const { rows: c } = await q.query<{ id: string }>(
      `INSERT INTO customers (id, tenant_id, phone_e164, phone_verified_at, created_at)
       VALUES ($1, $2, $3, to_timestamp($4 / 1000.0), to_timestamp($4 / 1000.0))
       ON CONFLICT (tenant_id, phone_e164) DO UPDATE SET phone_verified_at = EXCLUDED.phone_verified_at RETURNING id`,
      [uuidv7(now), tenantId, demoCustomer.phone, now],
    );
    const id = c[0]?.id;
    if (!id) throw new Error('customer upsert returned no row');
    // No PIN-reset hold: this is the seed setting its own demo PIN, not a SIM swapper.
    await q.query(
      `INSERT INTO credentials (customer_id, tenant_id, pin_hash, pin_salt, kdf_version, pin_set_at, pin_reset_hold_until)
       VALUES ($1, $2, $3, $4, $5, to_timestamp($6 / 1000.0), NULL)
       ON CONFLICT (customer_id) DO UPDATE SET pin_hash = EXCLUDED.pin_hash, pin_salt = EXCLUDED.pin_salt,
         kdf_version = EXCLUDED.kdf_version, pin_set_at = EXCLUDED.pin_set_at, pin_reset_hold_until = NULL`,
      [id, tenantId, ph.hash, ph.salt, ph.kdfVersion, now],
    );
    // SPEC 5.2.5: the policy requires membership of the tenant; issue 7: a wallet in the base currency.
    await q.query(
      `INSERT INTO relationship_tuples (tenant_id, subject_ns, subject_id, relation, object_ns, object_id)
       VALUES ($1, 'customer', $2, 'member', 'tenant', $1) ON CONFLICT DO NOTHING`,
      [tenantId, id],
    );
    await ensureWallet(q, tenantId, id, now);
    await auditAuth(
      q,
      {
        tenantId,
        action: 'auth.pin_set',
        actor: { type: 'seed', id: 'demo-seed' },
        target: { type: 'customer', id },
        allow: true,
        attrs: { kdf_version: ph.kdfVersion, seed: true },
        requestId: 'seed',
      },
      now,
    );
    return id;
  });
  return { customer: describe(tenantId, customerId, pin) };
};

function describe(tenantId: string, customerId: string, pin: string): Record<string, unknown> {
  return {
    tenantId,
    customerId,
    phone: demoCustomer.phone,
    pin,
    login: 'POST /customers/auth/login {tenantId, phone, pin} → accessToken (AAL 1, 10 minutes)',
  };
}
