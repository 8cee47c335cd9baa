import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { audit, verifyChain } from '../../core/audit/audit.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

describe('audit hash chain', () => {
  let t: TestDb;
  before(async () => {
    t = await freshDatabase();
  });
  after(() => t.drop());

  const entry = (tenantId: string, n: number) => ({
    tenantId, actor: { type: 'customer', id: `c${n}` }, action: 'auth.login', target: { type: 'session', id: `s${n}` },
    decision: { allow: n % 2 === 0 }, attrs: { ip: '127.0.0.1' },
  });

  it('chains per tenant and verifies, also under concurrent appends', async () => {
    await Promise.all(Array.from({ length: 20 }, (_, i) => audit(t.db, entry(i % 2 ? 'a' : 'b', i))));
    assert.deepEqual(await verifyChain(t.db, 'a'), { ok: true, count: 10 });
    assert.deepEqual(await verifyChain(t.db, 'b'), { ok: true, count: 10 });
  });

  it('is append-only: updates and deletes are refused by the database', async () => {
    await assert.rejects(t.db.query("UPDATE audit_log SET action = 'x'"), /append-only/);
    await assert.rejects(t.db.query('DELETE FROM audit_log'), /append-only/);
  });

  it('reports the first broken link when a row is tampered with', async () => {
    const [id] = await audit(t.db, entry('c', 1), entry('c', 2), entry('c', 3));
    assert.ok(id);
    await t.db.query('ALTER TABLE audit_log DISABLE TRIGGER audit_log_no_update');
    await t.db.query(`UPDATE audit_log SET attrs = '{"ip":"10.0.0.1"}' WHERE id = $1`, [id + 1]);
    await t.db.query('ALTER TABLE audit_log ENABLE TRIGGER audit_log_no_update');
    const report = await verifyChain(t.db, 'c');
    assert.equal(report.ok, false);
    assert.equal(!report.ok && report.brokenAt, id + 1);
    assert.equal(report.count, 1);
  });
});
