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
  const read = async () =>
    (
      await q.query<{ minor_units: number }>(
        `SELECT minor_units FROM admin_currencies WHERE code = $1${opts.lock ? ' FOR SHARE' : ''}`,
        [code],
      )
    ).rows[0]?.minor_units;
  let minor = await read();
  if (minor === undefined && opts.lock) {
    // No row to share: its ISO 4217 units hold until an addition stores others, which takes this
    // code's lock (lockCurrencyCode) before it checks what is configured in the currency. Taken,
    // the row is read again: an addition committed meanwhile is what this reads.
    await lockCurrencyCode(q, code, 'shared');
    minor = await read();
  }
  return minor ?? isoCurrency(code)?.minorUnits;
}

/**
 * The lock of a currency code the table may lack, until the transaction ends: an addition of the
 * currency takes it exclusively, a locked read that finds no row shares it (minorUnitsOf). A
 * FOR SHARE of a row not there yet waits for nothing, so without it a schedule activated while
 * the currency was added with fewer minor units than ISO 4217's was validated against the ISO
 * units and the addition's check missed it (neither had committed): both passed.
 */
export async function lockCurrencyCode(
  q: Queryable,
  code: string,
  mode: 'shared' | 'exclusive',
): Promise<void> {
  await q.query(`SELECT pg_advisory_xact_lock${mode === 'shared' ? '_shared' : ''}(hashtext($1))`, [
    `currency-units:${code}`,
  ]);
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
