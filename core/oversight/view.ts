/**
 * One customer as support and fraud see them (SPEC 2.5 field policies): looked up by phone,
 * with accounts, balances and recent transfers. The edge's masking obligation decides the
 * level: `masked` (support.investigate) masks name and phone, keeps a card number's suffix and
 * removes any full card number from free text; `full` (fraud.review) shows everything.
 */
import { Type } from '@sinclair/typebox';
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { maskCardNumber, maskName, maskPhone, maskingLevel } from '../../shared/masking.ts';
import { format, fromDb } from '../../shared/money.ts';
import { getBalances } from '../ledger/accounts.ts';
import { accountsOwnedBy } from '../ledger/reads.ts';

export const PhoneQuery = Type.Object(
  { phone: Type.String({ pattern: '^\\+[0-9]{7,15}$', description: 'E.164' }) },
  { additionalProperties: false },
);

export const CustomerView = Type.Object({
  customer: Type.Object({
    id: Type.String(),
    phone: Type.String(),
    name: Type.Union([Type.String(), Type.Null()]),
    status: Type.String(),
    kyc_level: Type.Union([Type.Integer(), Type.Null()]),
    created_at: Type.String(),
  }),
  accounts: Type.Array(
    Type.Object({
      id: Type.String(),
      product_code: Type.String(),
      currency: Type.String(),
      status: Type.String(),
      balances: Type.Unknown(),
      fraud_hold: Type.Union([Type.String(), Type.Null()]),
    }),
  ),
  transactions: Type.Array(
    Type.Object({
      id: Type.String(),
      direction: Type.String(),
      status: Type.String(),
      currency: Type.String(),
      amount: Type.String(),
      counterparty: Type.Object({ phone: Type.String() }),
      reference: Type.String(),
      created_at: Type.String(),
    }),
  ),
  masking: Type.String({ description: 'full or masked: the field policy the purpose gave this view' }),
});

type Level = 'full' | 'masked';

/** Card numbers (13–19 digits, spaces or dashes between) in free text keep only their suffix. */
export function scrubCardNumbers(text: string): string {
  return text.replace(/\b(?:\d[ -]?){12,18}\d\b/g, (pan) => maskCardNumber(pan));
}

const masker = (level: Level) => ({
  phone: (p: string) => (level === 'full' ? p : maskPhone(p)),
  name: (n: string | null) => (n === null || level === 'full' ? n : maskName(n)),
  text: (t: string) => (level === 'full' ? t : scrubCardNumbers(t)),
});

interface CustomerRow {
  id: string;
  phone_e164: string;
  status: string;
  created_at: Date;
  full_name: string | null;
  level: number | null;
}

async function customerByPhone(q: Queryable, tenantId: string, phone: string): Promise<CustomerRow> {
  const { rows } = await q.query<CustomerRow>(
    `SELECT c.id, c.phone_e164, c.status, c.created_at, k.full_name, k.level
       FROM customers c LEFT JOIN kyc_profiles k ON k.tenant_id = c.tenant_id AND k.customer_id = c.id
      WHERE c.tenant_id = $1 AND c.phone_e164 = $2`,
    [tenantId, phone],
  );
  const c = rows[0];
  if (!c) throw new AppError('CUSTOMER_NOT_FOUND', 'no customer with that phone in this tenant');
  return c;
}

async function accountsOf(q: Queryable, tenantId: string, customerId: string) {
  const accounts = await accountsOwnedBy(q, tenantId, 'customer', customerId);
  const { rows: holds } = await q.query<{ id: string; account_id: string }>(
    'SELECT id, account_id FROM wallet_fraud_holds WHERE tenant_id = $1 AND account_id = ANY($2::uuid[]) AND lifted_at IS NULL',
    [tenantId, accounts.map((a) => a.id)],
  );
  const out = [];
  for (const a of accounts)
    out.push({
      id: a.id,
      product_code: a.product_code,
      currency: a.currency,
      status: a.status,
      balances: (await getBalances(q, tenantId, a.id)) ?? null,
      fraud_hold: holds.find((h) => h.account_id === a.id)?.id ?? null,
    });
  return out;
}

async function transfersOf(q: Queryable, tenantId: string, customerId: string, m: ReturnType<typeof masker>) {
  const { rows } = await q.query<{
    id: string;
    out: boolean;
    status: string;
    currency: string;
    amount: string;
    reference: string;
    created_at: Date;
    other: string;
  }>(
    `SELECT t.id, t.payer_customer_id = $2 AS out, t.status, t.currency, t.amount, t.reference, t.created_at,
            CASE WHEN t.payer_customer_id = $2 THEN pe.phone_e164 ELSE pr.phone_e164 END AS other
       FROM transfers t
       JOIN customers pr ON pr.tenant_id = t.tenant_id AND pr.id = t.payer_customer_id
       JOIN customers pe ON pe.tenant_id = t.tenant_id AND pe.id = t.payee_customer_id
      WHERE t.tenant_id = $1 AND (t.payer_customer_id = $2 OR t.payee_customer_id = $2)
      ORDER BY t.created_at DESC, t.id DESC LIMIT 50`,
    [tenantId, customerId],
  );
  return rows.map((r) => ({
    id: r.id,
    direction: r.out ? 'out' : 'in',
    status: r.status,
    currency: r.currency,
    amount: format(fromDb(r.amount)),
    counterparty: { phone: m.phone(r.other) },
    reference: m.text(r.reference),
    created_at: r.created_at.toISOString(),
  }));
}

/** The view of the customer with `phone`, at the level the edge's obligation names for `customer`. */
export async function customerView(
  q: Queryable,
  tenantId: string,
  phone: string,
  maskingHeader: string | undefined,
) {
  const level: Level = maskingLevel(maskingHeader, 'customer') === 'full' ? 'full' : 'masked';
  const m = masker(level);
  const c = await customerByPhone(q, tenantId, phone);
  return {
    customer: {
      id: c.id,
      phone: m.phone(c.phone_e164),
      name: m.name(c.full_name),
      status: c.status,
      kyc_level: c.level,
      created_at: c.created_at.toISOString(),
    },
    accounts: await accountsOf(q, tenantId, c.id),
    transactions: await transfersOf(q, tenantId, c.id, m),
    masking: level,
  };
}
