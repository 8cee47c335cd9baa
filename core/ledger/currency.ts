/**
 * Minor units of the currencies the ledger accepts. The one source is administration's currency
 * table (admin_currencies, SPEC 4.6; issue 21 item 2; seeded by migration 0971 with the values
 * this file used to hard-code). The ledger checks amounts synchronously, so it keeps a snapshot:
 * core loads it before it serves (core/admin/reference/currencies.ts loadLedgerCurrencies),
 * reloads it periodically for what other instances change, and this process's admin writes
 * update it at once. A currency some ledger account holds keeps its minor units (the admin
 * route refuses the change), so the snapshot can lag only for currencies that hold no money.
 */
let known: ReadonlyMap<string, number> = new Map();

/** Replace the snapshot (a full load of admin's table). */
export function setCurrencies(entries: Iterable<readonly [string, number]>): void {
  known = new Map(entries);
}

/** One currency added, changed (`minor`) or removed (`undefined`) by this process's admin write. */
export function setCurrency(code: string, minor: number | undefined): void {
  const next = new Map(known);
  if (minor === undefined) next.delete(code);
  else next.set(code, minor);
  known = next;
}

/** Minor units of a known currency, or undefined. */
export function minorUnitsOf(code: string): number | undefined {
  return known.get(code);
}
