import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { verifyChain } from '../../shared/audit.ts';
import { createLogger } from '../../shared/log.ts';
import { AuditThread, AuditWriter, auditBatchMax } from '../../edge/audit-writer.ts';
import { freshDatabase } from '../helpers/db.ts';

const log = createLogger('silent');
const entry = (i: number) => ({
  tenantId: 'ta',
  actor: { type: 'customer', id: `c${i}` },
  action: 'authz.decision',
  target: { type: 'transaction', id: '/v1/transfers' },
  decision: { allow: i % 2 === 0, code: 'OK', n: i },
  attrs: { ip: '203.0.113.9' },
});

describe('decision audit on a worker thread', () => {
  it('writes every batch into the hash chain from its own thread and pool', async () => {
    const t = await freshDatabase();
    const audit = new AuditWriter(t.db, log, 1000, 100, new AuditThread(t.url));
    try {
      for (let i = 0; i < 300; i++) audit.push(entry(i));
      await audit.flush();
      assert.equal(audit.pending(), 0);
      const { rows } = await t.db.query<{ n: number }>(
        `SELECT (decision->>'n')::int AS n FROM audit_log WHERE tenant_id = 'ta' ORDER BY id`,
      );
      assert.deepEqual(
        rows.map((r) => r.n),
        Array.from({ length: 300 }, (_, i) => i),
        'in push order',
      );
      assert.deepEqual(await verifyChain(t.db, 'ta'), { ok: true, count: 300 });
    } finally {
      await audit.stop();
      await t.drop();
    }
  });

  it('writes around an entry that can never be stored, keeping a record of it', async () => {
    const t = await freshDatabase();
    const audit = new AuditWriter(t.db, log, 1000, 100, new AuditThread(t.url));
    try {
      audit.push(entry(0));
      audit.push({ ...entry(1), attrs: { ip: '203.0.113.9', score: Number.NaN } }); // canonical JSON has no NaN
      audit.push(entry(2));
      await audit.flush();
      assert.equal(audit.pending(), 0, 'nothing stays stuck behind it');
      const { rows } = await t.db.query<{ action: string; attrs: Record<string, unknown> }>(
        `SELECT action, attrs FROM audit_log WHERE tenant_id = 'ta' ORDER BY id`,
      );
      assert.deepEqual(
        rows.map((r) => r.action),
        ['authz.decision', 'audit.unwritable', 'authz.decision'],
      );
      assert.equal(rows[1]?.attrs.original_action, 'authz.decision');
      assert.match(String(rows[1]?.attrs.error), /NaN/);
      assert.deepEqual(await verifyChain(t.db, 'ta'), { ok: true, count: 3 });
    } finally {
      await audit.stop();
      await t.drop();
    }
  });

  it('refuses writes once closed', async () => {
    const t = await freshDatabase();
    const sink = new AuditThread(t.url);
    try {
      await sink.write([entry(0)]);
      await sink.close();
      await assert.rejects(sink.write([entry(1)]), /closed/);
    } finally {
      await t.drop();
    }
  });

  it('keeps entries queued when the thread cannot write, and writes them once it can', async () => {
    const t = await freshDatabase();
    // The table is gone: the thread's transaction fails; nothing may be lost.
    await t.db.query('ALTER TABLE audit_log RENAME TO audit_log_away');
    const audit = new AuditWriter(t.db, log, 1000, 100, new AuditThread(t.url));
    try {
      for (let i = 0; i < 5; i++) audit.push(entry(i));
      await audit.flush();
      assert.equal(audit.pending(), 5);
      await t.db.query('ALTER TABLE audit_log_away RENAME TO audit_log');
      await audit.flush();
      assert.equal(audit.pending(), 0);
      assert.deepEqual(await verifyChain(t.db, 'ta'), { ok: true, count: 5 });
    } finally {
      await audit.stop();
      await t.drop();
    }
  });
});

describe('decision audit batching', () => {
  it('leaves entries that arrive during a write for the next tick unless a whole batch is waiting', async () => {
    const writes: number[] = [];
    const pending: (() => void)[] = [];
    const sink = {
      write: (batch: unknown[]) => {
        writes.push(batch.length);
        return new Promise<void>((resolve) => pending.push(resolve));
      },
    };
    const settle = async () => {
      for (let i = 0; i < 5; i++) await new Promise<void>((r) => setImmediate(r));
    };
    // No timer (start() not called): writes begin only when a whole batch is queued, or on flush.
    const audit = new AuditWriter(undefined as never, log, 10_000, 0, sink);
    for (let i = 0; i < auditBatchMax; i++) audit.push(entry(i));
    assert.deepEqual(writes, [auditBatchMax], 'a whole batch starts a write');
    for (let i = 0; i < 5; i++) audit.push(entry(i));
    pending.shift()?.();
    await settle();
    assert.deepEqual(writes, [auditBatchMax], 'five entries do not make a batch of their own at once');
    assert.equal(audit.pending(), 5);
    for (let i = 0; i < auditBatchMax - 5; i++) audit.push(entry(i));
    assert.deepEqual(writes, [auditBatchMax, auditBatchMax], 'a whole batch waiting is written at once');
    for (let i = 0; i < 3; i++) audit.push(entry(i));
    const flushed = audit.flush();
    pending.shift()?.();
    await settle();
    assert.deepEqual(writes, [auditBatchMax, auditBatchMax, 3], 'flush writes the remainder');
    pending.shift()?.();
    await flushed;
    assert.equal(audit.pending(), 0);
  });
});
