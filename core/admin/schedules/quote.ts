/**
 * The fee and limit contracts other domains call (transfers, agents, the ledger's limits):
 * resolve the ACTIVE schedule for a context and answer from its items. Both take a Queryable so
 * callers can use them inside their own transaction.
 */
import type { Queryable } from '../../../shared/db/pool.ts';
import { AppError } from '../../../shared/errors.ts';
import type { Micro } from '../../../shared/money.ts';
import { requireMinorUnits } from '../reference/currencies.ts';
import { limitsOf, resolveSchedule, tiersOf, type ScheduleKind } from './store.ts';
import { feeForTier, tierFor } from './tiers.ts';

export interface QuoteInput {
  tenantId: string;
  product: string;
  /** Integer micro-units. */
  amount: Micro;
  currency: string;
  /** Environment id or name (an ENVIRONMENT schedule for it wins). */
  env?: string | undefined;
  /** ISO alpha-2; defaults to the tenant's country. */
  country?: string | undefined;
  at?: Date | undefined;
}

export interface Quote {
  scheduleId: string;
  tierId: string;
  /** Integer micro-units, a whole number of the currency's minor units. */
  fee: Micro;
  currency: string;
}

async function quoteKind(q: Queryable, kind: ScheduleKind, input: QuoteInput): Promise<Quote> {
  if (input.amount < 0n) throw new AppError('INVALID_AMOUNT', 'amount must not be negative');
  const minor = await requireMinorUnits(q, input.currency);
  const schedule = await resolveSchedule(q, { ...input, kind });
  if (!schedule)
    throw new AppError(
      'NO_ACTIVE_SCHEDULE',
      `no active ${kind} schedule for ${input.product} in ${input.currency}`,
    );
  const tier = tierFor(await tiersOf(q, input.tenantId, schedule.id), input.amount);
  if (!tier) throw new AppError('NO_FEE_TIER', `schedule ${schedule.id} has no tier for this amount`);
  return {
    scheduleId: schedule.id,
    tierId: tier.id,
    fee: feeForTier(tier, input.amount, minor),
    currency: input.currency,
  };
}

/**
 * The fee for moving `amount` with `product`: 422 NO_ACTIVE_SCHEDULE when no FEE schedule is
 * active for the context, NO_FEE_TIER when no band holds the amount, CURRENCY_INVALID for a
 * code that is not ISO 4217.
 */
export function quoteFee(q: Queryable, input: QuoteInput): Promise<Quote> {
  return quoteKind(q, 'FEE', input);
}

/** The agent commission for `amount` (schedule kind COMMISSION; same tiers and errors as fees). */
export function quoteCommission(q: Queryable, input: QuoteInput): Promise<Quote> {
  return quoteKind(q, 'COMMISSION', input);
}

export interface LimitQuery {
  tenantId: string;
  product: string;
  action: string;
  currency: string;
  /** A KYC level's rows replace the level-less row of the same period. */
  kycLevel?: string | undefined;
  env?: string | undefined;
  country?: string | undefined;
  at?: Date | undefined;
}

export interface LimitRule {
  scheduleId: string;
  rowId: string;
  action: string;
  period: 'transaction' | 'day' | 'month';
  /** Integer micro-units, or null when only the count is limited. */
  maxAmount: Micro | null;
  maxCount: number | null;
  kycLevel: string | null;
}

/**
 * The limit rows that apply, ordered transaction, day, month; empty when no LIMIT schedule is
 * active (callers fail closed on an empty answer where a limit is mandatory).
 */
export async function limitRowsFor(q: Queryable, input: LimitQuery): Promise<LimitRule[]> {
  const schedule = await resolveSchedule(q, { ...input, kind: 'LIMIT' });
  if (!schedule) return [];
  const rows = (await limitsOf(q, input.tenantId, schedule.id)).filter((r) => r.action === input.action);
  const out: LimitRule[] = [];
  for (const period of ['transaction', 'day', 'month'] as const) {
    const inPeriod = rows.filter((r) => r.period === period);
    const specific =
      input.kycLevel === undefined ? [] : inPeriod.filter((r) => r.kycLevel === input.kycLevel);
    const chosen = specific.length > 0 ? specific : inPeriod.filter((r) => r.kycLevel === null);
    for (const r of chosen)
      out.push({
        scheduleId: schedule.id,
        rowId: r.id,
        action: r.action,
        period,
        maxAmount: r.maxAmount,
        maxCount: r.maxCount,
        kycLevel: r.kycLevel,
      });
  }
  return out;
}
