/**
 * Amounts configured in a currency and kept, each exact in the currency's minor units when it was
 * written: fewer minor units than one of them needs would make it an amount the ledger refuses
 * (a fee quoted from a schedule, a savings product's floor, a key's budget compared with what
 * moves). A change of the minor units (core/admin/countries/currencies.ts) asks here first, with
 * the currency's row locked FOR UPDATE: every writer of these amounts shares that row until it
 * commits (schedules: core/admin/schedules/write.ts issuesOf; savings products and API-key
 * budgets: migration 1104's guards), so what this reads is every amount that change must fit.
 *
 * Every tenant's, on purpose: the currency table is the platform's. The answer names the kind of
 * configuration and its tenant (and a savings product's code), never a key's id or secret.
 */
import type { Queryable } from '../../../shared/db/pool.ts';
import { type ConfiguredLedgerAmount, ledgerAmountFinerThan } from '../../ledger/reads.ts';
import { activeScheduleFinerThan } from '../schedules/store.ts';

type Finer = ConfiguredLedgerAmount | { kind: 'api_key_budget'; tenant_id: string; amount: string };

/**
 * The first stored amount in `currency` with more decimals than `minorUnits`, said as the
 * configuration that holds it and what to do first; undefined when every one fits.
 */
export async function configuredAmountFinerThan(
  q: Queryable,
  currency: string,
  minorUnits: number,
): Promise<string | undefined> {
  if (await activeScheduleFinerThan(q, currency, minorUnits))
    return `an active fee, commission or limit schedule has ${currency} amounts with more than ${minorUnits} decimals: deactivate or replace it first`;
  // Revoked keys count nothing again. A daily_amount that is no number (stored before migration
  // 1112 refused one) needs no decimals, and is read past: cast, it failed this whole query, and
  // every change of the currency's minor units with it, as the caller's bad input (400).
  const { rows } = await q.query<Finer>(
    `SELECT 'api_key_budget' AS kind, tenant_id, trim_scale(amount)::text AS amount
       FROM (SELECT tenant_id, CASE WHEN pg_input_is_valid(budget ->> 'daily_amount', 'numeric')
                                    THEN (budget ->> 'daily_amount')::numeric END AS amount
               FROM api_keys WHERE revoked_at IS NULL AND budget ->> 'currency' = $1) k
      WHERE amount <> round(amount, $2)
      LIMIT 1`,
    [currency, minorUnits],
  );
  const f = (await ledgerAmountFinerThan(q, currency, minorUnits)) ?? rows[0];
  if (!f) return undefined;
  const more = `${f.amount} ${currency}, more than ${minorUnits} decimals`;
  switch (f.kind) {
    case 'savings_product':
      return `savings product ${f.ref} of tenant ${f.tenant_id} has a min_balance of ${more}`;
    case 'api_key_budget':
      // Told to the platform's Admins, who cannot revoke another tenant's key: its own Admins can.
      return `an API key of tenant ${f.tenant_id} has a daily amount budget of ${more}: that tenant's Admin revokes it first (a new key takes a budget that fits)`;
    case 'ledger_limit':
      return `an active ledger limit (${f.ref}) of tenant ${f.tenant_id} has a maximum of ${more}`;
  }
}
