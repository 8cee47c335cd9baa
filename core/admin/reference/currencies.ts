/** Minor units of a currency: the platform's local override when one is stored, else ISO 4217. */
import type { Queryable } from '../../../shared/db/pool.ts';
import { AppError } from '../../../shared/errors.ts';
import { setCurrencies, setCurrency } from '../../ledger/currency.ts';
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
 * How many of this process's admin writes have been applied to the ledger's snapshot: a reload
 * compares it across its read (applyLedgerCurrencies).
 */
let localWrites = 0;

/**
 * One currency added, changed (`minor`) or removed (`undefined`) by this process's admin write,
 * applied to its snapshot once the write has committed (the route's `afterCommit`). A reload
 * that read the table before that commit will not put the old value back.
 */
export function applyCommittedCurrency(code: string, minor: number | undefined): void {
  localWrites++;
  setCurrency(code, minor);
}

/** The table as one SELECT read it, and how many local writes the snapshot had taken before it. */
export interface CurrencyRead {
  entries: (readonly [string, number])[];
  localWritesBefore: number;
}

/** Read the currencies this table holds and their minor units (issue 21 item 2), for applyLedgerCurrencies. */
export async function readLedgerCurrencies(q: Queryable): Promise<CurrencyRead> {
  // Taken before the SELECT is sent: a local write applied after this may have committed after
  // the SELECT's snapshot, so a read that sees the count move is not applied.
  const localWritesBefore = localWrites;
  const { rows } = await q.query<{ code: string; minor_units: number }>(
    'SELECT code, minor_units FROM admin_currencies',
  );
  return { entries: rows.map((r) => [r.code, r.minor_units] as const), localWritesBefore };
}

/**
 * Replace the ledger's snapshot (core/ledger/currency.ts) with `read`, unless a local write was
 * applied since the read began: the read may be older than that write and would undo it until
 * the next reload. False then: read again.
 */
export function applyLedgerCurrencies(read: CurrencyRead): boolean {
  if (read.localWritesBefore !== localWrites) return false;
  setCurrencies(read.entries);
  return true;
}

/**
 * Load the currencies this table holds into the ledger's snapshot: the currencies the ledger
 * accepts and their minor units (issue 21 item 2). Core runs it before it serves; the running
 * core reloads on every change announced and periodically (./currency-sync.ts). A read a local
 * write overtook is read again, so what this leaves is never older than that write.
 */
export async function loadLedgerCurrencies(q: Queryable): Promise<void> {
  for (;;) if (applyLedgerCurrencies(await readLedgerCurrencies(q))) return;
}
