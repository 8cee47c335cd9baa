/**
 * API-key budgets (SPEC 5.4.5): requests per minute and amount per day, counted atomically in
 * PostgreSQL so every edge instance shares them. Only allowed requests are counted, once each.
 * The amount is counted here on routes whose request names it (`request`: shared/routes/);
 * core counts the amount of routes that name only an id (`ledger`) in the transaction that
 * moves it, in the same day row (api_key_budget_take, migration 0730), and gives back what was
 * counted here when the request moved nothing (core/apikeys/budget.ts). Each consumption is
 * in the decision's audit record (request id, amount).
 */
import { asJsonBody, type JsonBody } from '../../shared/json-body.ts';
import { parseAmount } from '../../shared/money.ts';
import type { Queryable } from '../../shared/db/pool.ts';
import {
  budgetDayMs,
  budgetDayStart,
  dailyBudgetMaxMicros,
  type BudgetCount,
  type MoneyMovement,
} from '../../shared/api-key-budget.ts';
import type { ApiKeyState } from '../state/store.ts';

export type BudgetResult =
  | { ok: true; amountMicros: bigint; counted: boolean; taken?: BudgetCount }
  | {
      ok: false;
      reason: 'per_minute' | 'daily_amount' | 'currency_mismatch' | 'amount_unreadable' | 'budget_unreadable';
      retryAfterS: number;
    };

/** The amount a money-moving request moves, in the body's currency: `amount`, or the sum of debit legs. */
export function requestAmount(
  body: Buffer | JsonBody,
): { micros: bigint; currency: string } | undefined | 'unreadable' {
  const { text, json } = asJsonBody(body);
  if (text.length === 0) return undefined;
  if (!json) return 'unreadable';
  const doc = json.value;
  if (!doc || typeof doc !== 'object') return 'unreadable';
  const d = doc as Record<string, unknown>;
  const currency = typeof d.currency === 'string' ? d.currency : undefined;
  if (d.amount !== undefined) {
    const p = parseAmount(d.amount);
    return p.ok && currency ? { micros: p.micro, currency } : 'unreadable';
  }
  if (Array.isArray(d.entries) && currency) {
    let total = 0n;
    for (const e of d.entries) {
      // A leg that is no object (`null`) is core's to refuse (400); here it is an unreadable amount, never a throw.
      if (!e || typeof e !== 'object') return 'unreadable';
      const leg = e as Record<string, unknown>;
      // A leg may name its own currency (core/ledger/schemas.ts): one other than the posting's
      // cannot be counted in the posting's currency, so the amount is not readable here.
      if (leg.currency !== undefined && leg.currency !== currency) return 'unreadable';
      if (leg.side !== 'debit') continue;
      const p = parseAmount(leg.amount);
      if (!p.ok) return 'unreadable';
      total += p.micro;
    }
    return { micros: total, currency };
  }
  return undefined;
}

const minuteMs = 60_000;

/**
 * Count one request against the key's budget, all or nothing: one per minute on every route
 * (the transactions-per-minute budget counts each call once, here, never again in core), and
 * the amount on routes whose request names it. Such a route without a readable amount in the
 * budget's currency is refused rather than counted as nothing.
 */
export async function consumeBudget(
  tx: (fn: (q: Queryable) => Promise<BudgetResult>) => Promise<BudgetResult>,
  key: ApiKeyState,
  money: MoneyMovement | undefined,
  body: Buffer | JsonBody,
  nowMs: number,
): Promise<BudgetResult> {
  // A budget that is no JSON object (null, a string encoded twice, an array wrapping it) names
  // no limit this edge can read: the key is refused, never served without its limits.
  const stored: unknown = key.budget;
  if (stored === null || typeof stored !== 'object' || Array.isArray(stored))
    return { ok: false, reason: 'budget_unreadable', retryAfterS: 0 };
  const perMinute = key.budget.per_minute;
  const daily =
    key.budget.daily_amount !== undefined
      ? parseAmount(key.budget.daily_amount, { allowZero: true })
      : undefined;
  // A daily budget this edge cannot read (stored before migrations 1104 and 1112 refused such
  // budgets: a JSON number, no currency, no amount; or past dailyBudgetMaxUnits, before migration
  // 1118, whose micro-units overflow api_key_budget_take's bigint) counts nothing: the key moves no
  // money, never money without a limit.
  if (
    money !== undefined &&
    daily !== undefined &&
    !(daily.ok && daily.micro <= dailyBudgetMaxMicros && key.budget.currency)
  )
    return { ok: false, reason: 'budget_unreadable', retryAfterS: 0 };
  let amount = 0n;
  if (money === 'request' && daily?.ok) {
    const a = requestAmount(body);
    if (a === 'unreadable' || a === undefined)
      return { ok: false, reason: 'amount_unreadable', retryAfterS: 0 };
    if (a.currency !== key.budget.currency) return { ok: false, reason: 'currency_mismatch', retryAfterS: 0 };
    amount = a.micros;
  }
  if (perMinute === undefined && !(daily?.ok && amount > 0n))
    return { ok: true, amountMicros: 0n, counted: false };
  const minuteStart = new Date(Math.floor(nowMs / minuteMs) * minuteMs);
  const dayStart = budgetDayStart(nowMs);
  return tx(async (q) => {
    if (perMinute !== undefined) {
      const { rowCount } = await q.query(
        `INSERT INTO api_key_usage (key_id, window_kind, window_start, count) VALUES ($1, 'minute', $2, 1)
         ON CONFLICT (key_id, window_kind, window_start, currency) DO UPDATE SET count = api_key_usage.count + 1
         WHERE api_key_usage.count < $3`,
        [key.id, minuteStart, perMinute],
      );
      if (rowCount !== 1)
        return {
          ok: false,
          reason: 'per_minute',
          retryAfterS: Math.max(1, Math.ceil((minuteStart.getTime() + minuteMs - nowMs) / 1000)),
        };
    }
    let taken: BudgetCount | undefined;
    if (daily?.ok && amount > 0n && key.budget.currency) {
      const { rows } = await q.query<{ ok: boolean }>(
        'SELECT api_key_budget_take($1, $2, $3, $4, $5) AS ok',
        [key.id, dayStart, key.budget.currency, amount.toString(), daily.micro.toString()],
      );
      if (rows[0]?.ok !== true)
        throw new BudgetExhausted(Math.max(1, Math.ceil((dayStart.getTime() + budgetDayMs - nowMs) / 1000)));
      taken = { windowStart: dayStart, currency: key.budget.currency, micros: amount };
    }
    return { ok: true, amountMicros: amount, counted: true, ...(taken ? { taken } : {}) };
  }).catch((err: unknown) => {
    // A daily refusal rolls back the minute count taken in the same transaction.
    if (err instanceof BudgetExhausted)
      return { ok: false, reason: 'daily_amount', retryAfterS: err.retryAfterS };
    throw err;
  });
}

class BudgetExhausted extends Error {
  constructor(readonly retryAfterS: number) {
    super('daily amount budget exhausted');
  }
}
