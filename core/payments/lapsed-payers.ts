/**
 * A payer tuple whose `expires_at` caveat has passed withdraws the delegation as a delete does
 * (SPEC 2.7 `payer`, issue 20 item 3), but no request deletes it: this sweep releases the
 * delegate's pending transfers from the owner's wallet (./revocation.ts: holds voided, FAILED,
 * the owner told), audited by the system. A tuple missing altogether (removed without the API)
 * releases them too. The `hours` and `ip_ranges` caveats only pause a tuple, so they release
 * nothing.
 */
import { appendAudit } from '../../shared/audit.ts';
import type { Db, TxClient } from '../../shared/db/pool.ts';
import type { Logger } from 'pino';
import { ExclusiveTimer } from '../db/exclusive.ts';
import { type Delegation, releaseDelegation, releasedCode } from './revocation.ts';

/** How often the sweep runs: a lapsed tuple's holds are released within this much of its expiry. */
export const lapsedPayerSweepMs = 15_000;
const batch = 100;

const tupleOf = `FROM relationship_tuples r WHERE r.tenant_id = $1 AND r.subject_ns = 'customer' AND r.subject_id = $2
   AND r.relation = 'payer' AND r.object_ns = 'customer' AND r.object_id = $3`;

/** The delegations with pending unexpired transfers and no live payer tuple (migration 0990's index). */
async function candidates(db: Db, nowMs: number): Promise<Delegation[]> {
  const { rows } = await db.query<{ tenant_id: string; delegate: string; owner: string }>(
    `SELECT DISTINCT t.tenant_id, t.initiator_customer_id::text AS delegate, t.payer_customer_id::text AS owner
       FROM transfers t
      WHERE t.status = 'PENDING' AND t.initiator_customer_id <> t.payer_customer_id AND t.expires_at > $1
        AND NOT EXISTS (SELECT 1 FROM relationship_tuples r
              WHERE r.tenant_id = t.tenant_id AND r.subject_ns = 'customer' AND r.subject_id = t.initiator_customer_id::text
                AND r.relation = 'payer' AND r.object_ns = 'customer' AND r.object_id = t.payer_customer_id::text
                AND CASE WHEN coalesce(r.caveat->>'expires_at', '') = '' THEN true
                         -- An expiry no cast can read (stored before it was refused) is left to
                         -- the policy (which refuses it) rather than failing every tenant's sweep.
                         WHEN NOT pg_input_is_valid(r.caveat->>'expires_at', 'timestamptz') THEN true
                         ELSE (r.caveat->>'expires_at')::timestamptz > $1 END)
      LIMIT $2`,
    [new Date(nowMs), batch],
  );
  return rows.map((r) => ({ tenantId: r.tenant_id, delegate: r.delegate, owner: r.owner }));
}

/**
 * One delegation, in its own transaction. The tuple row is locked first, the order a delete and
 * a confirm take (./revocation.ts), and judged again under the lock: a rewrite that extended
 * its expiry since the candidates were read keeps the transfers pending.
 */
async function releaseIfLapsed(q: TxClient, d: Delegation, nowMs: number): Promise<number> {
  const { rows } = await q.query<{ expires_at: string | null }>(
    `SELECT r.caveat->>'expires_at' AS expires_at ${tupleOf} FOR UPDATE`,
    [d.tenantId, d.delegate, d.owner],
  );
  const tuple = rows[0];
  if (tuple && !(tuple.expires_at && Date.parse(tuple.expires_at) <= nowMs)) return 0;
  const released = await releaseDelegation(q, d, nowMs);
  await appendAudit(
    q,
    released.map((r) => ({
      tenantId: d.tenantId,
      actor: { type: 'system', id: 'payer-sweeper' },
      action: 'transfer.release',
      target: { type: 'transfer', id: r.transfer_id },
      attrs: {
        ...r,
        tuple: `customer:${d.delegate}#payer@customer:${d.owner}`,
        cause: tuple ? 'tuple_expired' : 'tuple_missing',
        status: 'FAILED',
        code: releasedCode,
      },
      ts: new Date(nowMs),
    })),
  );
  return released.length;
}

/** One sweep: how many transfers it released. */
export async function releaseLapsedPayers(db: Db, nowMs: number): Promise<number> {
  let released = 0;
  for (const d of await candidates(db, nowMs)) released += await db.tx((q) => releaseIfLapsed(q, d, nowMs));
  return released;
}

/** Runs the sweep on a timer, one instance at a time; a failed run is retried at the next tick. */
export class LapsedPayerSweeper extends ExclusiveTimer<number> {
  constructor(db: Db, log: Logger, now: () => number = Date.now) {
    super(db, 'payerRelease', lapsedPayerSweepMs, () => releaseLapsedPayers(db, now()), {
      done: (n) => {
        if (n > 0) log.info({ released: n }, 'released transfers of lapsed payer tuples');
      },
      failed: (err) => log.warn({ err: err.message }, 'payer release sweep failed'),
    });
  }
}
