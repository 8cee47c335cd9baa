/** /v1/core/postings: create (double entry, any number of legs), read, reverse. */
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { AppError } from '../../shared/errors.ts';
import { toReply } from '../idempotency/idempotency.ts';
import { validate } from '../http/validate.ts';
import { authed, errors, readHeaders, writeCtx, writeHeaders, type LedgerRouteDeps } from './http.ts';
import { postingView } from './render.ts';
import { CreatePosting, IdParams, Posting, ReversePosting } from './schemas.ts';
import type { Queryable } from '../../shared/db/pool.ts';
import { declared } from '../http/declared.ts';

const tags = ['core.postings'];

/** A posting with its legs, or undefined (tenant-scoped). */
export async function getPosting(
  q: Queryable,
  tenantId: string,
  id: string,
): Promise<ReturnType<typeof postingView> | undefined> {
  const { rows } = await q.query<{ p: Record<string, unknown> }>(
    `SELECT jsonb_build_object('id', p.id, 'transaction_id', p.transaction_id, 'kind', p.kind, 'type', p.type_code,
       'currency', p.currency, 'description', p.description, 'metadata', p.metadata, 'reverses_posting_id', p.reverses_posting_id,
       'hold_id', p.hold_id, 'created_at', ledger_ts(p.created_at),
       'entries', (SELECT jsonb_agg(jsonb_build_object('account_id', e.account_id, 'side', e.side, 'amount', e.amount::text,
                   'currency', e.currency) ORDER BY e.leg) FROM ledger_entries e WHERE e.tenant_id = p.tenant_id AND e.posting_id = p.id)) AS p
       FROM ledger_postings p WHERE p.tenant_id = $1 AND p.id = $2`,
    [tenantId, id.toLowerCase()],
  );
  return rows[0] ? postingView(rows[0].p) : undefined;
}

export function postingRoutes(deps: LedgerRouteDeps): RouteSpec[] {
  return [
    defineRoute({
      ...declared('POST', '/v1/core/postings'),
      operationId: 'createPosting',
      tags,
      summary: 'Create a double-entry posting (per currency, debits = credits)',
      headers: writeHeaders,
      body: CreatePosting,
      responses: {
        201: { description: 'Posting', schema: Posting },
        ...errors({
          404: 'ACCOUNT_NOT_FOUND',
          409: 'IDEMPOTENCY_CONFLICT',
          422: 'UNKNOWN_CURRENCY, INVALID_AMOUNT, TOO_FEW_ENTRIES, UNBALANCED_POSTING, UNKNOWN_TRANSACTION_TYPE, ACCOUNT_CLOSED, CURRENCY_MISMATCH, INSUFFICIENT_FUNDS',
          503: 'Ledger overloaded',
        }),
      },
      handler: async (ctx) => toReply(await deps.ledger.post(await writeCtx(deps, ctx), ctx.body)),
    }),
    defineRoute({
      ...declared('GET', '/v1/core/postings/{id}'),
      operationId: 'getPosting',
      tags,
      summary: 'Get a posting with its entries',
      headers: readHeaders,
      params: IdParams,
      responses: {
        200: { description: 'Posting', schema: Posting },
        ...errors({ 404: 'POSTING_NOT_FOUND' }),
      },
      handler: async (ctx) => {
        const p = await authed(deps, ctx, 'core:read');
        const posting = await getPosting(deps.db, p.tenantId, ctx.params.id);
        if (!posting) throw new AppError('POSTING_NOT_FOUND', `posting ${ctx.params.id} not found`);
        return { status: 200, body: posting };
      },
    }),
    defineRoute({
      ...declared('POST', '/v1/core/postings/{id}/reverse'),
      operationId: 'reversePosting',
      tags,
      summary: 'Reverse a posting: a new posting with inverse entries, at most once',
      headers: writeHeaders,
      params: IdParams,
      bodyKind: 'json',
      responses: {
        201: { description: 'The reversing posting', schema: Posting },
        ...errors({
          404: 'POSTING_NOT_FOUND',
          409: 'POSTING_ALREADY_REVERSED, IDEMPOTENCY_CONFLICT',
          422: 'POSTING_NOT_REVERSIBLE, ACCOUNT_CLOSED, INSUFFICIENT_FUNDS',
          429: 'BUDGET_EXCEEDED (API key daily amount)',
        }),
      },
      handler: async (ctx) => {
        const w = await writeCtx(deps, ctx);
        const body = validate(ReversePosting, ctx.body ?? {}, 'body');
        return toReply(await deps.ledger.reverse(w, ctx.params.id, body));
      },
    }),
  ];
}
