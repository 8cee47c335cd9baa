/**
 * appendAudit in one transaction: through a pool each query would commit on its own, the chain
 * head's lock would end before the rows are written, and two appends could chain from one head
 * (a broken chain, seen in the multi-process proof when token issuance appended so); and the
 * record would commit apart from the change it records. So appendAudit takes the transaction of
 * that change (a TxClient) and refuses the pool; a record of its own goes through audit(db, …).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { appendAudit, audit, verifyChain } from '../../shared/audit.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

describe('appendAudit and transactions', () => {
  let t: TestDb;
  before(async () => {
    t = await freshDatabase();
  });
  after(() => t.drop());
  const entry = (i: number) => ({
    tenantId: 'guard-t',
    actor: { type: 'test', id: `a${i}` },
    action: 'test.append',
    target: { type: 'test', id: `x${i}` },
  });

  it('refuses the pool, and 40 appends at once, in transactions or through audit(), keep one unbroken chain', async () => {
    // Only a cast gets a Db this far: the type is a transaction's client.
    await assert.rejects(() => appendAudit(t.db as never, [entry(0)]), /transaction of the change/);
    await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        i % 2 === 0 ? t.db.tx((q) => appendAudit(q, [entry(i)])) : audit(t.db, entry(i)),
      ),
    );
    const report = await verifyChain(t.db, 'guard-t');
    assert.deepEqual(report, { ok: true, count: 40 });
  });
});
