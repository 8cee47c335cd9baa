/** Customer wallets and the tenant's fee income account: ledger accounts opened on first need. */
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { openAccount } from '../ledger/accounts.ts';
import { ensureTenantLedger } from '../ledger/catalog.ts';

export const walletProduct = 'WALLET_MAIN';
export const feeIncomeProduct = 'FEE_INCOME';

async function baseCurrency(q: Queryable, tenantId: string): Promise<string> {
  const { rows } = await q.query<{ base_currency: string }>(
    'SELECT base_currency FROM tenants WHERE id = $1',
    [tenantId],
  );
  const c = rows[0]?.base_currency;
  if (!c) throw new AppError('NOT_FOUND', 'unknown tenant');
  return c;
}

async function findAccount(
  q: Queryable,
  tenantId: string,
  ownerType: string,
  ownerId: string,
  product: string,
  currency: string,
): Promise<string | undefined> {
  const { rows } = await q.query<{ id: string }>(
    `SELECT id FROM ledger_accounts WHERE tenant_id = $1 AND owner_type = $2 AND owner_id = $3 AND product_code = $4 AND currency = $5 AND status = 'active'
     ORDER BY created_at LIMIT 1`,
    [tenantId, ownerType, ownerId, product, currency],
  );
  return rows[0]?.id;
}

/**
 * The customer's WALLET_MAIN in the tenant's base currency (SPEC 2.1 values), opened if missing.
 * Called in the PIN-set transaction, so a customer who can log in always has a wallet.
 */
export async function ensureWallet(
  q: Queryable,
  tenantId: string,
  customerId: string,
  now: number,
): Promise<string> {
  await ensureTenantLedger(q, tenantId);
  const currency = await baseCurrency(q, tenantId);
  const existing = await findAccount(q, tenantId, 'customer', customerId, walletProduct, currency);
  if (existing) return existing;
  return (
    await openAccount(
      q,
      {
        tenantId,
        ownerType: 'customer',
        ownerId: customerId,
        productCode: walletProduct,
        currency,
        viaApi: false,
      },
      now,
    )
  ).id;
}

/** The customer's wallet in `currency`, or undefined. */
export function walletOf(
  q: Queryable,
  tenantId: string,
  customerId: string,
  currency: string,
): Promise<string | undefined> {
  return findAccount(q, tenantId, 'customer', customerId, walletProduct, currency);
}

/** The tenant's fee income account in `currency`, opened if missing (serialised by a tenant row lock). */
export async function feeIncomeAccount(
  q: Queryable,
  tenantId: string,
  currency: string,
  now: number,
): Promise<string> {
  const existing = await findAccount(q, tenantId, 'tenant', tenantId, feeIncomeProduct, currency);
  if (existing) return existing;
  await ensureTenantLedger(q, tenantId);
  await q.query('SELECT 1 FROM tenants WHERE id = $1 FOR NO KEY UPDATE', [tenantId]);
  return (
    (await findAccount(q, tenantId, 'tenant', tenantId, feeIncomeProduct, currency)) ??
    (
      await openAccount(
        q,
        {
          tenantId,
          ownerType: 'tenant',
          ownerId: tenantId,
          productCode: feeIncomeProduct,
          currency,
          viaApi: false,
        },
        now,
      )
    ).id
  );
}
