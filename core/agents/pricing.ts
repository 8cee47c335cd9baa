/**
 * Fees, commissions and limits for agent transactions. The administration API's schedules
 * (core/admin/schedules.ts: quoteFee, quoteCommission, limitRowsFor) answer first; when a
 * tenant has no active schedule for the product, the table-driven fallback below answers, so
 * agent operations work on a fresh tenant. Switching fully to schedules = deleting `fallback*`.
 */
import type { Queryable } from '../../shared/db/pool.ts';
import { quoteCommission, quoteFee, limitRowsFor } from '../admin/schedules.ts';
import { minorStep } from '../admin/schedules/tiers.ts';
import { displayDecimals } from '../ledger/currency.ts';
import { AppError } from '../../shared/errors.ts';
import { fromDb, format, microPerUnit, type Micro } from '../../shared/money.ts';

export type TxnKind = 'CASHIN' | 'CASHOUT' | 'P2P';

/** Errors that mean "no schedule configured here": use the fallback. */
const noSchedule = new Set(['NO_ACTIVE_SCHEDULE', 'CURRENCY_INVALID', 'CURRENCY_NOT_FOUND', 'NO_FEE_TIER']);

const bp = (amount: Micro, basisPoints: bigint) => (amount * basisPoints) / 10_000n;
const units = (n: bigint) => n * microPerUnit;
const clamp = (v: Micro, lo: Micro, hi: Micro) => (v < lo ? lo : v > hi ? hi : v);
/**
 * Whole minor units of the currency (2 decimals for KES, none for UGX): fees and commissions never
 * carry dust the currency cannot hold, which the ledger refuses (ledger_apply checks amounts against admin_currencies). Cutting
 * to 2 decimals made a UGX fee of 123.45.
 */
const whole = (v: Micro, minor: number) => (v / minorStep(minor)) * minorStep(minor);

/** Fallback fee: cash-out 1% (min 10, max 300), P2P 0.5% (min 5, max 100), cash-in free. */
export function fallbackFee(kind: TxnKind, amount: Micro, minor: number): Micro {
  if (kind === 'CASHOUT') return whole(clamp(bp(amount, 100n), units(10n), units(300n)), minor);
  if (kind === 'P2P') return whole(clamp(bp(amount, 50n), units(5n), units(100n)), minor);
  return 0n;
}

/** Fallback agent commission: cash-in 0.4%, cash-out 40% of the fee, P2P 20% of the fee. */
export function fallbackCommission(kind: TxnKind, amount: Micro, fee: Micro, minor: number): Micro {
  if (kind === 'CASHIN') return whole(clamp(bp(amount, 40n), 0n, units(200n)), minor);
  if (kind === 'CASHOUT') return whole(bp(fee, 4000n), minor);
  return whole(bp(fee, 2000n), minor);
}

async function orFallback(fn: () => Promise<{ fee: Micro }>, fallback: () => Micro): Promise<Micro> {
  try {
    return (await fn()).fee;
  } catch (err) {
    if (err instanceof AppError && noSchedule.has(err.code)) return fallback();
    throw err;
  }
}

export interface Pricing {
  fee: Micro;
  commission: Micro;
}

export async function priceOf(
  q: Queryable,
  tenantId: string,
  kind: TxnKind,
  amount: Micro,
  currency: string,
): Promise<Pricing> {
  const minor = displayDecimals(currency);
  const fee = await orFallback(
    () => quoteFee(q, { tenantId, product: kind, amount, currency }),
    () => fallbackFee(kind, amount, minor),
  );
  const commission = await orFallback(
    () => quoteCommission(q, { tenantId, product: kind, amount, currency }),
    () => fallbackCommission(kind, amount, fee, minor),
  );
  return { fee, commission };
}

export interface Limit {
  period: 'transaction' | 'day';
  maxAmount: Micro | null;
  maxCount: number | null;
}

/** Fallback limits by KYC level (KES-sized): level 1 small, level 2 the regulator's full tier. */
const fallbackLimits: Record<number, Limit[]> = {
  1: [
    { period: 'transaction', maxAmount: units(50_000n), maxCount: null },
    { period: 'day', maxAmount: units(100_000n), maxCount: 20 },
  ],
  2: [
    { period: 'transaction', maxAmount: units(250_000n), maxCount: null },
    { period: 'day', maxAmount: units(500_000n), maxCount: 100 },
  ],
};

/** The customer's limit rows for `kind` at `kycLevel` (schedule rows, else the fallback). */
export async function customerLimits(
  q: Queryable,
  tenantId: string,
  kind: TxnKind,
  currency: string,
  kycLevel: number,
): Promise<Limit[]> {
  const rows = await limitRowsFor(q, {
    tenantId,
    product: 'WALLET_MAIN',
    action: kind === 'P2P' ? 'TRANSFER' : kind,
    currency,
    kycLevel: String(kycLevel),
  });
  const fromSchedule = rows
    .filter((r) => r.period !== 'month')
    .map((r) => ({
      period: r.period as 'transaction' | 'day',
      maxAmount: r.maxAmount,
      maxCount: r.maxCount,
    }));
  return fromSchedule.length > 0 ? fromSchedule : (fallbackLimits[kycLevel] ?? []);
}

/** Throw LIMIT_EXCEEDED when `amount` on top of today's usage breaks a row. */
export function enforce(
  limits: Limit[],
  amount: Micro,
  usedToday: { amount: Micro; count: number },
  who: string,
): void {
  for (const l of limits) {
    const used = l.period === 'day' ? usedToday.amount : 0n;
    if (l.maxAmount !== null && used + amount > l.maxAmount) {
      throw new AppError(
        'LIMIT_EXCEEDED',
        `${who} ${l.period} limit of ${format(l.maxAmount)} would be exceeded`,
      );
    }
    if (l.period === 'day' && l.maxCount !== null && usedToday.count + 1 > l.maxCount) {
      throw new AppError('LIMIT_EXCEEDED', `${who} daily count limit of ${l.maxCount} would be exceeded`);
    }
  }
}

/** Agent-level limits from the agent row (NULL = none). */
export function agentLimits(txnMax: string | null, dayMax: string | null): Limit[] {
  return [
    { period: 'transaction', maxAmount: txnMax === null ? null : fromDb(txnMax), maxCount: null },
    { period: 'day', maxAmount: dayMax === null ? null : fromDb(dayMax), maxCount: null },
  ];
}
