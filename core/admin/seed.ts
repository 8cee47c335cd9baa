/**
 * Development seed for the administration domain (issue 6): Kenya and the shilling enabled
 * from the ISO reference data, the TRANSFER product, and the ACTIVE fee and limit schedules
 * the customer transfer issue quotes against. Idempotent: an existing active schedule is kept.
 */
import type { Queryable } from '../../shared/db/pool.ts';
import type { Seeder } from '../seed.ts';
import { markOperatorIfNone } from '../platform/operator.ts';
import { isoCountry } from './reference/iso.ts';
import { resolveSchedule } from './schedules/store.ts';
import { parseLimits, parseTiers, activateSchedule, createSchedule } from './schedules/write.ts';

/** KES 0–100 free, 100–1,000 a flat 10, from 1,000 1 % with a minimum of 15 and a maximum of 300. */
export const demoTransferFeeTiers = [
  { min_amount: '0', max_amount: '100', fixed: '0' },
  { min_amount: '100', max_amount: '1000', fixed: '10' },
  { min_amount: '1000', percent_bps: 100, fee_min: '15', fee_max: '300' },
];

/** Per transfer KES 150,000; per day KES 300,000 and 20 transfers. */
export const demoTransferLimits = [
  { action: 'TRANSFER', period: 'transaction' as const, max_amount: '150000' },
  { action: 'TRANSFER', period: 'day' as const, max_amount: '300000', max_count: 20 },
];

/** Enable a country from the ISO reference data with `currency` as its base and only allowed currency (idempotent). */
export async function enableCountry(q: Queryable, code: string, currency: string): Promise<void> {
  const c = isoCountry(code);
  if (!c) return;
  await q.query(
    `INSERT INTO admin_countries (code, name, region, subregion, timezones, locales, base_currency, allowed_currencies)
     VALUES ($1, $2, $3, $4, $5, $6, $7, ARRAY[$7]) ON CONFLICT (code) DO NOTHING`,
    [c.code, c.name, c.region, c.subregion, c.timezones, c.locales, currency],
  );
}

export const adminSeeder: Seeder = async ({ db, tenantId }) => {
  const { rows } = await db.query<{ country: string; base_currency: string }>(
    'SELECT country, base_currency FROM tenants WHERE id = $1',
    [tenantId],
  );
  const tenant = rows[0];
  if (!tenant) return {};
  await enableCountry(db, tenant.country, tenant.base_currency);
  // Development: the demo tenant is the platform operator (production: npm run bootstrap).
  await markOperatorIfNone(db, tenantId);
  await db.query(
    `INSERT INTO admin_products (tenant_id, code, category, metadata) VALUES ($1, 'TRANSFER', 'PAYMENTS', '{"description":"Customer transfer"}')
     ON CONFLICT DO NOTHING`,
    [tenantId],
  );
  const ids: Record<string, string> = {};
  for (const kind of ['FEE', 'LIMIT'] as const) {
    const existing = await resolveSchedule(db, { tenantId, kind, product: 'TRANSFER', currency: 'KES' });
    if (existing) {
      ids[kind] = existing.id;
      continue;
    }
    ids[kind] = await db.tx(async (client) => {
      const items =
        kind === 'FEE'
          ? { tiers: parseTiers(demoTransferFeeTiers) }
          : { limits: parseLimits(demoTransferLimits) };
      const s = await createSchedule(
        client,
        {
          tenantId,
          kind,
          product: 'TRANSFER',
          currency: 'KES',
          scope: 'TENANT',
          scopeRef: tenantId,
          name: `demo ${kind.toLowerCase()} schedule`,
        },
        items,
      );
      await activateSchedule(client, s);
      return s.id;
    });
  }
  return { schedules: { transferFee: ids.FEE, transferLimits: ids.LIMIT } };
};
