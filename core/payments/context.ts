/** What every customer money route needs: the verified customer, and facts from the edge. */
import type { Db } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import type { RequestContext } from '../http/route.ts';
import { authenticate, type Caller } from '../identity/tokens.ts';
import { principalOf } from '../idempotency/idempotency.ts';
import type { KeyStore } from '../keys/keys.ts';
import type { PolicyStore } from '../../policy/runtime/store.ts';

export interface PaymentsDeps {
  db: Db;
  keys: KeyStore;
  now: () => number;
  /** The verified policy revisions: core repeats the delegated-payer check with them (payer.ts). */
  policies?: PolicyStore;
}

type AnyCtx = RequestContext<unknown, unknown, unknown>;

/** The customer behind the bearer token (core verifies it too: defence in depth), at `minAal`. */
export async function customerOf(deps: PaymentsDeps, ctx: AnyCtx, minAal = 1): Promise<Caller> {
  const caller = await authenticate(deps, ctx);
  if (caller.aal < minAal)
    throw new AppError('MFA_REQUIRED', `this operation needs AAL ${minAal}; complete a step-up`);
  return caller;
}

/**
 * The request's source address: the edge's word (x-client-ip) only when the request carried
 * the edge's secret, else the socket peer (a caller reaching core directly names no address).
 */
export const requestIp = (ctx: AnyCtx): string =>
  (ctx.identity.fromEdge ? ctx.identity.clientIp : undefined) ?? ctx.req.socket.remoteAddress ?? '';

/** Whose Idempotency-Keys these are: the customer core verified (issue 13 item 3). */
export const keyOwnerOf = (caller: Caller) => ({
  tenantId: caller.tenantId,
  principal: principalOf('customer', caller.customerId),
});

export const bearerHeader = {
  name: 'Authorization',
  required: true,
  description: 'Bearer <customer access token>',
};
export const idempotencyHeaderRequired = {
  name: 'Idempotency-Key',
  required: true,
  description:
    '8–128 characters [A-Za-z0-9._:-]; a replay returns the first response and never moves money twice',
};
