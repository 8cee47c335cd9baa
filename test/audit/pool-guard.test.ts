/**
 * appendAudit in one transaction: through a pool each query would commit on its own, the chain
 * head's lock would end before the rows are written, and two appends could chain from one head
 * (a broken chain, seen in the multi-process proof: token issuance and other callers handed
 * appendAudit the pool). An append handed the pool now runs in a transaction of its own.
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

  it('40 appends at once, handed the pool or through audit(), keep one unbroken chain', async () => {
    await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        i % 2 === 0 ? appendAudit(t.db, [entry(i)]) : audit(t.db, entry(i)),
      ),
    );
    const report = await verifyChain(t.db, 'guard-t');
    assert.deepEqual(report, { ok: true, count: 40 });
  });
});
