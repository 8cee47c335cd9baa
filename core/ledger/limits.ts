/**
 * POST /v1/core/limits/check: per product, action and period (single transaction, day,
 * month; amount and count) from the tenant's limit schedule rows. Usage counts the account's
 * debits of that transaction type plus its pending holds. Fails closed: no schedule, no allow.
 * Periods are UTC calendar days and months.
 */
import { Type } from '@sinclair/typebox';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { AppError } from '../../shared/errors.ts';
import { requireAccount } from './accounts.ts';
import { amountOf } from './commands.ts';
import { authed, errors, readHeaders, type LedgerRouteDeps } from './http.ts';
import { fromDb, format } from '../../shared/money.ts';
import { displayDecimals } from './currency.ts';
import { Amount, Currency, Uuid } from './schemas.ts';
import { declared } from '../http/declared.ts';

const CheckBody = Type.Object(
  {
    account_id: Uuid,
    action: Type.String({
      pattern: '^[A-Z][A-Z0-9_]{1,39}$',
      description: 'Transaction type, e.g. TRANSFER',
    }),
    amount: Amount,
    currency: Type.Optional(Currency),
  },
  { additionalProperties: false },
);

const Check = Type.Object({
  period: Type.String(),
  max_amount: Type.Union([Amount, Type.Null()]),
  max_count: Type.Union([Type.Integer(), Type.Null()]),
  used_amount: Amount,
  used_count: Type.Integer(),
  remaining_amount: Type.Union([Amount, Type.Null()]),
  remaining_count: Type.Union([Type.Integer(), Type.Null()]),
  allowed: Type.Boolean(),
});
const LimitCheckResponse = Type.Object({
  allowed: Type.Boolean(),
  reason: Type.Union([Type.String(), Type.Null()]),
  account_id: Type.String(),
  product_code: Type.String(),
  action: Type.String(),
  currency: Type.String(),
  amount: Amount,
  checks: Type.Array(Check),
});

function periodStart(period: string, now: Date): Date | undefined {
  if (period === 'day') return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()));
  if (period === 'month') return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
  return undefined;
}

export function limitRoutes(deps: LedgerRouteDeps): RouteSpec[] {
  return [
    defineRoute({
      ...declared('POST', '/v1/core/limits/check'),
      operationId: 'checkLimits',
      tags: ['core.limits'],
      summary: "Check an amount against the account product's limits (per transaction, day, month)",
      headers: readHeaders,
      body: CheckBody,
      responses: {
        200: { description: 'LimitCheckResponse', schema: LimitCheckResponse },
        ...errors({ 404: 'ACCOUNT_NOT_FOUND', 422: 'INVALID_AMOUNT, CURRENCY_MISMATCH' }),
      },
      handler: async (ctx) => {
        const p = await authed(deps, ctx, 'core:read');
        const account = await requireAccount(deps.db, p.tenantId, ctx.body.account_id);
        if (ctx.body.currency !== undefined && ctx.body.currency !== account.currency) {
          throw new AppError('CURRENCY_MISMATCH', `account ${account.id} holds ${account.currency}`);
        }
        const minor = displayDecimals(account.currency);
        const amount = amountOf(ctx.body.amount, account.currency, 'amount');
        const { rows } = await deps.db.query<{
          period: string;
          max_amount: string | null;
          max_count: number | null;
        }>(
          `SELECT period, max_amount, max_count FROM ledger_limit_rows
          WHERE tenant_id = $1 AND product_code = $2 AND action = $3 AND currency = $4 AND active
          ORDER BY CASE period WHEN 'transaction' THEN 0 WHEN 'day' THEN 1 ELSE 2 END`,
          [p.tenantId, account.product_code, ctx.body.action, account.currency],
        );
        const now = new Date(deps.now());
        const checks = [];
        for (const r of rows) {
          const since = periodStart(r.period, now);
          let used = 0n;
          let count = 0;
          if (since) {
            const { rows: u } = await deps.db.query<{ amount: string; n: string }>(
              `SELECT coalesce(sum(amount), 0)::text AS amount, count(*)::text AS n FROM (
               SELECT e.amount FROM ledger_entries e JOIN ledger_postings lp ON lp.tenant_id = e.tenant_id AND lp.id = e.posting_id
                WHERE e.tenant_id = $1 AND e.account_id = $2 AND e.side = 'debit' AND lp.type_code = $3 AND e.created_at >= $4
               UNION ALL
               SELECT h.amount FROM ledger_holds h JOIN ledger_transactions t ON t.tenant_id = h.tenant_id AND t.id = h.transaction_id
                WHERE h.tenant_id = $1 AND h.debit_account_id = $2 AND h.status = 'pending' AND t.type_code = $3 AND h.created_at >= $4) x`,
              [p.tenantId, account.id, ctx.body.action, since],
            );
            used = fromDb(u[0]?.amount ?? '0');
            count = Number(u[0]?.n ?? '0');
          }
          const max = r.max_amount === null ? null : fromDb(r.max_amount);
          const okAmount = max === null || used + amount <= max;
          const okCount = r.max_count === null || count + 1 <= r.max_count;
          checks.push({
            period: r.period,
            max_amount: max === null ? null : format(max, minor),
            max_count: r.max_count,
            used_amount: format(used, minor),
            used_count: count,
            remaining_amount: max === null ? null : format(max - used > 0n ? max - used : 0n, minor),
            remaining_count: r.max_count === null ? null : Math.max(r.max_count - count, 0),
            allowed: okAmount && okCount,
          });
        }
        const allowed = checks.length > 0 && checks.every((c) => c.allowed);
        return {
          status: 200,
          body: {
            allowed,
            reason: checks.length === 0 ? 'NO_LIMIT_SCHEDULE' : allowed ? null : 'LIMIT_EXCEEDED',
            account_id: account.id,
            product_code: account.product_code,
            action: ctx.body.action,
            currency: account.currency,
            amount: format(amount, minor),
            checks,
          },
        };
      },
    }),
  ];
}
