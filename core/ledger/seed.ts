/**
 * Development seed for the ledger (issue 5): a `core:write` OAuth client for the demo tenant
 * (its secret reused from the previous demo.json so it stays valid across restarts) and one
 * settlement account per currency, the source of money entering the platform.
 */
import type { Seeder } from '../seed.ts';
import { createClient, findClient, secretMatches } from '../oauth/clients.ts';
import { openAccount } from './accounts.ts';
import { ensureTenantLedger } from './catalog.ts';

export const settlementCurrencies = ['KES'] as const;

function previousClient(
  previous: Record<string, unknown>,
): { clientId: string; clientSecret: string } | undefined {
  const c = previous.coreClient;
  if (!c || typeof c !== 'object') return undefined;
  const { clientId, clientSecret } = c as Record<string, unknown>;
  return typeof clientId === 'string' && typeof clientSecret === 'string'
    ? { clientId, clientSecret }
    : undefined;
}

export const ledgerSeeder: Seeder = async ({ db, tenantId, previous }) => {
  await ensureTenantLedger(db, tenantId);
  const prev = previousClient(previous);
  const existing = prev ? await findClient(db, prev.clientId) : undefined;
  const coreClient =
    prev && existing?.tenantId === tenantId && secretMatches(existing, prev.clientSecret)
      ? { ...prev, scopes: existing.scopes }
      : await createClient(db, {
          tenantId,
          scopes: ['core:read', 'core:write'],
          name: 'demo core client',
          clientId: `cc_${tenantId}_demo`,
          ...(prev ? { secret: prev.clientSecret } : {}),
        });
  const settlementAccounts: Record<string, string> = {};
  for (const currency of settlementCurrencies) {
    const ownerId = `settlement-${currency}`;
    const { rows } = await db.query<{ id: string }>(
      `SELECT id FROM ledger_accounts WHERE tenant_id = $1 AND owner_type = 'platform' AND owner_id = $2 AND product_code = 'SETTLEMENT'`,
      [tenantId, ownerId],
    );
    settlementAccounts[currency] =
      rows[0]?.id ??
      (
        await db.tx((client) =>
          openAccount(
            client,
            { tenantId, ownerType: 'platform', ownerId, productCode: 'SETTLEMENT', currency, viaApi: false },
            Date.now(),
          ),
        )
      ).id;
  }
  return { coreClient, settlementAccounts };
};
