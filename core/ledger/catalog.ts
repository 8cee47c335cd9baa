/**
 * Per-tenant ledger reference rows every tenant starts with: account types (products an
 * account is opened under), transaction types (with the two-factor flag, SPEC 2) and limit
 * schedule rows. Inserted idempotently the first time a tenant uses the ledger; the admin
 * API will manage them later (SPEC 4.6 schedules, products).
 */
import type { Queryable } from '../../shared/db/pool.ts';

interface AccountType {
  code: string;
  description: string;
  debitsMustNotExceedCredits: boolean;
  openViaApi: boolean;
}
interface TransactionType {
  code: string;
  description: string;
  requiresTwoFactor: boolean;
}
interface LimitRow {
  product: string;
  action: string;
  currency: string;
  period: 'transaction' | 'day' | 'month';
  maxAmount: string | null;
  maxCount: number | null;
}

export const defaultAccountTypes: readonly AccountType[] = [
  {
    code: 'WALLET_MAIN',
    description: 'Customer main wallet',
    debitsMustNotExceedCredits: true,
    openViaApi: true,
  },
  {
    code: 'MERCHANT',
    description: 'Merchant collection account',
    debitsMustNotExceedCredits: true,
    openViaApi: true,
  },
  { code: 'AGENT_FLOAT', description: 'Agent e-float', debitsMustNotExceedCredits: true, openViaApi: true },
  { code: 'SAVINGS', description: 'Savings account', debitsMustNotExceedCredits: true, openViaApi: true },
  { code: 'FEE_INCOME', description: 'Fee income', debitsMustNotExceedCredits: true, openViaApi: true },
  // The source of money entering the platform: may go negative, never opened through the API.
  {
    code: 'SETTLEMENT',
    description: 'Settlement (bank/trust) account',
    debitsMustNotExceedCredits: false,
    openViaApi: false,
  },
];

export const defaultTransactionTypes: readonly TransactionType[] = [
  { code: 'TRANSFER', description: 'Customer transfer', requiresTwoFactor: true },
  { code: 'PAYMENT', description: 'Merchant payment', requiresTwoFactor: true },
  { code: 'CASHIN', description: 'Cash in at an agent', requiresTwoFactor: false },
  { code: 'CASHOUT', description: 'Cash out at an agent', requiresTwoFactor: true },
  { code: 'FEE', description: 'Fee charge', requiresTwoFactor: false },
  { code: 'FUNDING', description: 'Funding from settlement', requiresTwoFactor: false },
  { code: 'ADJUSTMENT', description: 'Operational adjustment', requiresTwoFactor: true },
  { code: 'REVERSAL', description: 'Reversal of a posting', requiresTwoFactor: false },
];

/** Defaults modelled on East African mobile-money tiers (KES 250,000 a transaction, 500,000 a day). */
export const defaultLimitRows: readonly LimitRow[] = [
  ...(['TRANSFER', 'PAYMENT', 'CASHOUT'] as const).flatMap((action): LimitRow[] => [
    {
      product: 'WALLET_MAIN',
      action,
      currency: 'KES',
      period: 'transaction',
      maxAmount: '250000',
      maxCount: null,
    },
    { product: 'WALLET_MAIN', action, currency: 'KES', period: 'day', maxAmount: '500000', maxCount: 100 },
    {
      product: 'WALLET_MAIN',
      action,
      currency: 'KES',
      period: 'month',
      maxAmount: '5000000',
      maxCount: 1500,
    },
  ]),
  {
    product: 'WALLET_MAIN',
    action: 'CASHIN',
    currency: 'KES',
    period: 'transaction',
    maxAmount: '250000',
    maxCount: null,
  },
  {
    product: 'WALLET_MAIN',
    action: 'CASHIN',
    currency: 'KES',
    period: 'day',
    maxAmount: '500000',
    maxCount: 50,
  },
];

/** Tenants whose default rows this process has seen committed: nothing is inserted for them again. */
const ready = new Set<string>();
/**
 * The transactions (each `Db.tx` hands its callback a client of its own) that inserted a tenant's
 * default rows: until one commits, nobody knows it will, so they are not `ready` yet.
 */
const insertedIn = new WeakMap<Queryable, Set<string>>();

/**
 * Insert the tenant's default rows (ON CONFLICT DO NOTHING: re-runs are free), once per process
 * once they are known committed. A transaction that inserted them may still roll back (a failed
 * record, a pool or connection that gave out, a deadlock `Db.tx` retries): taken as done then,
 * the rows would be gone and every later account of the tenant refused 422 UNKNOWN_PRODUCT until
 * a restart. So the tenant is `ready` only when a call finds every row there already, inserted by
 * another transaction (which therefore committed), or through the pool, where each statement
 * commits at once.
 */
export async function ensureTenantLedger(q: Queryable, tenantId: string): Promise<void> {
  if (ready.has(tenantId)) return;
  const types = await q.query(
    `INSERT INTO ledger_account_types (tenant_id, code, description, debits_must_not_exceed_credits, open_via_api)
     SELECT $1, * FROM unnest($2::text[], $3::text[], $4::boolean[], $5::boolean[]) ON CONFLICT DO NOTHING`,
    [
      tenantId,
      defaultAccountTypes.map((t) => t.code),
      defaultAccountTypes.map((t) => t.description),
      defaultAccountTypes.map((t) => t.debitsMustNotExceedCredits),
      defaultAccountTypes.map((t) => t.openViaApi),
    ],
  );
  const txnTypes = await q.query(
    `INSERT INTO ledger_transaction_types (tenant_id, code, description, requires_two_factor)
     SELECT $1, * FROM unnest($2::text[], $3::text[], $4::boolean[]) ON CONFLICT DO NOTHING`,
    [
      tenantId,
      defaultTransactionTypes.map((t) => t.code),
      defaultTransactionTypes.map((t) => t.description),
      defaultTransactionTypes.map((t) => t.requiresTwoFactor),
    ],
  );
  const limits = await q.query(
    `INSERT INTO ledger_limit_rows (tenant_id, product_code, action, currency, period, max_amount, max_count)
     SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::numeric[], $7::int[]) ON CONFLICT DO NOTHING`,
    [
      tenantId,
      defaultLimitRows.map((r) => r.product),
      defaultLimitRows.map((r) => r.action),
      defaultLimitRows.map((r) => r.currency),
      defaultLimitRows.map((r) => r.period),
      defaultLimitRows.map((r) => r.maxAmount),
      defaultLimitRows.map((r) => r.maxCount),
    ],
  );
  const inserted = (types.rowCount ?? 0) + (txnTypes.rowCount ?? 0) + (limits.rowCount ?? 0);
  const pool = 'tx' in q;
  if (pool || (inserted === 0 && !insertedIn.get(q)?.has(tenantId))) ready.add(tenantId);
  else if (inserted > 0) insertedIn.set(q, (insertedIn.get(q) ?? new Set<string>()).add(tenantId));
}

/** Account types a module needs beyond the defaults (idempotent; never opened through the API). */
export async function ensureAccountTypes(
  q: Queryable,
  tenantId: string,
  types: readonly { code: string; description: string; debitsMustNotExceedCredits: boolean }[],
): Promise<void> {
  for (const t of types) {
    await q.query(
      `INSERT INTO ledger_account_types (tenant_id, code, description, debits_must_not_exceed_credits, open_via_api)
       VALUES ($1, $2, $3, $4, false) ON CONFLICT DO NOTHING`,
      [tenantId, t.code, t.description, t.debitsMustNotExceedCredits],
    );
  }
}

/** Transaction types a module needs beyond the defaults (idempotent; no two-factor flag). */
export async function ensureTransactionTypes(
  q: Queryable,
  tenantId: string,
  types: readonly { code: string; description: string }[],
): Promise<void> {
  for (const t of types) {
    await q.query(
      `INSERT INTO ledger_transaction_types (tenant_id, code, description, requires_two_factor)
       VALUES ($1, $2, $3, false) ON CONFLICT DO NOTHING`,
      [tenantId, t.code, t.description],
    );
  }
}

export interface LimitRowInput {
  tenantId: string;
  product: string;
  action: string;
  currency: string;
  period: string;
  maxAmount: string | null;
  maxCount: number | null;
  active: boolean;
}

/** Write one limit row the ledger's own limit check reads (admin's activated TENANT limit schedules). */
export async function upsertLimitRow(q: Queryable, r: LimitRowInput): Promise<void> {
  await q.query(
    `INSERT INTO ledger_limit_rows (tenant_id, product_code, action, currency, period, max_amount, max_count, active)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
     ON CONFLICT (tenant_id, product_code, action, currency, period)
     DO UPDATE SET max_amount = EXCLUDED.max_amount, max_count = EXCLUDED.max_count, active = EXCLUDED.active`,
    [r.tenantId, r.product, r.action, r.currency, r.period, r.maxAmount, r.maxCount, r.active],
  );
}
