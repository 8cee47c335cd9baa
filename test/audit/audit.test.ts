import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createHash } from 'node:crypto';
import { audit, verifyChain } from '../../shared/audit.ts';
import { canonicalJson } from '../../shared/canonical-json.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

describe('audit hash chain', () => {
  let t: TestDb;
  before(async () => {
    t = await freshDatabase();
  });
  after(() => t.drop());

  const entry = (tenantId: string, n: number) => ({
    tenantId,
    actor: { type: 'customer', id: `c${n}` },
    action: 'auth.login',
    target: { type: 'session', id: `s${n}` },
    decision: { allow: n % 2 === 0 },
    attrs: { ip: '127.0.0.1' },
  });

  it('chains per tenant and verifies, also under concurrent appends', async () => {
    await Promise.all(Array.from({ length: 20 }, (_, i) => audit(t.db, entry(i % 2 ? 'a' : 'b', i))));
    assert.deepEqual(await verifyChain(t.db, 'a'), { ok: true, count: 10 });
    assert.deepEqual(await verifyChain(t.db, 'b'), { ok: true, count: 10 });
  });

  it('hashes canonical JSON of the whole record, and stores every part as given', async () => {
    const ts = new Date('2026-11-22T04:30:00.123Z');
    const odd = {
      tenantId: 'd',
      actor: { type: 'customer', id: 'c"1\\' },
      action: 'authz.decision',
      target: { type: 'route', id: '/v1/x?y=é😀\u2028' },
      decision: { allow: true, nested: { z: [1, -2.5, null, 'a\nb'], a: false } },
      attrs: { ip: '::1', masking: '{"fields":{}}', empty: {} },
      ts,
    };
    await audit(t.db, odd, { ...odd, attrs: {} });
    const { rows } = await t.db.query<{
      actor: unknown;
      target: unknown;
      decision: unknown;
      attrs: unknown;
      prev_hash: Buffer;
      row_hash: Buffer;
    }>(
      `SELECT actor, target, decision, attrs, prev_hash, row_hash FROM audit_log WHERE tenant_id = 'd' ORDER BY id`,
    );
    assert.equal(rows.length, 2);
    let prev = Buffer.alloc(32);
    for (const [i, attrs] of [odd.attrs, {}].entries()) {
      const row = rows[i];
      assert.deepEqual(
        [row?.actor, row?.target, row?.decision, row?.attrs],
        [odd.actor, odd.target, odd.decision, attrs],
      );
      const whole = canonicalJson({
        ts: ts.toISOString(),
        tenant_id: 'd',
        actor: odd.actor,
        action: odd.action,
        target: odd.target,
        decision: odd.decision,
        attrs,
      });
      const expected = createHash('sha256').update(prev).update(whole).digest();
      assert.ok(row?.prev_hash.equals(prev));
      assert.ok(row?.row_hash.equals(expected), `row ${i} hash is over the canonical whole record`);
      prev = expected;
    }
    assert.deepEqual(await verifyChain(t.db, 'd'), { ok: true, count: 2 });
  });

  it('stores request-derived text PostgreSQL would refuse (NUL, lone surrogates) as U+FFFD, hashing what it stores', async () => {
    await audit(t.db, {
      tenantId: 'e',
      actor: { type: 'anonymous', id: 'a\u0000b' },
      action: 'authz.decision',
      target: { type: 'x', id: '\ud800' },
      attrs: { named: 'ok\udc00', ['k\u0000']: ['\ud83d\ude00'] },
    });
    const { rows } = await t.db.query<{
      actor: { id: string };
      target: { id: string };
      attrs: Record<string, unknown>;
    }>(`SELECT actor, target, attrs FROM audit_log WHERE tenant_id = 'e'`);
    assert.equal(rows[0]?.actor.id, 'a\uFFFDb');
    assert.equal(rows[0]?.target.id, '\uFFFD');
    assert.deepEqual(
      rows[0]?.attrs,
      { named: 'ok\uFFFD', ['k\uFFFD']: ['\ud83d\ude00'] },
      'a well-formed pair is kept',
    );
    assert.deepEqual(await verifyChain(t.db, 'e'), { ok: true, count: 1 });
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
