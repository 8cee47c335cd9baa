/** Shared pieces of the ledger routes: authentication, headers, error documentation, writes. */
import type { Logger } from 'pino';
import { appendAudit } from '../../shared/audit.ts';
import type { Db, Queryable } from '../../shared/db/pool.ts';
import { AppError, toCoreBody } from '../../shared/errors.ts';
import type { RequestContext, ResponseSpec } from '../http/route.ts';
import { idempotencyHeader, idempotencyKeyOf, toReply, withIdempotency } from '../idempotency/idempotency.ts';
import type { KeyStore } from '../keys/keys.ts';
import { authenticate, type CorePrincipal } from '../oauth/bearer.ts';
import type { CoreScope } from '../oauth/clients.ts';
import type { Reply } from '../http/route.ts';
import { writeScope, type Ledger, type WriteCtx } from './service.ts';
import { CoreError } from './schemas.ts';

export interface LedgerRouteDeps {
  db: Db;
  keys: KeyStore;
  log: Logger;
  now: () => number;
  ledger: Ledger;
}

const authHeader = {
  name: 'Authorization',
  required: false,
  description: 'Bearer <access token> or the bare JWT (SPEC 5.1); scope core:read or core:write',
};
const requestIdHeader = {
  name: 'X-Request-Id',
  required: false,
  description: 'Caller request id, echoed back',
};

export const readHeaders = [authHeader, requestIdHeader];
export const writeHeaders = [authHeader, requestIdHeader, idempotencyHeader];

type AnyCtx = RequestContext<unknown, unknown, unknown>;

/** Error responses every core route documents, plus the route's own. */
export function errors(extra: Record<number, string>): Record<number, ResponseSpec> {
  const base: Record<number, string> = {
    400: 'Bad request (schema, Idempotency-Key)',
    401: 'Missing or invalid access token',
    403: 'Token lacks the scope',
    ...extra,
  };
  return Object.fromEntries(
    Object.entries(base).map(([k, d]) => [Number(k), { description: d, schema: CoreError }]),
  );
}

export function authed(deps: LedgerRouteDeps, ctx: AnyCtx, scope: CoreScope): Promise<CorePrincipal> {
  return authenticate(deps, ctx, scope);
}

/** The write context: authenticated with core:write, Idempotency-Key present and well-formed. */
export async function writeCtx(deps: LedgerRouteDeps, ctx: AnyCtx): Promise<WriteCtx> {
  const principal = await authed(deps, ctx, 'core:write');
  const key = idempotencyKeyOf(ctx.headers);
  return {
    principal,
    requestId: ctx.requestId,
    key,
    method: ctx.method,
    path: ctx.path,
    body: ctx.body ?? {},
  };
}

/**
 * A write outside the batcher (accounts, overdraft lines, savings products): idempotent,
 * audited, in one transaction with its outbox event.
 */
export async function idempotentWrite(
  deps: LedgerRouteDeps,
  w: WriteCtx,
  audit: { action: string; targetType: string },
  fn: (
    client: Queryable,
  ) => Promise<{ status: number; body: { id?: unknown; code?: unknown } & Record<string, unknown> }>,
): Promise<Reply> {
  const stored = await withIdempotency(deps, writeScope(w), async (client) => {
    // A refusal (UNKNOWN_CURRENCY, PRODUCT_NOT_ALLOWED, ...) is kept under the key like a
    // success, so it is a decision to record like one, as the batcher records a refused posting
    // with its code: its effects roll back to here, its record stays.
    await client.query('SAVEPOINT ledger_write');
    let res: Awaited<ReturnType<typeof fn>>;
    let refusal: AppError | undefined;
    try {
      res = await fn(client);
    } catch (err) {
      if (!(err instanceof AppError) || err.status >= 500) throw err;
      await client.query('ROLLBACK TO SAVEPOINT ledger_write');
      refusal = err;
      res = { status: err.status, body: toCoreBody(err) };
    }
    const id = refusal ? undefined : (res.body.id ?? res.body.code);
    await appendAudit(client, [
      {
        tenantId: w.principal.tenantId,
        actor: { type: 'client', id: w.principal.clientId },
        action: audit.action,
        target: { type: audit.targetType, id: typeof id === 'string' ? id : '' },
        ...(refusal ? { decision: { allow: false } } : {}),
        attrs: { request_id: w.requestId, outcome: refusal ? refusal.code : 'ok' },
        ts: new Date(deps.now()),
      },
    ]);
    return res;
  });
  return toReply(stored);
}
