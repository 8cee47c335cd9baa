/**
 * analytics.aggregate (issue 20 item 4): aggregates only. A group is answered only when at
 * least `minGroupSize` distinct customers are in it (smaller groups are suppressed, and a
 * question whose whole population is smaller is refused), so no answer describes a handful of
 * people. Any request for rows (a customer, account or transfer id, `raw`) is refused:
 * aggregation is a resource type of its own and this route has no row view at all.
 */
import { Type } from '@sinclair/typebox';
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { format, fromDb } from '../../shared/money.ts';

/** Issue 20: never over fewer than 10 customers. */
export const minGroupSize = 10;

export const AggregateQuery = Type.Object({
  metric: Type.Union([Type.Literal('transfers')], {
    description: 'what is counted: posted customer transfers',
  }),
  groupBy: Type.Optional(Type.Union([Type.Literal('currency'), Type.Literal('day'), Type.Literal('none')])),
  from: Type.Optional(Type.String({ format: 'date-time' })),
  to: Type.Optional(Type.String({ format: 'date-time' })),
});
export const AggregateResult = Type.Object({
  metric: Type.String(),
  group_by: Type.String(),
  min_group_size: Type.Integer(),
  groups: Type.Array(
    Type.Object({
      key: Type.String(),
      currency: Type.String(),
      customers: Type.Integer(),
      count: Type.Integer(),
      total: Type.String(),
    }),
  ),
  suppressed_groups: Type.Integer({
    description: 'groups left out because fewer than min_group_size customers are in them',
  }),
});

/** Query parameters that ask for rows rather than aggregates. */
const rowParameters = [
  'raw',
  'rows',
  'customerId',
  'customer_id',
  'accountId',
  'account_id',
  'transferId',
  'id',
  'phone',
  'fields',
];

/** Refuse a raw-row request by name before the schema's generic refusal, with a clear code. */
export function refuseRawRows(url: string): void {
  const params = new URL(url, 'http://x').searchParams;
  const asked = rowParameters.filter((p) => params.has(p));
  if (asked.length > 0)
    throw new AppError(
      'RAW_ROWS_DENIED',
      `analytics answers aggregates only; row parameters refused: ${asked.join(', ')}`,
    );
}

interface Row {
  key: string;
  currency: string;
  customers: string;
  n: string;
  total: string;
}

export async function aggregate(
  q: Queryable,
  tenantId: string,
  query: { groupBy?: string; from?: string; to?: string },
) {
  const groupBy = query.groupBy ?? 'currency';
  const keyExpr =
    groupBy === 'day'
      ? `to_char(t.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')`
      : groupBy === 'none'
        ? `'all'`
        : 't.currency';
  // Customers on either side of a transfer count towards a group's size.
  const { rows } = await q.query<Row>(
    `SELECT ${keyExpr} AS key, t.currency,
            (SELECT count(DISTINCT x) FROM unnest(array_agg(t.payer_customer_id) || array_agg(t.payee_customer_id)) x)::text AS customers,
            count(*)::text AS n, coalesce(sum(t.amount), 0)::text AS total
       FROM transfers t
      WHERE t.tenant_id = $1 AND t.status = 'POSTED'
        AND ($2::timestamptz IS NULL OR t.created_at >= $2) AND ($3::timestamptz IS NULL OR t.created_at < $3)
      GROUP BY 1, 2 ORDER BY 1, 2`,
    [tenantId, query.from ?? null, query.to ?? null],
  );
  const shown = rows.filter((r) => Number(r.customers) >= minGroupSize);
  const { rows: pop } = await q.query<{ n: string }>(
    `SELECT count(DISTINCT x)::text AS n FROM transfers t, unnest(ARRAY[t.payer_customer_id, t.payee_customer_id]) x
      WHERE t.tenant_id = $1 AND t.status = 'POSTED' AND ($2::timestamptz IS NULL OR t.created_at >= $2) AND ($3::timestamptz IS NULL OR t.created_at < $3)`,
    [tenantId, query.from ?? null, query.to ?? null],
  );
  if (Number(pop[0]?.n ?? 0) < minGroupSize)
    throw new AppError(
      'GROUP_TOO_SMALL',
      `fewer than ${minGroupSize} customers match: no aggregate is answered`,
    );
  return {
    metric: 'transfers',
    group_by: groupBy,
    min_group_size: minGroupSize,
    groups: shown.map((r) => ({
      key: r.key,
      currency: r.currency,
      customers: Number(r.customers),
      count: Number(r.n),
      total: format(fromDb(r.total)),
    })),
    suppressed_groups: rows.length - shown.length,
  };
}
