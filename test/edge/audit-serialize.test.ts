/**
 * The decision audit's batch crosses to its thread as one JSON text, serialised on the thread
 * that answers Checks: in slices (edge/audit-writer.ts `serializeInSlices`), so a large batch
 * never holds that thread for the whole of it (issue 18 item 1), with the same text as one
 * `JSON.stringify` and the same refusal of numbers canonical JSON cannot hold.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { RecordedEntry } from '../../edge/decision-inputs.ts';
import { AuditThread, AuditWriter, serializeInSlices } from '../../edge/audit-writer.ts';
import { verifyChain } from '../../shared/audit.ts';
import { createLogger } from '../../shared/log.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

const entry = (i: number): RecordedEntry => ({
  tenantId: 't1',
  actor: { type: 'customer', id: `c-${i}` },
  action: 'transfer.create',
  target: { type: 'transfer', id: `x-${i}` },
  decision: { allow: true, purpose: 'payments', aal: 2 },
  attrs: { ip: '127.0.0.1', risk: 0.25, padding: 'p'.repeat(2_000) },
  replay: { input: { subject: { id: `c-${i}` }, n: [1, 2.5, -3] }, allow: true, policyVersion: 'v1' },
});

describe('decision audit batch serialisation', () => {
  it('gives the text one JSON.stringify of the batch gives, and lets other work run meanwhile', async () => {
    const batch = Array.from({ length: 2_000 }, (_, i) => entry(i));
    let ranDuring = 0;
    const other = setInterval(() => ranDuring++, 0);
    const text = await serializeInSlices(batch);
    clearInterval(other);
    assert.equal(text, JSON.stringify(batch));
    assert.ok(ranDuring > 0, 'a timer ran while the batch was serialised');
    assert.equal(await serializeInSlices([]), '[]');
  });

  it('writes an input carried as JSON text where the input object would be, and nothing else', async () => {
    const withText = (i: number): RecordedEntry => {
      const e = entry(i);
      const { input, ...meta } = e.replay as NonNullable<RecordedEntry['replay']>;
      return { ...e, replay: { ...meta, inputJson: JSON.stringify(input) } };
    };
    const batch = [entry(0), withText(1), { ...entry(2), replay: undefined }, withText(3)];
    const text = await serializeInSlices(batch);
    assert.deepEqual(
      JSON.parse(text),
      JSON.parse(
        JSON.stringify(
          [entry(0), entry(1), entry(2), entry(3)].map((e, i) => (i === 2 ? { ...e, replay: undefined } : e)),
        ),
      ),
    );
    assert.ok(!text.includes('inputJson'), 'the text field itself is not written');
    // A bare entry and a bare replay still make valid JSON.
    const bare = { replay: { inputJson: '{"a":[1]}' } } as unknown as RecordedEntry;
    assert.deepEqual(JSON.parse(await serializeInSlices([bare])), [{ replay: { input: { a: [1] } } }]);
    // The rest of the entry is still refused for a number canonical JSON cannot hold.
    await assert.rejects(
      serializeInSlices([{ ...withText(4), attrs: { risk: Number.POSITIVE_INFINITY } }]),
      /audit value risk is Infinity/,
    );
  });

  it('refuses a number canonical JSON cannot hold, naming its key', async () => {
    const bad = { ...entry(1), attrs: { risk: Number.NaN } };
    await assert.rejects(serializeInSlices([entry(0), bad]), /audit value risk is NaN/);
  });
});

/**
 * The serialisation yields to the event loop: pushes, ticks, flush() and stop() all run in those
 * gaps. Through the real AuditThread and database, every entry is written once, in push order,
 * into a chain that verifies; a poison entry anywhere in a batch is recorded as
 * `audit.unwritable` and never holds the queue.
 */
describe('decision audit batch serialisation on the real thread', () => {
  const log = createLogger('silent');
  /** An entry large enough that a batch of them is serialised across several slices. */
  const decision = (i: number): RecordedEntry => ({
    tenantId: 'ta',
    actor: { type: 'customer', id: `c${i}` },
    action: 'authz.decision',
    target: { type: 'transaction', id: '/v1/transfers' },
    decision: { allow: true, code: 'OK', n: i },
    attrs: { ip: '203.0.113.9', padding: 'p'.repeat(20_000) },
  });
  const written = async (t: TestDb) =>
    (
      await t.db.query<{ action: string; n: number | null; error: string | null }>(
        `SELECT action, (decision->>'n')::int AS n, attrs->>'error' AS error FROM audit_log WHERE tenant_id = 'ta' ORDER BY id`,
      )
    ).rows;
  const withWriter = async (
    fn: (audit: AuditWriter, t: TestDb) => Promise<void>,
    bound = 10_000,
    reserve = 1_000,
  ) => {
    const t = await freshDatabase();
    const audit = new AuditWriter(t.db, log, bound, reserve, new AuditThread(t.url));
    try {
      await fn(audit, t);
    } finally {
      await audit.stop();
      await t.drop();
    }
  };

  it('writes entries pushed, flushed and stopped during its yields once each, in push order', async () => {
    await withWriter(async (audit, t) => {
      audit.start();
      let n = 0;
      // Pushes keep arriving between slices (a setImmediate runs in every yield), with flushes among them.
      const flushes: Promise<void>[] = [];
      await new Promise<void>((done) => {
        const more = () => {
          for (let i = 0; i < 7; i++) audit.push(decision(n++));
          if (n % 70 === 0) flushes.push(audit.flush());
          if (n < 700) setImmediate(more);
          else done();
        };
        more();
      });
      await Promise.all(flushes);
      await audit.stop();
      assert.equal(audit.pending(), 0);
      const rows = await written(t);
      assert.deepEqual(
        rows.map((r) => r.n),
        Array.from({ length: 700 }, (_, i) => i),
        'every entry once, in push order',
      );
      assert.deepEqual(await verifyChain(t.db, 'ta'), { ok: true, count: 700 });
    });
  });

  it('records poison entries in the middle of a batch as audit.unwritable and writes the rest', async () => {
    await withWriter(async (audit, t) => {
      const cyclic: Record<string, unknown> = { a: 1 };
      cyclic.self = cyclic;
      const poison: Record<number, Record<string, unknown>> = {
        3: { nan: Number.NaN },
        5: { inf: Number.NEGATIVE_INFINITY },
        7: { big: 10n },
        9: cyclic,
      };
      for (let i = 0; i < 12; i++) {
        const e = decision(i);
        audit.push(poison[i] ? { ...e, attrs: { ...e.attrs, ...poison[i] } } : e);
      }
      await audit.flush();
      assert.equal(audit.pending(), 0, 'nothing stays stuck behind them');
      const rows = await written(t);
      assert.deepEqual(
        rows.map((r) => (r.action === 'audit.unwritable' ? 'unwritable' : r.n)),
        [0, 1, 2, 'unwritable', 4, 'unwritable', 6, 'unwritable', 8, 'unwritable', 10, 11],
      );
      assert.match(String(rows[3]?.error), /NaN/);
      assert.match(String(rows[5]?.error), /Infinity/);
      assert.match(String(rows[7]?.error), /BigInt/);
      assert.match(String(rows[9]?.error), /circular/);
      assert.deepEqual(await verifyChain(t.db, 'ta'), { ok: true, count: 12 });
    });
  });

  it('a thread closed while a batch is being serialised refuses it, writes none of it and does not hang', async () => {
    const t = await freshDatabase();
    const sink = new AuditThread(t.url);
    try {
      await sink.write([]);
      const batch = Array.from({ length: 200 }, (_, i) => decision(i));
      // Its refusal is awaited from the start: it comes while close() is still under way.
      const refused = assert.rejects(sink.write(batch), /closed/);
      await sink.close();
      await refused;
      assert.deepEqual(await written(t), []);
    } finally {
      await t.drop();
    }
  });

  it('with the writer behind, denies past the bound and records every fail-closed denial once it catches up', async () => {
    await withWriter(
      async (audit, t) => {
        // The thread's writes fail until the table is back: the queue only grows.
        await t.db.query('ALTER TABLE audit_log RENAME TO audit_log_away');
        for (let i = 0; i < 30; i++) audit.push(decision(i));
        await audit.flush();
        assert.ok(audit.overloaded(), 'past the bound: decisions stop');
        for (let i = 30; i < 50; i++) audit.pushFailClosed({ ...decision(i), action: 'authz.fail_closed' });
        assert.equal(audit.pending(), 40, 'the reserve takes ten denials');
        assert.equal(audit.unrecordedCount(), 10, 'the rest are counted');
        await t.db.query('ALTER TABLE audit_log_away RENAME TO audit_log');
        await audit.flush();
        assert.equal(audit.pending(), 0);
        assert.ok(!audit.overloaded());
        const rows = await written(t);
        assert.deepEqual(
          rows.map((r) => r.n),
          [...Array.from({ length: 40 }, (_, i) => i), 40],
          'queued entries in order, then one record of the ten counted (its example: the first)',
        );
        assert.equal(rows[40]?.action, 'authz.unrecorded');
        assert.deepEqual(await verifyChain(t.db, 'ta'), { ok: true, count: 41 });
      },
      30,
      10,
    );
  });
});
