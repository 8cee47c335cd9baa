/** SQL-level ledger tests: a tenant with the ledger's reference rows, and its accounts. */
import { randomUUID } from 'node:crypto';
import { openAccount } from '../../core/ledger/accounts.ts';
import { ensureTenantLedger } from '../../core/ledger/catalog.ts';
import type { Db } from '../../shared/db/pool.ts';

/** Create tenant `tenant` (KE, KES) with its ledger catalogue; returns a function that opens an account and answers its id. */
export async function ledgerTenant(
  db: Db,
  tenant: string,
): Promise<(productCode: string, currency?: string) => Promise<string>> {
  await db.query(`INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`, [
    tenant,
  ]);
  await ensureTenantLedger(db, tenant);
  return async (productCode, currency = 'KES') =>
    (
      await db.tx((c) =>
        openAccount(
          c,
          {
            tenantId: tenant,
            ownerType: 'customer',
            ownerId: randomUUID(),
            productCode,
            currency,
            viaApi: false,
          },
          Date.now(),
        ),
      )
    ).id;
}

/** The tenant's platform settlement account in `currency`, opened as core does (not through the API); its id. */
export async function openSettlement(db: Db, tenant: string, currency: string): Promise<string> {
  const a = await db.tx((c) =>
    openAccount(
      c,
      {
        tenantId: tenant,
        ownerType: 'platform',
        ownerId: `settlement-${currency}`,
        productCode: 'SETTLEMENT',
        currency,
        viaApi: false,
      },
      Date.now(),
    ),
  );
  return a.id;
}

/** A KES `post` command for ledger_apply moving `amount` (numeric text) from one account to another. */
export function transferCmd(
  tenant: string,
  from: string,
  to: string,
  amount: string,
): Record<string, unknown> {
  return {
    op: 'post',
    tenant,
    id: randomUUID(),
    transaction_id: randomUUID(),
    type: 'TRANSFER',
    currency: 'KES',
    description: null,
    metadata: {},
    entries: [
      { account_id: from, side: 'debit', amount, currency: 'KES' },
      { account_id: to, side: 'credit', amount, currency: 'KES' },
    ],
  };
}
