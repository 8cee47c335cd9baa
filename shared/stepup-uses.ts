/**
 * Used request-bound step-ups (table `stepup_uses`, migration 0700): core records a grant in the
 * transaction of the action it authorised (core/identity/bound.ts); the edge reads the same row
 * to refuse a used grant before core sees the request.
 */
import type { Queryable } from './db/pool.ts';

/** The Idempotency-Key recorded with a used grant ('' when it had none), or undefined when unused. */
export async function stepUpUseOf(
  q: Queryable,
  tenantId: string,
  grantJti: string,
): Promise<string | undefined> {
  const { rows } = await q.query<{ idempotency_key: string | null }>(
    'SELECT idempotency_key FROM stepup_uses WHERE tenant_id = $1 AND grant_jti = $2',
    [tenantId, grantJti],
  );
  const r = rows[0];
  return r ? (r.idempotency_key ?? '') : undefined;
}
