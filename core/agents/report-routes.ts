/** /v1/reports/* (SPEC 4.5 reports group): end of day, close, transaction report (JSON or CSV), float report. */
import { Type } from '@sinclair/typebox';
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { idempotencyHeader } from '../idempotency/idempotency.ts';
import { balanceOf, balanceView, idempotent } from './books.ts';
import { cursorParam, cursorsOf, LegacyNextCursor, NextCursor, withLegacyName } from '../http/cursor.ts';
import { agentCaller, businessDate, type AgentDeps } from './context.ts';
import { instructionView, type InstructionRow } from './float.ts';
import { agentRow, closeDay, eodSummary } from './reports.ts';
import { txnView, type TxnRow } from './txns.ts';
import { declared } from '../http/declared.ts';

const tags = ['agent-reports'];
const auth = { name: 'Authorization', required: true, description: 'Bearer <agent access token>' };
const Day = Type.String({ format: 'date', description: 'Business date YYYY-MM-DD (UTC); default today' });
const Summary = Type.Record(Type.String(), Type.Unknown(), {
  description:
    'EOD summary: transactions by type, float and commission wallets (opening, movements, closing, reconciled), closed, closedAt',
});
/** A report spans at most this many days; CSV exports at most this many rows. */
export const reportMaxDays = 31;
export const csvMaxRows = 10_000;
const Kind = Type.Union([Type.Literal('CASHIN'), Type.Literal('CASHOUT'), Type.Literal('P2P')]);
const State = Type.Union(
  ['INITIATED', 'AWAITING_CUSTOMER', 'POSTED', 'REVERSED', 'FAILED', 'EXPIRED'].map((s) => Type.Literal(s)),
);
const TxnQuery = Type.Object(
  {
    from: Type.Optional(Day),
    to: Type.Optional(Day),
    kind: Type.Optional(Kind),
    state: Type.Optional(State),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 500 })),
    cursor: Type.Optional(cursorParam),
  },
  { additionalProperties: false },
);
const RangeQuery = Type.Object(
  { from: Type.Optional(Day), to: Type.Optional(Day) },
  { additionalProperties: false },
);

function range(from: string | undefined, to: string | undefined, now: number): { from: string; to: string } {
  const t = to ?? businessDate(now);
  const f = from ?? t;
  if (f > t) throw new AppError('VALIDATION_FAILED', '`from` is after `to`');
  if ((Date.parse(t) - Date.parse(f)) / 86_400_000 >= reportMaxDays)
    throw new AppError('VALIDATION_FAILED', `a report spans at most ${reportMaxDays} days`);
  return { from: f, to: t };
}

const txnCols = `id, kind, state, agent_id, customer_id, counterparty_id, currency, amount, fee, commission, to_char(business_date, 'YYYY-MM-DD') AS business_date,
  posting_id, commission_posting_id, reversal_posting_id, failure_code, expires_at, created_at, updated_at, posted_at, reversed_at`;

async function txnRows(
  q: Queryable,
  tenantId: string,
  agentId: string,
  f: { from: string; to: string; kind?: string | undefined; state?: string | undefined },
  after: string | undefined,
  limit: number,
): Promise<TxnRow[]> {
  const { rows } = await q.query<TxnRow>(
    `SELECT ${txnCols} FROM agent_txns WHERE tenant_id = $1 AND agent_id = $2 AND business_date BETWEEN $3::date AND $4::date
        AND ($5::text IS NULL OR kind = $5) AND ($6::text IS NULL OR state = $6) AND ($7::uuid IS NULL OR id > $7) ORDER BY id LIMIT $8`,
    [tenantId, agentId, f.from, f.to, f.kind ?? null, f.state ?? null, after ?? null, limit],
  );
  return rows;
}

const csvColumns = [
  'id',
  'businessDate',
  'kind',
  'state',
  'currency',
  'amount',
  'fee',
  'commission',
  'customerId',
  'counterpartyId',
  'postingId',
  'reversalPostingId',
  'failureCode',
  'createdAt',
  'postedAt',
  'reversedAt',
];

/** RFC 4180: quote every field that needs it; a leading =+-@ is prefixed so spreadsheets do not run it. */
function csvField(v: unknown): string {
  let s = v === null || v === undefined ? '' : String(v);
  if (/^[=+\-@]/.test(s) && !/^-?[0-9.]+$/.test(s)) s = `'${s}`;
  return /[",\r\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}

function agentEodReport(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('GET', '/v1/reports/eod'),
    operationId: 'agentEodReport',
    tags,
    headers: [auth],
    query: Type.Object({ date: Type.Optional(Day) }, { additionalProperties: false }),
    summary:
      'End-of-day summary of the period ending `date`: counts and amounts by type, opening and closing float, commissions (the stored summary once closed)',
    responses: { 200: { description: 'Summary', schema: Summary } },
    handler: async (ctx) => {
      const c = await agentCaller(deps, ctx);
      const now = deps.now();
      return {
        status: 200,
        body: await eodSummary(deps.db, c.tenantId, c.agentId, ctx.query.date ?? businessDate(now), now),
      };
    },
  });
}

function agentEodClose(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('POST', '/v1/reports/eod/close'),
    operationId: 'agentEodClose',
    tags,
    headers: [auth, idempotencyHeader],
    body: Type.Object({ date: Type.Optional(Day) }, { additionalProperties: false }),
    summary:
      'Close the business day (and every earlier open one): the summary is frozen, the day takes no new or backdated transaction (409 DAY_ALREADY_CLOSED)',
    responses: { 201: { description: 'Closed summary', schema: Summary } },
    handler: async (ctx) => {
      const c = await agentCaller(deps, ctx);
      return idempotent(deps, ctx, c, async (q) => {
        const now = deps.now();
        return {
          status: 201,
          body: await closeDay(q, c, ctx.body.date ?? businessDate(now), ctx.requestId, now),
        };
      });
    },
  });
}

function agentTxnReport(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('GET', '/v1/reports/txns'),
    operationId: 'agentTxnReport',
    tags,
    query: TxnQuery,
    headers: [
      auth,
      {
        name: 'Accept',
        required: false,
        description: '`text/csv` for a CSV export (at most 10,000 rows, no paging); JSON otherwise',
      },
    ],
    summary:
      "The calling agent's transactions by business date (default today), filtered by kind and state; JSON pages or CSV",
    responses: {
      200: {
        description: 'Transactions',
        schema: Type.Object({
          items: Type.Array(Type.Record(Type.String(), Type.Unknown())),
          next_cursor: NextCursor,
          nextCursor: LegacyNextCursor,
        }),
        alternatives: ['text/csv'],
      },
    },
    handler: async (ctx) => {
      const c = await agentCaller(deps, ctx);
      const f = {
        ...range(ctx.query.from, ctx.query.to, deps.now()),
        kind: ctx.query.kind,
        state: ctx.query.state,
      };
      if ((ctx.headers.accept ?? '').includes('text/csv')) {
        const rows = await txnRows(deps.db, c.tenantId, c.agentId, f, undefined, csvMaxRows);
        const lines = [
          csvColumns.join(','),
          ...rows.map((r) => {
            const v = txnView(r);
            return csvColumns.map((k) => csvField(v[k])).join(',');
          }),
        ];
        return {
          status: 200,
          raw: { contentType: 'text/csv; charset=utf-8', data: `${lines.join('\r\n')}\r\n` },
          headers: { 'content-disposition': `attachment; filename="txns-${f.from}-${f.to}.csv"` },
        };
      }
      const page = await cursorsOf(deps.db, deps.keys).open(ctx, `${c.tenantId}/agent:${c.agentId}`, 1, 100);
      const after = page.after === undefined ? undefined : String(page.after[0]);
      const rows = await txnRows(deps.db, c.tenantId, c.agentId, f, after, page.limit + 1);
      const { items, next_cursor } = page.finish(rows, (r) => [r.id]);
      return { status: 200, body: withLegacyName({ items: items.map(txnView), next_cursor }) };
    },
  });
}

function agentFloatReport(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('GET', '/v1/reports/float'),
    operationId: 'agentFloatReport',
    tags,
    headers: [auth],
    query: RangeQuery,
    summary:
      'Float over a date range: balance now, each closed period (opening, movements, closing), float instructions created in the range',
    responses: { 200: { description: 'Float report', schema: Type.Record(Type.String(), Type.Unknown()) } },
    handler: async (ctx) => {
      const c = await agentCaller(deps, ctx);
      const now = deps.now();
      const f = range(ctx.query.from, ctx.query.to, now);
      const a = await agentRow(deps.db, c.tenantId, c.agentId);
      const { rows: closed } = await deps.db.query<{
        business_date: string;
        float: unknown;
        closed_at: Date;
      }>(
        `SELECT to_char(business_date, 'YYYY-MM-DD') AS business_date, summary->'float' AS float, closed_at FROM agent_eod_closes
            WHERE tenant_id = $1 AND agent_id = $2 AND business_date BETWEEN $3::date AND $4::date ORDER BY business_date`,
        [c.tenantId, c.agentId, f.from, f.to],
      );
      const { rows: instr } = await deps.db.query<InstructionRow>(
        `SELECT id, agent_id, kind, state, amount, currency, reference, posting_id, hold_id, history, created_at, updated_at FROM agent_float_instructions
            WHERE tenant_id = $1 AND agent_id = $2 AND created_at >= $3::date AND created_at < $4::date + 1 ORDER BY created_at`,
        [c.tenantId, c.agentId, f.from, f.to],
      );
      return {
        status: 200,
        body: {
          agentId: c.agentId,
          accountId: a.float_account_id,
          currency: a.currency,
          from: f.from,
          to: f.to,
          now: balanceView(await balanceOf(deps.db, c.tenantId, a.float_account_id), a.currency),
          closedPeriods: closed.map((r) => ({
            businessDate: r.business_date,
            closedAt: r.closed_at.toISOString(),
            float: r.float,
          })),
          instructions: instr.map(instructionView),
        },
      };
    },
  });
}

export function reportRoutes(deps: AgentDeps): RouteSpec[] {
  return [agentEodReport(deps), agentEodClose(deps), agentTxnReport(deps), agentFloatReport(deps)];
}
