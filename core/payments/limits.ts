/**
 * Transfer limits (issue 7; SPEC 8): the tenant's limit rows for the TRANSFER product, chosen by
 * the customer's KYC level. A customer's usage counts every live transfer they send: out of
 * their own wallet, and (issue 20 item 3) those they initiate from a wallet they are a delegated
 * payer for. A delegated transfer is checked against both customers: the wallet owner's limits
 * (their money leaves) and the initiator's own (a delegate never exceeds their own limits).
 */
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { format, fromDb, type Micro } from '../../shared/money.ts';
import { limitRowsFor } from '../admin/schedules.ts';

export const transferProduct = 'TRANSFER';

/** The customer's active KYC level (agents register it), when known: it selects their limit rows. */
async function kycLevelOf(
  q: Queryable,
  tenantId: string,
  customerId: string,
  nowMs: number,
): Promise<string | undefined> {
  const { rows } = await q.query<{ level: number }>(
    `SELECT level FROM kyc_profiles WHERE tenant_id = $1 AND customer_id = $2 AND status = 'ACTIVE' AND expires_at > $3`,
    [tenantId, customerId, new Date(nowMs)],
  );
  return rows[0] ? String(rows[0].level) : undefined;
}

/**
 * Refuse (422 LIMIT_EXCEEDED, LIMITS_UNAVAILABLE) a transfer of `amount` that would take
 * `customer` past a limit; `whose` names them in the message ("your", "the wallet owner's").
 */
export async function checkLimits(
  q: Queryable,
  tenantId: string,
  customer: string,
  currency: string,
  amount: Micro,
  nowMs: number,
  whose = 'the',
): Promise<void> {
  const kycLevel = await kycLevelOf(q, tenantId, customer, nowMs);
  const rules = await limitRowsFor(q, {
    tenantId,
    product: transferProduct,
    action: 'TRANSFER',
    currency,
    ...(kycLevel ? { kycLevel } : {}),
  });
  if (rules.length === 0)
    throw new AppError('LIMITS_UNAVAILABLE', `no active transfer limits for ${currency}; refusing`);
  for (const rule of rules) {
    if (rule.period === 'transaction') {
      if (rule.maxAmount !== null && amount > rule.maxAmount)
        throw new AppError(
          'LIMIT_EXCEEDED',
          `amount exceeds ${whose} per-transaction limit of ${format(rule.maxAmount)} ${currency}`,
        );
      continue;
    }
    const now = new Date(nowMs);
    const since =
      rule.period === 'day'
        ? new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()))
        : new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
    const { rows } = await q.query<{ total: string; n: number }>(
      `SELECT coalesce(sum(amount), 0)::text AS total, count(*)::int AS n FROM transfers
       WHERE tenant_id = $1 AND (payer_customer_id = $2 OR initiator_customer_id = $2) AND currency = $3 AND created_at >= $4
         AND (status = 'POSTED' OR (status = 'PENDING' AND expires_at > $5))`,
      [tenantId, customer, currency, since, now],
    );
    const used = fromDb(rows[0]?.total ?? '0');
    const count = rows[0]?.n ?? 0;
    if (rule.maxAmount !== null && used + amount > rule.maxAmount)
      throw new AppError(
        'LIMIT_EXCEEDED',
        `amount exceeds ${whose} ${rule.period} limit of ${format(rule.maxAmount)} ${currency}`,
      );
    if (rule.maxCount !== null && count + 1 > rule.maxCount)
      throw new AppError(
        'LIMIT_EXCEEDED',
        `more than ${rule.maxCount} transfers a ${rule.period} (${whose} limit)`,
      );
  }
}
