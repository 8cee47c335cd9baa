/** The ledger bench's data: one tenant, a settlement account, a hot merchant and 10,000 funded wallets. */
import type { Db } from '../../shared/db/pool.ts';
import { ensureTenantLedger } from '../../core/ledger/catalog.ts';
import { openAccount } from '../../core/ledger/accounts.ts';

export const benchTenant = 'bench';
export const benchAccounts = 10_000;

export async function setupBench(
  db: Db,
  tenant = benchTenant,
  accountCount = benchAccounts,
): Promise<{ wallets: string[]; hot: string }> {
  await db.query(`INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, 'Bench', 'KE', 'KES')`, [
    tenant,
  ]);
  await ensureTenantLedger(db, tenant);
  const settlement = await db.tx((c) =>
    openAccount(
      c,
      {
        tenantId: tenant,
        ownerType: 'platform',
        ownerId: 's',
        productCode: 'SETTLEMENT',
        currency: 'KES',
        viaApi: false,
      },
      Date.now(),
    ),
  );
  const hot = await db.tx((c) =>
    openAccount(
      c,
      {
        tenantId: tenant,
        ownerType: 'merchant',
        ownerId: 'hot',
        productCode: 'MERCHANT',
        currency: 'KES',
        viaApi: false,
      },
      Date.now(),
    ),
  );
  const { rows } = await db.query<{ id: string }>(
    `WITH a AS (INSERT INTO ledger_accounts (tenant_id, id, owner_type, owner_id, product_code, currency, debits_must_not_exceed_credits)
       SELECT $1, uuidv7(), 'customer', 'c' || g, 'WALLET_MAIN', 'KES', true FROM generate_series(1, $2) g RETURNING id)
     INSERT INTO ledger_balances (tenant_id, account_id, currency, debits_must_not_exceed_credits) SELECT $1, id, 'KES', true FROM a RETURNING account_id AS id`,
    [tenant, accountCount],
  );
  const wallets = rows.map((r) => r.id);
  // Fund every wallet with one posting of 64 legs per 63 wallets (set-based, outside the timing).
  for (let i = 0; i < wallets.length; i += 63) {
    const chunk = wallets.slice(i, i + 63);
    await db.query(`SELECT ledger_apply($1::jsonb)`, [
      JSON.stringify([
        {
          op: 'post',
          tenant,
          id: crypto.randomUUID(),
          transaction_id: crypto.randomUUID(),
          type: 'FUNDING',
          currency: 'KES',
          description: null,
          metadata: {},
          entries: [
            {
              account_id: settlement.id,
              side: 'debit',
              amount: String(chunk.length * 1_000_000),
              currency: 'KES',
            },
            ...chunk.map((w) => ({ account_id: w, side: 'credit', amount: '1000000', currency: 'KES' })),
          ],
        },
      ]),
    ]);
  }
  await db.query('ANALYZE');
  return { wallets, hot: hot.id };
}
