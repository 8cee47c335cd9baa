/** /v1/core/holds: reserve, capture (full or partial), void; expiry runs in the background. */
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { AppError } from '../../shared/errors.ts';
import { toReply } from '../idempotency/idempotency.ts';
import { validate } from '../http/validate.ts';
import { authed, errors, readHeaders, writeCtx, writeHeaders, type LedgerRouteDeps } from './http.ts';
import { holdView } from './render.ts';
import { CaptureHold, CreateHold, Hold, IdParams } from './schemas.ts';
import { declared } from '../http/declared.ts';

const tags = ['core.holds'];

export function holdRoutes(deps: LedgerRouteDeps): RouteSpec[] {
  return [
    defineRoute({
      ...declared('POST', '/v1/core/holds'),
      operationId: 'createHold',
      tags,
      summary: 'Hold an amount on the debit account for a later capture to the credit account',
      headers: writeHeaders,
      body: CreateHold,
      responses: {
        201: { description: 'Hold', schema: Hold },
        ...errors({
          404: 'ACCOUNT_NOT_FOUND',
          409: 'IDEMPOTENCY_CONFLICT',
          422: 'UNKNOWN_CURRENCY, INVALID_AMOUNT, SAME_ACCOUNT, ACCOUNT_CLOSED, CURRENCY_MISMATCH, INSUFFICIENT_FUNDS',
        }),
      },
      handler: async (ctx) => toReply(await deps.ledger.hold(await writeCtx(deps, ctx), ctx.body)),
    }),
    defineRoute({
      ...declared('GET', '/v1/core/holds/{id}'),
      operationId: 'getHold',
      tags,
      summary: 'Get a hold',
      headers: readHeaders,
      params: IdParams,
      responses: { 200: { description: 'Hold', schema: Hold }, ...errors({ 404: 'HOLD_NOT_FOUND' }) },
      handler: async (ctx) => {
        const p = await authed(deps, ctx, 'core:read');
        const { rows } = await deps.db.query<{ h: Record<string, unknown> | null }>(
          'SELECT ledger_hold_json($1, $2) AS h',
          [p.tenantId, ctx.params.id.toLowerCase()],
        );
        const h = rows[0]?.h;
        if (!h) throw new AppError('HOLD_NOT_FOUND', `hold ${ctx.params.id} not found`);
        return { status: 200, body: holdView(h) };
      },
    }),
    defineRoute({
      ...declared('POST', '/v1/core/holds/{id}/capture'),
      operationId: 'captureHold',
      tags,
      summary: 'Capture a pending hold in full or in part (the rest is released)',
      headers: writeHeaders,
      params: IdParams,
      bodyKind: 'json',
      responses: {
        200: { description: 'Hold (captured)', schema: Hold },
        ...errors({
          404: 'HOLD_NOT_FOUND',
          409: 'HOLD_NOT_PENDING, HOLD_EXPIRED, IDEMPOTENCY_CONFLICT',
          422: 'INVALID_AMOUNT, CAPTURE_EXCEEDS_HOLD',
          429: 'BUDGET_EXCEEDED (API key daily amount)',
        }),
      },
      handler: async (ctx) => {
        const w = await writeCtx(deps, ctx);
        const body = validate(CaptureHold, ctx.body ?? {}, 'body');
        return toReply(await deps.ledger.capture(w, ctx.params.id, body));
      },
    }),
    defineRoute({
      ...declared('POST', '/v1/core/holds/{id}/void'),
      operationId: 'voidHold',
      tags,
      summary: 'Void a pending hold',
      headers: writeHeaders,
      params: IdParams,
      bodyKind: 'json',
      responses: {
        200: { description: 'Hold (voided)', schema: Hold },
        ...errors({ 404: 'HOLD_NOT_FOUND', 409: 'HOLD_NOT_PENDING, HOLD_EXPIRED, IDEMPOTENCY_CONFLICT' }),
      },
      handler: async (ctx) => toReply(await deps.ledger.void(await writeCtx(deps, ctx), ctx.params.id)),
    }),
  ];
}
