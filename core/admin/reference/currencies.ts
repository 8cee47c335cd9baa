/** Minor units of a currency: the platform's local override when one is stored, else ISO 4217. */
import type { Queryable } from '../../../shared/db/pool.ts';
import { AppError } from '../../../shared/errors.ts';
import { isoCurrency } from './iso.ts';

export async function minorUnitsOf(q: Queryable, code: string): Promise<number | undefined> {
  const { rows } = await q.query<{ minor_units: number }>(
    'SELECT minor_units FROM admin_currencies WHERE code = $1',
    [code],
  );
  return rows[0]?.minor_units ?? isoCurrency(code)?.minorUnits;
}

/** Minor units, or 400 CURRENCY_INVALID for a code that is not ISO 4217. */
export async function requireMinorUnits(q: Queryable, code: string): Promise<number> {
  const m = await minorUnitsOf(q, code);
  if (m === undefined) throw new AppError('CURRENCY_INVALID', `${code} is not an ISO 4217 currency code`);
  return m;
}
