/** Minor units of a currency: the platform's local override when one is stored, else ISO 4217. */
import type { Queryable } from '../../../shared/db/pool.ts';
import { AppError } from '../../../shared/errors.ts';
import { setCurrencies } from '../../ledger/currency.ts';
import { isoCurrency } from './iso.ts';

export async function minorUnitsOf(
  q: Queryable,
  code: string,
  opts: { lock?: boolean } = {},
): Promise<number | undefined> {
  const { rows } = await q.query<{ minor_units: number }>(
    `SELECT minor_units FROM admin_currencies WHERE code = $1${opts.lock ? ' FOR SHARE' : ''}`,
    [code],
  );
  return rows[0]?.minor_units ?? isoCurrency(code)?.minorUnits;
}

/**
 * Minor units, or 400 CURRENCY_INVALID for a code that is not ISO 4217. `lock` holds the row
 * until the transaction ends: a change of the minor units waits for it, then sees what it wrote.
 */
export async function requireMinorUnits(
  q: Queryable,
  code: string,
  opts: { lock?: boolean } = {},
): Promise<number> {
  const m = await minorUnitsOf(q, code, opts);
  if (m === undefined) throw new AppError('CURRENCY_INVALID', `${code} is not an ISO 4217 currency code`);
  return m;
}

/**
 * Load the currencies this table holds into the ledger's snapshot (core/ledger/currency.ts):
 * the currencies the ledger accepts and their minor units (issue 21 item 2). Core runs it
 * before it serves, then on every change announced and periodically (./currency-sync.ts).
 */
export async function loadLedgerCurrencies(q: Queryable): Promise<void> {
  const { rows } = await q.query<{ code: string; minor_units: number }>(
    'SELECT code, minor_units FROM admin_currencies',
  );
  setCurrencies(rows.map((r) => [r.code, r.minor_units] as const));
}
