/**
 * Accounts other modules find by owner (issue 21 item 2): a customer's wallet, the tenant's fee
 * income and the platform's settlement and commission-expense accounts, opened on first need.
 * One lookup each, so transfers, agents and USSD agree on which account is a customer's wallet
 * and where a fee goes.
 */
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { openAccount } from './accounts.ts';
import { ensureTenantLedger } from './catalog.ts';

export const walletProduct = 'WALLET_MAIN';
export const feeIncomeProduct = 'FEE_INCOME';

export interface Owner {
  tenantId: string;
  ownerType: string;
  ownerId: string;
  product: string;
  currency: string;
}

/** The owner's oldest active account of this product and currency, or undefined. */
export async function findOwned(q: Queryable, o: Owner): Promise<string | undefined> {
  const { rows } = await q.query<{ id: string }>(
    `SELECT id FROM ledger_accounts WHERE tenant_id = $1 AND owner_type = $2 AND owner_id = $3 AND product_code = $4 AND currency = $5 AND status = 'active'
     ORDER BY created_at LIMIT 1`,
    [o.tenantId, o.ownerType, o.ownerId, o.product, o.currency],
  );
  return rows[0]?.id;
}

/**
 * The owner's account, opened if missing. Two first uses racing would open two: the tenant row
 * lock serialises the open, and the second looks again under it.
 */
export async function ownedAccount(q: Queryable, o: Owner, now: number): Promise<string> {
  const existing = await findOwned(q, o);
  if (existing) return existing;
  await ensureTenantLedger(q, o.tenantId);
  await q.query('SELECT 1 FROM tenants WHERE id = $1 FOR NO KEY UPDATE', [o.tenantId]);
  const again = await findOwned(q, o);
  if (again) return again;
  const opened = await openAccount(
    q,
    {
      tenantId: o.tenantId,
      ownerType: o.ownerType,
      ownerId: o.ownerId,
      productCode: o.product,
      currency: o.currency,
      viaApi: false,
    },
    now,
  );
  return opened.id;
}

const wallet = (tenantId: string, customerId: string, currency: string): Owner => ({
  tenantId,
  ownerType: 'customer',
  ownerId: customerId,
  product: walletProduct,
  currency,
});

/** The customer's main wallet in `currency`, or undefined: the one wallet lookup. */
export function walletOf(
  q: Queryable,
  tenantId: string,
  customerId: string,
  currency: string,
): Promise<string | undefined> {
  return findOwned(q, wallet(tenantId, customerId, currency));
}

/** The customer's main wallet in `currency`, opened if missing (an agent's cash-in to a new customer). */
export function openWallet(
  q: Queryable,
  tenantId: string,
  customerId: string,
  currency: string,
  now: number,
): Promise<string> {
  return ownedAccount(q, wallet(tenantId, customerId, currency), now);
}

export async function baseCurrencyOf(q: Queryable, tenantId: string): Promise<string> {
  const { rows } = await q.query<{ base_currency: string }>(
    'SELECT base_currency FROM tenants WHERE id = $1',
    [tenantId],
  );
  const c = rows[0]?.base_currency;
  if (!c) throw new AppError('TENANT_NOT_FOUND', 'unknown tenant');
  return c;
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
  return openWallet(q, tenantId, customerId, await baseCurrencyOf(q, tenantId), now);
}

/**
 * The tenant's fee income account in `currency`, opened if missing: the one account every fee
 * is booked to, transfers' and agents' alike (issue 21 item 2). Owned by the tenant (owner id
 * the tenant's id), because the fee is the tenant's revenue and the owner is then a real entity
 * reports and relationship tuples can name; migration 0955 moved the balances agents had booked
 * to the platform-owned `fee-income-<currency>` accounts here.
 */
export function feeIncomeAccount(
  q: Queryable,
  tenantId: string,
  currency: string,
  now: number,
): Promise<string> {
  return ownedAccount(
    q,
    { tenantId, ownerType: 'tenant', ownerId: tenantId, product: feeIncomeProduct, currency },
    now,
  );
}

/** A platform-owned account of the tenant (settlement, commission expense), opened if missing. */
export function platformAccount(
  q: Queryable,
  tenantId: string,
  product: string,
  ownerId: string,
  currency: string,
  now: number,
): Promise<string> {
  return ownedAccount(q, { tenantId, ownerType: 'platform', ownerId, product, currency }, now);
}
