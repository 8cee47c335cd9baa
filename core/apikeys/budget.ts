/**
 * Core's side of API-key amount budgets (SPEC 5.4.5; issue 13 item 5). The counters are the
 * edge's (api_key_usage, one row per key, day and currency): reversals and captures are counted
 * inside the ledger transaction (api_key_budget_count_posting, migration 0730, asked for by
 * core/ledger/service.ts), and an amount the edge counted from a request that then moved
 * nothing is given back here.
 */
import type { Db } from '../../shared/db/pool.ts';
import type { MoneyScope } from '../http/money.ts';

/** Give the key back what the edge counted for this request. */
export async function releaseEdgeCount(db: Db, scope: MoneyScope): Promise<void> {
  const c = scope.edgeCount;
  if (!scope.apiKeyId || !c) return;
  await db.query('SELECT api_key_budget_release($1, $2, $3, $4)', [
    scope.apiKeyId,
    c.windowStart,
    c.currency,
    c.micros.toString(),
  ]);
}
