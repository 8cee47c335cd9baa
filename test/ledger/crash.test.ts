/**
 * Killing the connection in the middle of a posting (pg_terminate_backend while its
 * transaction holds the idempotency key and waits inside ledger_apply) leaves nothing half
 * written; the batcher's retry on a new connection then applies it exactly once.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { LedgerFixture, type Tenant } from './fixture.ts';

async function waitFor<T>(fn: () => Promise<T | undefined>, timeoutMs = 5000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('ledger crash safety', () => {
  let f: LedgerFixture;
  let t: Tenant;
  before(async () => {
    f = await LedgerFixture.start();
    t = await f.tenant();
  });
  after(() => f.close());

  it('a terminated backend mid-posting commits nothing; the retry commits exactly once', async () => {
    const a = await f.account(t);
    const b = await f.account(t);
    await f.fund(t, a, '100.00');
    const counts = async () =>
      (
        await f.db.query<{ p: string; e: string; k: string; o: string }>(
          `SELECT (SELECT count(*) FROM ledger_postings WHERE tenant_id = $1)::text AS p, (SELECT count(*) FROM ledger_entries WHERE tenant_id = $1)::text AS e,
              (SELECT count(*) FROM idempotency_keys WHERE tenant_id = $1)::text AS k, (SELECT count(*) FROM outbox WHERE tenant_id = $1)::text AS o`,
          [t.id],
        )
      ).rows[0];
    const before = await counts();
    // Hold b's balance row so the posting's transaction stops inside ledger_apply's lock phase.
    const blocker = new pg.Client({ connectionString: f.t.tdb.url });
    await blocker.connect();
    await blocker.query('BEGIN');
    await blocker.query('SELECT 1 FROM ledger_balances WHERE tenant_id = $1 AND account_id = $2 FOR UPDATE', [
      t.id,
      b,
    ]);
    const pending = f.transfer(t, a, b, '7.00', 'KES', 'crash-key-0001');
    const pid = await waitFor(
      async () =>
        (
          await f.db.query<{ pid: number }>(
            `SELECT pid FROM pg_stat_activity WHERE query LIKE '%SELECT ledger_apply%' AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'`,
          )
        ).rows[0]?.pid,
    );
    // Mid-transaction: its idempotency key row and nothing else is written, uncommitted.
    await f.db.query('SELECT pg_terminate_backend($1)', [pid]);
    await waitFor(async () =>
      (await f.db.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [pid])).rowCount === 0
        ? true
        : undefined,
    );
    assert.deepEqual(await counts(), before, 'nothing of the killed transaction is visible');
    assert.equal((await f.balances(t, a)).posted, '100.00');
    await blocker.query('ROLLBACK');
    await blocker.end();
    const r = await pending;
    assert.equal(r.status, 201, r.text);
    const afterCounts = await counts();
    assert.equal(Number(afterCounts?.p) - Number(before?.p), 1, 'exactly one posting');
    assert.equal(Number(afterCounts?.e) - Number(before?.e), 2);
    assert.equal(Number(afterCounts?.k) - Number(before?.k), 1);
    assert.equal((await f.balances(t, a)).posted, '93.00');
    const replay = await f.transfer(t, a, b, '7.00', 'KES', 'crash-key-0001');
    assert.equal(replay.text, r.text);
  });
});
