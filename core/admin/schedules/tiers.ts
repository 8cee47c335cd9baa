/**
 * Pure schedule arithmetic (no SQL): fee of a tier, the tier for an amount, and validation of
 * tiers and limit rows (overlaps, gaps, currency precision). Money is integer micro-units.
 * A tier covers [min, max): a max of null is unbounded. Fees round half-up to minor units.
 */
import { format, microPerUnit, type Micro } from '../../../shared/money.ts';

export interface Tier {
  id?: string;
  minAmount: Micro;
  maxAmount: Micro | null;
  fixed: Micro;
  /** Basis points of the amount: 100 = 1 %. */
  percentBps: number;
  feeMin: Micro | null;
  feeMax: Micro | null;
}

export interface LimitItem {
  id?: string;
  action: string;
  period: 'transaction' | 'day' | 'month';
  maxAmount: Micro | null;
  maxCount: number | null;
  kycLevel: string | null;
}

export type IssueCode = 'SCHEDULE_OVERLAP' | 'SCHEDULE_GAP' | 'SCHEDULE_PRECISION' | 'SCHEDULE_INVALID';

export interface Issue {
  code: IssueCode;
  message: string;
  /** Indexes of the items involved, in the order given. */
  items: number[];
}

/** Size of one minor unit in micro-units (KES: 10 000; UGX: 1 000 000). */
export function minorStep(minorUnits: number): Micro {
  return 10n ** BigInt(6 - minorUnits);
}

export function hasExcessPrecision(v: Micro, minorUnits: number): boolean {
  return v % minorStep(minorUnits) !== 0n;
}

/** fee = clamp(fixed + amount × bps / 10 000, min, max), percentage part rounded half-up. */
export function feeForTier(t: Tier, amount: Micro, minorUnits: number): Micro {
  const step = minorStep(minorUnits);
  const denom = 10_000n * step;
  const pctSteps = (2n * amount * BigInt(t.percentBps) + denom) / (2n * denom);
  let fee = t.fixed + pctSteps * step;
  if (t.feeMin !== null && fee < t.feeMin) fee = t.feeMin;
  if (t.feeMax !== null && fee > t.feeMax) fee = t.feeMax;
  return fee;
}

/** The tier whose band holds `amount`, or undefined. */
export function tierFor<T extends Tier>(tiers: readonly T[], amount: Micro): T | undefined {
  return tiers.find((t) => amount >= t.minAmount && (t.maxAmount === null || amount < t.maxAmount));
}

const show = (v: Micro | null, minor: number) => (v === null ? '∞' : format(v, minor));

/** Overlaps, gaps (bands must start at 0, touch, and end unbounded) and precision. */
export function validateTiers(tiers: readonly Tier[], minorUnits: number): Issue[] {
  const issues: Issue[] = [];
  tiers.forEach((t, i) => {
    for (const [name, v] of [
      ['min_amount', t.minAmount],
      ['max_amount', t.maxAmount],
      ['fixed', t.fixed],
      ['fee_min', t.feeMin],
      ['fee_max', t.feeMax],
    ] as const) {
      if (v !== null && hasExcessPrecision(v, minorUnits)) {
        issues.push({
          code: 'SCHEDULE_PRECISION',
          message: `tier ${i}: ${name} ${format(v, 0)} has more decimals than the currency's ${minorUnits}`,
          items: [i],
        });
      }
    }
    if (t.maxAmount !== null && t.maxAmount <= t.minAmount)
      issues.push({
        code: 'SCHEDULE_INVALID',
        message: `tier ${i}: max_amount must exceed min_amount`,
        items: [i],
      });
    if (t.feeMin !== null && t.feeMax !== null && t.feeMax < t.feeMin)
      issues.push({ code: 'SCHEDULE_INVALID', message: `tier ${i}: fee_max below fee_min`, items: [i] });
    if (t.percentBps < 0 || t.percentBps > 10_000 || !Number.isInteger(t.percentBps))
      issues.push({
        code: 'SCHEDULE_INVALID',
        message: `tier ${i}: percent_bps must be an integer 0–10000`,
        items: [i],
      });
  });
  const order = tiers
    .map((t, i) => ({ t, i }))
    .sort((a, b) => (a.t.minAmount < b.t.minAmount ? -1 : a.t.minAmount > b.t.minAmount ? 1 : a.i - b.i));
  for (let k = 0; k + 1 < order.length; k++) {
    const a = order[k];
    const b = order[k + 1];
    if (!a || !b) continue;
    if (a.t.maxAmount === null || a.t.maxAmount > b.t.minAmount) {
      issues.push({
        code: 'SCHEDULE_OVERLAP',
        message: `tiers ${a.i} [${show(a.t.minAmount, minorUnits)}, ${show(a.t.maxAmount, minorUnits)}) and ${b.i} [${show(b.t.minAmount, minorUnits)}, ${show(b.t.maxAmount, minorUnits)}) overlap`,
        items: [a.i, b.i],
      });
    } else if (a.t.maxAmount < b.t.minAmount) {
      issues.push({
        code: 'SCHEDULE_GAP',
        message: `no tier covers [${show(a.t.maxAmount, minorUnits)}, ${show(b.t.minAmount, minorUnits)})`,
        items: [a.i, b.i],
      });
    }
  }
  const first = order[0];
  const last = order.at(-1);
  if (first && first.t.minAmount > 0n)
    issues.push({
      code: 'SCHEDULE_GAP',
      message: `no tier covers [0, ${show(first.t.minAmount, minorUnits)})`,
      items: [first.i],
    });
  if (last && last.t.maxAmount !== null)
    issues.push({
      code: 'SCHEDULE_GAP',
      message: `no tier covers amounts from ${show(last.t.maxAmount, minorUnits)}`,
      items: [last.i],
    });
  return issues;
}

/** Duplicate (action, period, kyc level) rows overlap; amounts must respect the currency. */
export function validateLimits(rows: readonly LimitItem[], minorUnits: number): Issue[] {
  const issues: Issue[] = [];
  const seen = new Map<string, number>();
  rows.forEach((r, i) => {
    if (r.maxAmount !== null && hasExcessPrecision(r.maxAmount, minorUnits)) {
      issues.push({
        code: 'SCHEDULE_PRECISION',
        message: `row ${i}: max_amount has more decimals than the currency's ${minorUnits}`,
        items: [i],
      });
    }
    if (r.maxAmount === null && r.maxCount === null)
      issues.push({
        code: 'SCHEDULE_INVALID',
        message: `row ${i}: give max_amount or max_count`,
        items: [i],
      });
    const key = `${r.action}\n${r.period}\n${r.kycLevel ?? ''}`;
    const before = seen.get(key);
    if (before !== undefined)
      issues.push({
        code: 'SCHEDULE_OVERLAP',
        message: `rows ${before} and ${i} both limit ${r.action} per ${r.period}${r.kycLevel ? ` at KYC ${r.kycLevel}` : ''}`,
        items: [before, i],
      });
    else seen.set(key, i);
  });
  return issues;
}

/** Whole units to micro-units, for seeds and tests: units(100) = 100 000 000n. */
export function units(n: number | bigint): Micro {
  return BigInt(n) * microPerUnit;
}
