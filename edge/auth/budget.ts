/**
 * API-key budgets (SPEC 5.4.5): requests per minute and amount per day, counted atomically in
 * PostgreSQL so every edge instance shares them. Only allowed requests are counted; each
 * consumption is recorded in the decision's audit record (request id, amount), so a request
 * that later failed downstream is visible and can be reconciled rather than silently eaten.
 */
import { parseAmount } from '../../core/ledger/money.ts';
import type { Queryable } from '../../core/db/pool.ts';
import type { ApiKeyState } from '../state/store.ts';

export type BudgetResult =
  | { ok: true; amountMicros: bigint; counted: boolean }
  | { ok: false; reason: 'per_minute' | 'daily_amount' | 'currency_mismatch' | 'amount_unreadable'; retryAfterS: number };

/** The amount a money-moving request moves, in the body's currency: `amount`, or the sum of debit legs. */
export function requestAmount(body: Buffer): { micros: bigint; currency: string } | undefined | 'unreadable' {
  if (body.length === 0) return undefined;
  let doc: unknown;
  try {
    doc = JSON.parse(body.toString('utf8'));
  } catch {
    return 'unreadable';
  }
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
const dayMs = 86_400_000;

/** Count one request (and its amount) against the key's budget, all or nothing. */
export async function consumeBudget(
  tx: (fn: (q: Queryable) => Promise<BudgetResult>) => Promise<BudgetResult>,
  key: ApiKeyState,
  moneyMoving: boolean,
  body: Buffer,
  nowMs: number,
): Promise<BudgetResult> {
  const perMinute = key.budget.per_minute;
  const daily = key.budget.daily_amount !== undefined ? parseAmount(key.budget.daily_amount, { allowZero: true }) : undefined;
  let amount = 0n;
  if (moneyMoving && daily?.ok) {
    const a = requestAmount(body);
    if (a === 'unreadable') return { ok: false, reason: 'amount_unreadable', retryAfterS: 0 };
    if (a) {
      if (a.currency !== key.budget.currency) return { ok: false, reason: 'currency_mismatch', retryAfterS: 0 };
      amount = a.micros;
    }
  }
  if (perMinute === undefined && !(daily?.ok && amount > 0n)) return { ok: true, amountMicros: 0n, counted: false };
  const minuteStart = new Date(Math.floor(nowMs / minuteMs) * minuteMs);
  const dayStart = new Date(Math.floor(nowMs / dayMs) * dayMs);
  return tx(async (q) => {
    if (perMinute !== undefined) {
      const { rowCount } = await q.query(
        `INSERT INTO api_key_usage (key_id, window_kind, window_start, count) VALUES ($1, 'minute', $2, 1)
         ON CONFLICT (key_id, window_kind, window_start) DO UPDATE SET count = api_key_usage.count + 1
         WHERE api_key_usage.count < $3`,
        [key.id, minuteStart, perMinute],
      );
      if (rowCount !== 1) return { ok: false, reason: 'per_minute', retryAfterS: Math.max(1, Math.ceil((minuteStart.getTime() + minuteMs - nowMs) / 1000)) };
    }
    if (daily?.ok && amount > 0n) {
      const { rowCount } = await q.query(
        `INSERT INTO api_key_usage (key_id, window_kind, window_start, count, amount_micros) SELECT $1, 'day', $2, 1, $3 WHERE $3::bigint <= $4::bigint
         ON CONFLICT (key_id, window_kind, window_start) DO UPDATE SET count = api_key_usage.count + 1, amount_micros = api_key_usage.amount_micros + $3
         WHERE api_key_usage.amount_micros + $3 <= $4`,
        [key.id, dayStart, amount.toString(), daily.micro.toString()],
      );
      if (rowCount !== 1) throw new BudgetExhausted(Math.max(1, Math.ceil((dayStart.getTime() + dayMs - nowMs) / 1000)));
    }
    return { ok: true, amountMicros: amount, counted: true };
  }).catch((err: unknown) => {
    // A daily refusal rolls back the minute count taken in the same transaction.
    if (err instanceof BudgetExhausted) return { ok: false, reason: 'daily_amount', retryAfterS: err.retryAfterS };
    throw err;
  });
}

class BudgetExhausted extends Error {
  constructor(readonly retryAfterS: number) {
    super('daily amount budget exhausted');
  }
}
