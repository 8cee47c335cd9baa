/** Savings products and overdraft lines (SPEC 2.1 names SavingsProduct, OverdraftLine). */
import { Type } from '@sinclair/typebox';
import type { Queryable } from '../../shared/db/pool.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { AppError } from '../../shared/errors.ts';
import { enqueue } from '../outbox/outbox.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { getBalances, requireAccount } from './accounts.ts';
import { amountOf, knownCurrency } from './commands.ts';
import { displayDecimals } from './currency.ts';
import {
  authed,
  errors,
  idempotentWrite,
  readHeaders,
  writeCtx,
  writeHeaders,
  type LedgerRouteDeps,
} from './http.ts';
import { format, fromDb, toDb } from '../../shared/money.ts';
import { Amount, Currency, IdParams, Uuid } from './schemas.ts';
import { declared } from '../http/declared.ts';

const Code = Type.String({ pattern: '^[A-Z][A-Z0-9_]{1,39}$' });
const CreateSavingsProduct = Type.Object(
  {
    code: Code,
    name: Type.String({ minLength: 1, maxLength: 120 }),
    currency: Currency,
    interest_rate_bps: Type.Integer({
      minimum: 0,
      maximum: 10_000,
      description: 'Annual rate in basis points',
    }),
    min_balance: Type.Optional(Amount),
  },
  { additionalProperties: false },
);
const SavingsProduct = Type.Object({
  code: Type.String(),
  name: Type.String(),
  currency: Type.String(),
  interest_rate_bps: Type.Integer(),
  min_balance: Amount,
  status: Type.String(),
  created_at: Type.String(),
});
const CreateOverdraftLine = Type.Object({ account_id: Uuid, limit: Amount }, { additionalProperties: false });
const OverdraftLine = Type.Object({
  id: Type.String(),
  account_id: Type.String(),
  currency: Type.String(),
  limit: Amount,
  status: Type.String(),
  created_at: Type.String(),
  closed_at: Type.Union([Type.String(), Type.Null()]),
});

interface ProductRow {
  code: string;
  name: string;
  currency: string;
  interest_rate_bps: number;
  min_balance: string;
  status: string;
  created_at: Date;
}
function productView(r: ProductRow) {
  return {
    code: r.code,
    name: r.name,
    currency: r.currency,
    interest_rate_bps: r.interest_rate_bps,
    min_balance: format(fromDb(r.min_balance), displayDecimals(r.currency)),
    status: r.status,
    created_at: r.created_at.toISOString(),
  };
}

interface LineRow {
  id: string;
  account_id: string;
  currency: string;
  limit_amount: string;
  status: string;
  created_at: Date;
  closed_at: Date | null;
}
async function getLine(q: Queryable, tenantId: string, id: string) {
  const { rows } = await q.query<LineRow>(
    `SELECT l.id, l.account_id, a.currency, l.limit_amount, l.status, l.created_at, l.closed_at FROM ledger_overdraft_lines l
       JOIN ledger_accounts a ON a.tenant_id = l.tenant_id AND a.id = l.account_id WHERE l.tenant_id = $1 AND l.id = $2`,
    [tenantId, id.toLowerCase()],
  );
  const r = rows[0];
  if (!r) throw new AppError('OVERDRAFT_LINE_NOT_FOUND', `overdraft line ${id} not found`);
  return {
    id: r.id,
    account_id: r.account_id,
    currency: r.currency,
    limit: format(fromDb(r.limit_amount), displayDecimals(r.currency)),
    status: r.status,
    created_at: r.created_at.toISOString(),
    closed_at: r.closed_at?.toISOString() ?? null,
  };
}

/** POST /v1/core/savings-products. */
const createSavingsProduct = (deps: LedgerRouteDeps) =>
  defineRoute({
    ...declared('POST', '/v1/core/savings-products'),
    operationId: 'createSavingsProduct',
    tags: ['core.products'],
    summary: 'Define a savings product',
    headers: writeHeaders,
    body: CreateSavingsProduct,
    responses: {
      201: { description: 'SavingsProduct', schema: SavingsProduct },
      ...errors({
        409: 'SAVINGS_PRODUCT_EXISTS, IDEMPOTENCY_CONFLICT',
        422: 'UNKNOWN_CURRENCY, INVALID_AMOUNT',
      }),
    },
    handler: async (ctx) => {
      const w = await writeCtx(deps, ctx);
      const b = ctx.body;
      const minBalance =
        b.min_balance === undefined
          ? 0n
          : amountOf(b.min_balance, b.currency, 'min_balance', { allowZero: true });
      knownCurrency(b.currency);
      return idempotentWrite(
        deps,
        w,
        { action: 'savings_product.create', targetType: 'savings_product' },
        async (client) => {
          const { rows } = await client.query<ProductRow>(
            `INSERT INTO ledger_savings_products (tenant_id, code, name, currency, interest_rate_bps, min_balance) VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT DO NOTHING RETURNING code, name, currency, interest_rate_bps, min_balance, status, created_at`,
            [w.principal.tenantId, b.code, b.name, b.currency, b.interest_rate_bps, toDb(minBalance)],
          );
          if (!rows[0])
            throw new AppError('SAVINGS_PRODUCT_EXISTS', `savings product ${b.code} already exists`);
          await enqueue(client, {
            tenantId: w.principal.tenantId,
            aggregate: 'savings_product',
            aggregateId: b.code,
            event: 'savings_product.created',
            payload: productView(rows[0]),
          });
          return { status: 201, body: productView(rows[0]) };
        },
      );
    },
  });

/** GET /v1/core/savings-products. */
const listSavingsProducts = (deps: LedgerRouteDeps) =>
  defineRoute({
    ...declared('GET', '/v1/core/savings-products'),
    operationId: 'listSavingsProducts',
    tags: ['core.products'],
    summary: 'List savings products',
    headers: readHeaders,
    responses: {
      200: { description: 'Savings products', schema: Type.Object({ items: Type.Array(SavingsProduct) }) },
      ...errors({}),
    },
    handler: async (ctx) => {
      const p = await authed(deps, ctx, 'core:read');
      const { rows } = await deps.db.query<ProductRow>(
        'SELECT code, name, currency, interest_rate_bps, min_balance, status, created_at FROM ledger_savings_products WHERE tenant_id = $1 ORDER BY code',
        [p.tenantId],
      );
      return { status: 200, body: { items: rows.map(productView) } };
    },
  });

/** POST /v1/core/overdraft-lines. */
const createOverdraftLine = (deps: LedgerRouteDeps) =>
  defineRoute({
    ...declared('POST', '/v1/core/overdraft-lines'),
    operationId: 'createOverdraftLine',
    tags: ['core.products'],
    summary: 'Open an overdraft line on an account (at most one active)',
    headers: writeHeaders,
    body: CreateOverdraftLine,
    responses: {
      201: { description: 'OverdraftLine', schema: OverdraftLine },
      ...errors({
        404: 'ACCOUNT_NOT_FOUND',
        409: 'OVERDRAFT_LINE_EXISTS',
        422: 'INVALID_AMOUNT, ACCOUNT_CLOSED',
      }),
    },
    handler: async (ctx) => {
      const w = await writeCtx(deps, ctx);
      const account = await requireAccount(deps.db, w.principal.tenantId, ctx.body.account_id);
      const limit = amountOf(ctx.body.limit, account.currency, 'limit');
      return idempotentWrite(
        deps,
        w,
        { action: 'overdraft_line.create', targetType: 'overdraft_line' },
        async (client) => {
          await getBalances(client, w.principal.tenantId, account.id, true);
          const a = await requireAccount(client, w.principal.tenantId, account.id);
          if (a.status !== 'active') throw new AppError('ACCOUNT_CLOSED', `account ${a.id} is closed`);
          const id = uuidv7(deps.now());
          const { rowCount } = await client.query(
            `INSERT INTO ledger_overdraft_lines (tenant_id, id, account_id, limit_amount) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
            [w.principal.tenantId, id, a.id, toDb(limit)],
          );
          if (rowCount === 0)
            throw new AppError(
              'OVERDRAFT_LINE_EXISTS',
              `account ${a.id} already has an active overdraft line`,
            );
          const line = await getLine(client, w.principal.tenantId, id);
          await enqueue(client, {
            tenantId: w.principal.tenantId,
            aggregate: 'overdraft_line',
            aggregateId: id,
            event: 'overdraft_line.created',
            payload: line,
          });
          return { status: 201, body: line };
        },
      );
    },
  });

/** GET /v1/core/overdraft-lines/{id}. */
const getOverdraftLine = (deps: LedgerRouteDeps) =>
  defineRoute({
    ...declared('GET', '/v1/core/overdraft-lines/{id}'),
    operationId: 'getOverdraftLine',
    tags: ['core.products'],
    summary: 'Get an overdraft line',
    headers: readHeaders,
    params: IdParams,
    responses: {
      200: { description: 'OverdraftLine', schema: OverdraftLine },
      ...errors({ 404: 'OVERDRAFT_LINE_NOT_FOUND' }),
    },
    handler: async (ctx) => {
      const p = await authed(deps, ctx, 'core:read');
      return { status: 200, body: await getLine(deps.db, p.tenantId, ctx.params.id) };
    },
  });

/** POST /v1/core/overdraft-lines/{id}/close. */
const closeOverdraftLine = (deps: LedgerRouteDeps) =>
  defineRoute({
    ...declared('POST', '/v1/core/overdraft-lines/{id}/close'),
    operationId: 'closeOverdraftLine',
    tags: ['core.products'],
    summary: 'Close an overdraft line that is not in use',
    headers: writeHeaders,
    params: IdParams,
    bodyKind: 'json',
    responses: {
      200: { description: 'OverdraftLine', schema: OverdraftLine },
      ...errors({ 404: 'OVERDRAFT_LINE_NOT_FOUND', 409: 'IDEMPOTENCY_CONFLICT', 422: 'OVERDRAFT_IN_USE' }),
    },
    handler: async (ctx) => {
      const w = await writeCtx(deps, ctx);
      const line = await getLine(deps.db, w.principal.tenantId, ctx.params.id);
      return idempotentWrite(
        deps,
        w,
        { action: 'overdraft_line.close', targetType: 'overdraft_line' },
        async (client) => {
          const b = await getBalances(client, w.principal.tenantId, line.account_id, true);
          if (!b) throw new AppError('ACCOUNT_NOT_FOUND', `account ${line.account_id} not found`);
          const current = await getLine(client, w.principal.tenantId, line.id);
          if (current.status === 'active') {
            const minor = displayDecimals(b.currency);
            const withoutLine =
              amountOf(b.available.replace('-', ''), b.currency, 'x', { allowZero: true }) *
                (b.available.startsWith('-') ? -1n : 1n) -
              amountOf(current.limit, b.currency, 'limit');
            if (withoutLine < 0n)
              throw new AppError(
                'OVERDRAFT_IN_USE',
                `the line is in use: available without it would be ${format(withoutLine, minor)}`,
              );
            await client.query(
              `UPDATE ledger_overdraft_lines SET status = 'closed', closed_at = now() WHERE tenant_id = $1 AND id = $2`,
              [w.principal.tenantId, line.id],
            );
            await enqueue(client, {
              tenantId: w.principal.tenantId,
              aggregate: 'overdraft_line',
              aggregateId: line.id,
              event: 'overdraft_line.closed',
              payload: { id: line.id },
            });
          }
          return { status: 200, body: await getLine(client, w.principal.tenantId, line.id) };
        },
      );
    },
  });

export function productRoutes(deps: LedgerRouteDeps): RouteSpec[] {
  return [
    createSavingsProduct(deps),
    listSavingsProducts(deps),
    createOverdraftLine(deps),
    getOverdraftLine(deps),
    closeOverdraftLine(deps),
  ];
}
