/**
 * One-time values across every process (DPoP proof jti, signed-request nonces, client assertion
 * jti): a row in `edge_replay` (migration 0300), so a value used at one instance is refused at
 * every other. An expired row may be taken again; housekeeping deletes them.
 */
import type { Queryable } from './db/pool.ts';

/** Record `value` of `kind` for `ttlMs`; false when it was already used and has not expired. */
export async function firstUse(q: Queryable, kind: string, value: string, ttlMs: number): Promise<boolean> {
  const { rowCount } = await q.query(
    `INSERT INTO edge_replay (kind, value, expires_at) VALUES ($1, $2, now() + make_interval(secs => $3))
     ON CONFLICT (kind, value) DO UPDATE SET expires_at = EXCLUDED.expires_at WHERE edge_replay.expires_at < now()`,
    [kind, value, ttlMs / 1000],
  );
  return rowCount === 1;
}
