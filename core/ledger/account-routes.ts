/** /v1/core/accounts: open (SPEC 4.1), read, balances, close. */
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { AppError } from '../../shared/errors.ts';
import { closeAccount, getBalances, openAccount, requireAccount } from './accounts.ts';
import { ensureTenantLedger } from './catalog.ts';
import {
  authed,
  errors,
  idempotentWrite,
  readHeaders,
  writeCtx,
  writeHeaders,
  type LedgerRouteDeps,
} from './http.ts';
import { Account, BalanceSet, CreateAccount, IdParams } from './schemas.ts';
import { declared } from '../http/declared.ts';

const tags = ['core.accounts'];

/** POST /v1/core/accounts. */
const createAccount = (deps: LedgerRouteDeps) =>
  defineRoute({
    ...declared('POST', '/v1/core/accounts'),
    operationId: 'createAccount',
    tags,
    summary: 'Open a ledger account (SPEC 4.1)',
    headers: writeHeaders,
    body: CreateAccount,
    responses: {
      201: { description: 'Account', schema: Account },
      ...errors({
        409: 'Idempotency-Key reused with another body',
        422: 'UNKNOWN_CURRENCY, UNKNOWN_PRODUCT, PRODUCT_NOT_ALLOWED',
      }),
    },
    handler: async (ctx) => {
      const w = await writeCtx(deps, ctx);
      // No snapshot check here: openAccount asks admin's currency table itself.
      await ensureTenantLedger(deps.db, w.principal.tenantId);
      return idempotentWrite(deps, w, { action: 'account.create', targetType: 'account' }, async (client) => {
        const account = await openAccount(
          client,
          {
            tenantId: w.principal.tenantId,
            ownerType: ctx.body.owner_type,
            ownerId: ctx.body.owner_id,
            productCode: ctx.body.product_code,
            currency: ctx.body.currency,
            viaApi: true,
          },
          deps.now(),
        );
        return { status: 201, body: account };
      });
    },
  });

/** GET /v1/core/accounts/{id}. */
const getAccount = (deps: LedgerRouteDeps) =>
  defineRoute({
    ...declared('GET', '/v1/core/accounts/{id}'),
    operationId: 'getAccount',
    tags,
    summary: 'Get an account',
    headers: readHeaders,
    params: IdParams,
    responses: {
      200: { description: 'Account', schema: Account },
      ...errors({ 404: 'ACCOUNT_NOT_FOUND' }),
    },
    handler: async (ctx) => {
      const p = await authed(deps, ctx, 'core:read');
      return { status: 200, body: await requireAccount(deps.db, p.tenantId, ctx.params.id) };
    },
  });

/** GET /v1/core/accounts/{id}/balances. */
const getAccountBalances = (deps: LedgerRouteDeps) =>
  defineRoute({
    ...declared('GET', '/v1/core/accounts/{id}/balances'),
    operationId: 'getBalances',
    tags,
    summary: "Get an account's balances",
    headers: readHeaders,
    params: IdParams,
    responses: {
      200: { description: 'BalanceSet', schema: BalanceSet },
      ...errors({ 404: 'ACCOUNT_NOT_FOUND' }),
    },
    handler: async (ctx) => {
      const p = await authed(deps, ctx, 'core:read');
      const b = await getBalances(deps.db, p.tenantId, ctx.params.id);
      if (!b) throw new AppError('ACCOUNT_NOT_FOUND', `account ${ctx.params.id} not found`);
      return { status: 200, body: b };
    },
  });

/** POST /v1/core/accounts/{id}/close. */
const closeAccountRoute = (deps: LedgerRouteDeps) =>
  defineRoute({
    ...declared('POST', '/v1/core/accounts/{id}/close'),
    operationId: 'closeAccount',
    tags,
    summary: 'Close an empty account',
    headers: writeHeaders,
    params: IdParams,
    bodyKind: 'json',
    responses: {
      200: { description: 'Account', schema: Account },
      ...errors({
        404: 'ACCOUNT_NOT_FOUND',
        409: 'IDEMPOTENCY_CONFLICT',
        422: 'ACCOUNT_NOT_EMPTY, ACCOUNT_CLOSED',
      }),
    },
    handler: async (ctx) => {
      const w = await writeCtx(deps, ctx);
      return idempotentWrite(deps, w, { action: 'account.close', targetType: 'account' }, async (client) => ({
        status: 200,
        body: await closeAccount(client, w.principal.tenantId, ctx.params.id),
      }));
    },
  });

export function accountRoutes(deps: LedgerRouteDeps): RouteSpec[] {
  return [createAccount(deps), getAccount(deps), getAccountBalances(deps), closeAccountRoute(deps)];
}
