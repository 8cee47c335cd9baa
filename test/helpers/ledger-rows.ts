/** Ledger rows written straight to the database, as another core instance's code writes them. */
import { randomUUID } from 'node:crypto';
import type { Queryable } from '../../shared/db/pool.ts';

/**
 * A WALLET_MAIN account in `currency` that another core instance opened: its account and balance
 * rows, nothing through the core under test (whose currency snapshot it therefore does not touch).
 */
export async function accountOpenedElsewhere(
  q: Queryable,
  tenant: string,
  currency: string,
  floor: boolean,
): Promise<string> {
  const id = randomUUID();
  await q.query(
    `INSERT INTO ledger_accounts (tenant_id, id, owner_type, owner_id, product_code, currency, debits_must_not_exceed_credits)
     VALUES ($1, $2, 'customer', $3, 'WALLET_MAIN', $4, $5)`,
    [tenant, id, `elsewhere-${id}`, currency, floor],
  );
  await q.query(
    'INSERT INTO ledger_balances (tenant_id, account_id, currency, debits_must_not_exceed_credits) VALUES ($1, $2, $3, $4)',
    [tenant, id, currency, floor],
  );
  return id;
}
