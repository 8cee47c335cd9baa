/**
 * Minor units of the currencies the ledger accepts. The one source is administration's currency
 * table (admin_currencies, SPEC 4.6; issue 21 item 2; seeded by migration 0971 with the values
 * this file used to hard-code). The ledger checks amounts synchronously, so it keeps a snapshot:
 * core loads it before it serves (core/admin/reference/currencies.ts loadLedgerCurrencies; buildCore
 * starts a load too, and until one lands amounts answer 503, never a wrong refusal),
 * reloads it when any writer changes the table (NOTIFY `currencies_changed` at commit, so what
 * another instance changes is known here within moments; core/admin/reference/currency-sync.ts)
 * and every 30 s as a fallback, and this process's admin writes update it at once. A currency
 * some ledger account holds keeps its minor units (the admin route refuses the change); a
 * snapshot can lag the table only between a commit and its NOTIFY's reload, or while this
 * core's listener is down: the write path (ledger_apply) checks amounts against the table itself.
 */
import { AppError } from '../../shared/errors.ts';

let known: ReadonlyMap<string, number> | undefined;

/** Replace the snapshot (a full load of admin's table). */
export function setCurrencies(entries: Iterable<readonly [string, number]>): void {
  known = new Map(entries);
}

/**
 * The snapshot, once loaded. Before the first load every currency would look unknown and
 * amounts would be refused as if the currency were not defined: a process that serves before
 * its load answers 503 instead (buildCore starts the load; entry points await it first).
 */
function snapshot(): ReadonlyMap<string, number> {
  if (!known)
    throw new AppError('SERVICE_UNAVAILABLE', 'the ledger currencies are not loaded yet; retry', {
      headers: { 'retry-after': '1' },
    });
  return known;
}

/** One currency added, changed (`minor`) or removed (`undefined`) by this process's admin write. */
export function setCurrency(code: string, minor: number | undefined): void {
  const next = new Map(snapshot());
  if (minor === undefined) next.delete(code);
  else next.set(code, minor);
  known = next;
}

/** Minor units of a known currency, or undefined. */
export function minorUnitsOf(code: string): number | undefined {
  return snapshot().get(code);
}

/**
 * Decimals to show an amount with: its currency's minor units. Money exists only in currencies
 * of the table (a currency in use can be neither removed nor changed: CURRENCY_IN_USE), so the
 * fallback of 2 is for a currency named by a request that holds nothing; `format` never drops
 * a non-zero digit whatever this says.
 */
export function displayDecimals(code: string): number {
  return minorUnitsOf(code) ?? 2;
}
