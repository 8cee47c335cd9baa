/**
 * Public contract of the schedules domain (issue 6) for other domains:
 *   quoteFee(q, {tenantId, product, amount, currency, env?, country?}) → {scheduleId, tierId, fee, currency}
 *   quoteCommission(...)  the same for COMMISSION schedules (agents)
 *   limitRowsFor(q, {tenantId, product, action, currency, kycLevel?, env?, country?}) → LimitRule[]
 * Amounts are integer micro-units (bigint); see shared/money.ts.
 */
export {
  quoteFee,
  quoteCommission,
  limitRowsFor,
  type Quote,
  type QuoteInput,
  type LimitQuery,
  type LimitRule,
} from './schedules/quote.ts';
