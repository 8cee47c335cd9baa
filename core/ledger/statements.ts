/**
 * POST /v1/core/statements: opening balance, the period's entries with a running balance,
 * closing balance. JSON by default; CSV when the client sends `Accept: text/csv`.
 * Balances are credit-normal (credits − debits), the same as GET .../balances `posted`.
 */
import { type Static, Type } from '@sinclair/typebox';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { AppError } from '../../shared/errors.ts';
import { requireAccount } from './accounts.ts';
import { displayDecimals } from './currency.ts';
import { authed, errors, readHeaders, type LedgerRouteDeps } from './http.ts';
import { format, fromDb } from '../../shared/money.ts';
import { Amount, Uuid } from './schemas.ts';
import { declared } from '../http/declared.ts';

/** Longest period one statement covers, and most entries it lists. */
export const maxStatementDays = 366;
export const maxStatementEntries = 10_000;

const StatementRequest = Type.Object(
  {
    account_id: Uuid,
    from: Type.String({ maxLength: 40, description: 'Inclusive start, ISO 8601 date-time' }),
    to: Type.String({ maxLength: 40, description: 'Exclusive end, ISO 8601 date-time' }),
  },
  { additionalProperties: false },
);

const StatementLine = Type.Object({
  posting_id: Type.String(),
  leg: Type.Integer(),
  created_at: Type.String(),
  type: Type.String(),
  description: Type.Union([Type.String(), Type.Null()]),
  side: Type.String(),
  amount: Amount,
  balance: Amount,
});
const Statement = Type.Object({
  account_id: Type.String(),
  currency: Type.String(),
  from: Type.String(),
  to: Type.String(),
  opening_balance: Amount,
  closing_balance: Amount,
  entries: Type.Array(StatementLine),
});

function parseInstant(text: string, field: string): Date {
  const d = new Date(text);
  if (!/^\d{4}-\d{2}-\d{2}T/.test(text) || Number.isNaN(d.getTime()))
    throw new AppError('INVALID_PERIOD', `${field} is not an ISO 8601 timestamp`);
  return d;
}

function csvField(v: string): string {
  return /[",\n\r]/.test(v) ? `"${v.replaceAll('"', '""')}"` : v;
}

/** The opening sum and the period's lines (one more than the cap), read in one snapshot. */
function readPeriod(deps: LedgerRouteDeps, tenantId: string, accountId: string, from: Date, to: Date) {
  return deps.db.tx(
    async (client) => {
      const { rows: o } = await client.query<{ net: string }>(
        `SELECT coalesce(sum(CASE side WHEN 'credit' THEN amount ELSE -amount END), 0)::text AS net
             FROM ledger_entries WHERE tenant_id = $1 AND account_id = $2 AND created_at < $3`,
        [tenantId, accountId, from],
      );
      const { rows } = await client.query<{
        posting_id: string;
        leg: number;
        created_at: Date;
        type_code: string;
        description: string | null;
        side: string;
        amount: string;
      }>(
        `SELECT e.posting_id, e.leg, e.created_at, lp.type_code, lp.description, e.side, e.amount::text AS amount
             FROM ledger_entries e JOIN ledger_postings lp ON lp.tenant_id = e.tenant_id AND lp.id = e.posting_id
            WHERE e.tenant_id = $1 AND e.account_id = $2 AND e.created_at >= $3 AND e.created_at < $4
            ORDER BY e.seq LIMIT $5`,
        [tenantId, accountId, from, to, maxStatementEntries + 1],
      );
      return { opening: fromDb(o[0]?.net ?? '0'), lines: rows };
    },
    { isolation: 'repeatable read' },
  );
}

/** The statement as CSV rows: the opening line, one row per entry, the closing line. */
function statementCsv(body: {
  from: string;
  to: string;
  opening_balance: string;
  closing_balance: string;
  entries: Static<typeof StatementLine>[];
}): string {
  const { entries } = body;
  return [
    'date,posting_id,leg,type,description,debit,credit,balance',
    `${body.from},,,OPENING,Opening balance,,,${body.opening_balance}`,
    ...entries.map((e) =>
      [
        e.created_at,
        e.posting_id,
        String(e.leg),
        e.type,
        e.description ?? '',
        e.side === 'debit' ? e.amount : '',
        e.side === 'credit' ? e.amount : '',
        e.balance,
      ]
        .map(csvField)
        .join(','),
    ),
    `${body.to},,,CLOSING,Closing balance,,,${body.closing_balance}`,
  ].join('\r\n');
}

export function statementRoutes(deps: LedgerRouteDeps): RouteSpec[] {
  return [
    defineRoute({
      ...declared('POST', '/v1/core/statements'),
      operationId: 'generateStatement',
      tags: ['core.statements'],
      summary: 'Generate an account statement (JSON, or CSV with Accept: text/csv)',
      headers: readHeaders,
      body: StatementRequest,
      responses: {
        200: {
          description: 'Statement (JSON; text/csv when asked)',
          schema: Statement,
          alternatives: ['text/csv'],
        },
        ...errors({ 404: 'ACCOUNT_NOT_FOUND', 422: 'INVALID_PERIOD' }),
      },
      handler: async (ctx) => {
        const p = await authed(deps, ctx, 'core:read');
        const from = parseInstant(ctx.body.from, 'from');
        const to = parseInstant(ctx.body.to, 'to');
        if (to <= from) throw new AppError('INVALID_PERIOD', 'to must be after from');
        if (to.getTime() - from.getTime() > maxStatementDays * 86_400_000)
          throw new AppError('INVALID_PERIOD', `a statement covers at most ${maxStatementDays} days`);
        const account = await requireAccount(deps.db, p.tenantId, ctx.body.account_id);
        const minor = displayDecimals(account.currency);
        // One snapshot for the opening sum and the lines, so closing = opening + lines exactly.
        const { opening, lines } = await readPeriod(deps, p.tenantId, account.id, from, to);
        if (lines.length > maxStatementEntries)
          throw new AppError('INVALID_PERIOD', `more than ${maxStatementEntries} entries; narrow the period`);
        let balance = opening;
        const entries = lines.map((l) => {
          const amount = fromDb(l.amount);
          balance += l.side === 'credit' ? amount : -amount;
          return {
            posting_id: l.posting_id,
            leg: l.leg,
            created_at: l.created_at.toISOString(),
            type: l.type_code,
            description: l.description,
            side: l.side,
            amount: format(amount, minor),
            balance: format(balance, minor),
          };
        });
        const body = {
          account_id: account.id,
          currency: account.currency,
          from: from.toISOString(),
          to: to.toISOString(),
          opening_balance: format(opening, minor),
          closing_balance: format(balance, minor),
          entries,
        };
        if (!(ctx.headers.accept ?? '').toLowerCase().includes('text/csv')) return { status: 200, body };
        const csv = statementCsv(body);
        return { status: 200, raw: { contentType: 'text/csv; charset=utf-8', data: `${csv}\r\n` } };
      },
    }),
  ];
}
