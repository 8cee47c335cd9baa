/**
 * Request-bound step-ups (SPEC 4.3 rules 2-3 generalised by issue 13 items 1-2).
 *
 * Every action that moves money or changes who or what can authorise money (transfer create,
 * payee add and remove, device registration and removal, revoking another session) needs an
 * AAL 2 token whose `orig` is the hash of this very request, and uses that step-up up:
 *   1. requireBoundStepUp: AAL 2 and `orig` = origOf(method, path with query, body), else
 *      403 MFA_REQUIRED with a fresh challenge bound to this request (the edge answers the same);
 *   2. useStepUp, inside the transaction of the action: one row in `stepup_uses` per grant (the
 *      AAL 2 token's jti). The row commits with the action or not at all, so a failed action
 *      uses nothing up; a second action with the same grant finds the row and is refused.
 * The edge reads the same table (shared/stepup-uses.ts) to refuse a used grant before core sees it.
 */
import type { Db, Queryable, TxClient } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import type { RequestContext } from '../http/route.ts';
import type { KeyStore } from '../keys/keys.ts';
import { issueChallenge, origOf, type StepUpMethod } from '../../shared/challenge.ts';
import type { Caller } from './tokens.ts';

type AnyCtx = RequestContext<unknown, unknown, unknown>;

/** The SPEC 4.3 `orig` of the request as received: the request target keeps its query string. */
export function requestOrig(ctx: Pick<AnyCtx, 'method' | 'req' | 'path' | 'rawBody'>): string {
  return origOf(ctx.method, ctx.req.url ?? ctx.path, ctx.rawBody);
}

/** Methods a customer can step up with: OTP always (verified phone), device once a key is usable. */
export async function stepUpMethods(
  q: Queryable,
  tenantId: string,
  customerId: string,
  nowMs: number,
): Promise<StepUpMethod[]> {
  const { rows } = await q.query(
    `SELECT 1 FROM customer_devices WHERE tenant_id = $1 AND customer_id = $2 AND revoked_at IS NULL
       AND notified_at IS NOT NULL AND usable_from <= to_timestamp($3 / 1000.0) LIMIT 1`,
    [tenantId, customerId, nowMs],
  );
  return rows.length > 0 ? ['otp', 'device'] : ['otp'];
}

/** 403 MFA_REQUIRED carrying a fresh challenge for `orig` (what the edge answers, SPEC 7.2). */
export async function stepUpRequired(
  deps: { keys: KeyStore; db: Queryable },
  caller: Pick<Caller, 'tenantId' | 'customerId'>,
  orig: string,
  why: string,
  nowMs: number,
): Promise<AppError> {
  const methods = await stepUpMethods(deps.db, caller.tenantId, caller.customerId, nowMs);
  const challenge = await issueChallenge(
    deps.keys.challenges,
    { tenantId: caller.tenantId, sub: caller.customerId, orig, methods },
    nowMs,
  );
  return new AppError('MFA_REQUIRED', why, { extra: { challenge, methods } });
}

/** Refuse (MFA_REQUIRED + challenge) unless the caller stepped up for exactly this request. */
export async function requireBoundStepUp(
  deps: { keys: KeyStore; db: Queryable },
  caller: Caller,
  orig: string,
  what: string,
  nowMs: number,
): Promise<void> {
  if (caller.aal >= 2 && caller.orig === orig) return;
  throw await stepUpRequired(
    deps,
    caller,
    orig,
    `${what} needs a step-up bound to this exact request`,
    nowMs,
  );
}

/** The grant was used by another committed action (thrown past idempotency storage on purpose). */
export class StepUpUsed extends Error {
  constructor() {
    super('this step-up was already used');
    this.name = 'StepUpUsed';
  }
}

/**
 * Use up the caller's request-bound step-up inside the action's transaction. A concurrent use
 * of the same grant waits on the key and then finds it taken: StepUpUsed.
 */
export async function useStepUp(
  q: Queryable,
  caller: Caller,
  use: { orig: string; action: string; idempotencyKey?: string },
  nowMs: number,
): Promise<void> {
  const { rows } = await q.query(
    `INSERT INTO stepup_uses (tenant_id, grant_jti, session_id, customer_id, orig, action, idempotency_key, used_at, expires_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, to_timestamp($8 / 1000.0), to_timestamp($9))
     ON CONFLICT (tenant_id, grant_jti) DO NOTHING RETURNING grant_jti`,
    [
      caller.tenantId,
      caller.jti,
      caller.sessionId,
      caller.customerId,
      use.orig,
      use.action,
      use.idempotencyKey ?? null,
      nowMs,
      caller.expS,
    ],
  );
  if (rows.length === 0) throw new StepUpUsed();
}

/**
 * Run a bound action: check the binding, then `fn` in one transaction that first uses the
 * step-up up. A used grant becomes MFA_REQUIRED with a fresh challenge.
 */
export async function withBoundStepUp<T>(
  deps: { keys: KeyStore; db: Db },
  caller: Caller,
  ctx: AnyCtx,
  action: string,
  nowMs: number,
  fn: (q: TxClient) => Promise<T>,
): Promise<T> {
  const orig = requestOrig(ctx);
  await requireBoundStepUp(deps, caller, orig, action, nowMs);
  try {
    return await deps.db.tx(async (q) => {
      await useStepUp(q, caller, { orig, action }, nowMs);
      return fn(q);
    });
  } catch (err) {
    if (err instanceof StepUpUsed)
      throw await stepUpRequired(
        deps,
        caller,
        orig,
        'this step-up was already used; step up again for this request',
        nowMs,
      );
    throw err;
  }
}
