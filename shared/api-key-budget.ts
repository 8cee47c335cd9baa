/**
 * API-key amount budgets (SPEC 5.4.5; issue 13 item 5), the parts the edge and core share: how
 * a route that moves money is counted, the day window, and the edge's note to core of the
 * amount it counted for a request.
 */

/**
 * How a route that moves money counts against an API key's daily amount budget. Every route
 * that reaches the ledger's postings, holds, captures or reversals declares one (`money` in its
 * declaration, shared/routes/; core's `movesMoney`); core refuses to move money for a route that did not.
 * - `request`: the request names the amount (`amount` and `currency`, or a posting's legs); the
 *   edge counts it before core sees the request, and core gives it back when nothing moved.
 * - `ledger`: the request names only an id (a reversal, a capture); core counts what the ledger
 *   moved, in the transaction that moves it, and refuses past the budget.
 * - `no-api-keys`: customer or agent money that no API key may move; refused at the edge and in core.
 */
export type MoneyMovement = 'request' | 'ledger' | 'no-api-keys';

export const budgetDayMs = 86_400_000;

/**
 * The largest daily amount budget, in units: its micro-units and the day's count fit a bigint
 * (api_key_budget_take, migration 0730; the ledger's api_key_budget_count_posting refuses a larger
 * one as unreadable). The API refuses more (422 INVALID_AMOUNT), so does migration 1118's guard,
 * and the edge reads a larger stored one as no amount (`budget_unreadable`).
 */
export const dailyBudgetMaxUnits = 9_000_000_000_000n;
export const dailyBudgetMaxMicros = dailyBudgetMaxUnits * 1_000_000n;

/** Start of the UTC day `nowMs` falls in: the window of the daily amount budget. */
export function budgetDayStart(nowMs: number): Date {
  return new Date(Math.floor(nowMs / budgetDayMs) * budgetDayMs);
}

/** What the edge took from a key's day row for one request. */
export interface BudgetCount {
  windowStart: Date;
  currency: string;
  micros: bigint;
}

/** The header value the edge sends core: `<window start ISO 8601> <currency> <micro-units>`. */
export function formatBudgetCount(c: BudgetCount): string {
  return `${c.windowStart.toISOString()} ${c.currency} ${c.micros.toString()}`;
}

const countPattern = /^(\d{4}-\d{2}-\d{2}T00:00:00\.000Z) ([A-Z]{3}) ([1-9][0-9]{0,20})$/;

/** The edge's note, or undefined when absent or not in the edge's form. */
export function parseBudgetCount(value: string | undefined): BudgetCount | undefined {
  const m = value === undefined ? null : countPattern.exec(value);
  if (!m?.[1] || !m[2] || !m[3]) return undefined;
  const windowStart = new Date(m[1]);
  if (Number.isNaN(windowStart.getTime())) return undefined;
  return { windowStart, currency: m[2], micros: BigInt(m[3]) };
}
