/**
 * appendAudit needs one transaction: through a pool each query would commit on its own, the
 * chain head's lock would end before the rows are written, and two appends could chain from one
 * head (a broken chain, seen once in the multi-process proof when token issuance appended so).
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

  it('refuses a pool, and 40 appends at once through audit() keep one unbroken chain', async () => {
    await assert.rejects(() => appendAudit(t.db, [entry(0)]), /one transaction/);
    await Promise.all(Array.from({ length: 40 }, (_, i) => audit(t.db, entry(i))));
    const report = await verifyChain(t.db, 'guard-t');
    assert.deepEqual(report, { ok: true, count: 40 });
  });
});
