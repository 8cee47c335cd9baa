/**
 * The decision audit with entries encoded after the turn (edge/audit-writer.ts `fresh`): pushes,
 * ticks, flush() and stop() in the gaps between pushing an entry and encoding it, and between a
 * batch's write and its answer. Every entry is written once, in push order; the bound and the
 * fail-closed reserve count entries not yet encoded; a poison entry after a transient failure is
 * still recorded as audit.unwritable with the rest written around it.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Db } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';
import { AuditWriteError } from '../../edge/audit-poison.ts';
import { AuditWriter, type AuditSink, decodeEntry } from '../../edge/audit-writer.ts';
import type { RecordedEntry } from '../../edge/decision-inputs.ts';

const log = createLogger('silent');
const noDb = {} as Db;
const entry = (i: number, action = 'authz.decision'): RecordedEntry => ({
  tenantId: 'ta',
  actor: { type: 'customer', id: `c${i}` },
  action,
  target: { type: 'transaction', id: '/v1/transfers' },
  decision: { allow: true, code: 'OK', n: i },
  attrs: { ip: '203.0.113.9' },
});
const turn = () => new Promise<void>((r) => setImmediate(r));

/** What a sink stored, in order, as the label of each entry: its n, or its action when it has none. */
type Stored = (number | string)[];
const label = (e: RecordedEntry): number | string => {
  const n = (e.decision as { n?: number } | undefined)?.n;
  return e.action === 'authz.decision' || e.action === 'authz.fail_closed' ? (n ?? e.action) : e.action;
};

/**
 * A sink that takes encoded entries. `hook` runs inside each write before it answers (what the
 * edge does meanwhile); `failNext` transient failures; entries whose n is in `poison` make any
 * write holding them fail as PostgreSQL data errors (22P05) do.
 */
function sinkOf(opts: { hook?: () => void; failNext?: number; poison?: Set<number> } = {}) {
  const stored: Stored = [];
  const state = { failNext: opts.failNext ?? 0, closed: false, writes: 0 };
  const take = async (batch: RecordedEntry[]) => {
    state.writes += 1;
    opts.hook?.();
    if (state.closed) throw new Error('audit thread is closed');
    if (state.failNext > 0) {
      state.failNext -= 1;
      throw new Error('connection terminated unexpectedly');
    }
    if (batch.some((e) => opts.poison?.has((e.decision as { n?: number } | undefined)?.n ?? -1)))
      throw new AuditWriteError('unsupported Unicode escape sequence', '22P05', true);
    stored.push(...batch.map(label));
  };
  const sink: AuditSink = {
    write: (batch) => take(batch),
    writeEncoded: (batch) => take(batch.map(decodeEntry)),
    close: async () => {
      state.closed = true;
    },
  };
  return { sink, stored, state };
}

describe('decision audit: entries not yet encoded', () => {
  it('flush() writes what was pushed while its last batch was being written', async () => {
    let audit: AuditWriter | undefined;
    let late = 100;
    // A Check answered in the same turn as the write's answer: pushed, its encoding not yet run.
    const { sink, stored } = sinkOf({ hook: () => late < 102 && audit?.push(entry(late++)) });
    audit = new AuditWriter(noDb, log, 1000, 100, sink);
    for (let i = 0; i < 3; i++) audit.push(entry(i));
    await audit.flush();
    assert.equal(audit.pending(), 0, 'flush leaves nothing pushed before it returned');
    assert.deepEqual(stored, [0, 1, 2, 100, 101]);
  });

  it('stop() writes what was pushed while its last batch was being written, before the sink closes', async () => {
    let audit: AuditWriter | undefined;
    let late = 100;
    const { sink, stored } = sinkOf({ hook: () => late < 101 && audit?.push(entry(late++)) });
    audit = new AuditWriter(noDb, log, 1000, 100, sink);
    for (let i = 0; i < 3; i++) audit.push(entry(i));
    await audit.stop();
    assert.equal(audit.pending(), 0);
    assert.deepEqual(stored, [0, 1, 2, 100]);
    await turn();
    assert.deepEqual(stored, [0, 1, 2, 100], 'nothing written twice after the encoding turn');
  });

  it('a tick while entries are still unencoded writes them in push order, once each', async () => {
    const { sink, stored } = sinkOf();
    const audit = new AuditWriter(noDb, log, 1000, 100, sink);
    for (let i = 0; i < 3; i++) audit.push(entry(i));
    (audit as unknown as { tick(): void }).tick();
    for (let i = 3; i < 5; i++) audit.push(entry(i));
    assert.equal(audit.pending(), 5);
    await turn();
    await audit.flush();
    await turn();
    assert.deepEqual(stored, [0, 1, 2, 3, 4]);
    assert.equal(audit.pending(), 0);
  });

  it('counts unencoded entries against the bound and the reserve, and records the counted denials last', async () => {
    const { sink, stored, state } = sinkOf({ failNext: 1 });
    const audit = new AuditWriter(noDb, log, 10, 5, sink);
    for (let i = 0; i < 8; i++) audit.push(entry(i));
    await audit.flush(); // fails: all eight stay queued, encoded
    assert.equal(state.writes, 1);
    assert.equal(audit.pending(), 8);
    audit.push(entry(8));
    assert.equal(audit.overloaded(), false);
    audit.push(entry(9)); // unencoded, but counted
    assert.equal(audit.overloaded(), true, 'the bound counts entries not yet encoded');
    for (let i = 10; i < 18; i++) audit.pushFailClosed(entry(i, 'authz.fail_closed'));
    assert.equal(audit.pending(), 15, 'the reserve counts entries not yet encoded');
    assert.equal(audit.unrecordedCount(), 3);
    await audit.flush();
    assert.equal(audit.pending(), 0);
    assert.equal(audit.unrecordedCount(), 0);
    assert.deepEqual(stored, [...Array.from({ length: 15 }, (_, i) => i), 'authz.unrecorded']);
  });

  it('after a transient failure mid-way through a batch, a poison entry is still recorded and the rest written once', async () => {
    // Entry 3 is refused by the database; the one-by-one pass fails transiently at entry 1.
    const poison = new Set([3]);
    let n = 0;
    const { sink, stored, state } = sinkOf({
      poison,
      hook: () => {
        n += 1;
        if (n === 3) state.failNext = 1; // batch, entry 0, then entry 1 fails
      },
    });
    const audit = new AuditWriter(noDb, log, 1000, 100, sink);
    for (let i = 0; i < 6; i++) audit.push(entry(i));
    await audit.flush();
    assert.deepEqual(stored, [0], 'written before the transient failure');
    assert.equal(audit.pending(), 5);
    await audit.flush();
    assert.equal(audit.pending(), 0);
    assert.deepEqual(stored, [0, 1, 2, 'audit.unwritable', 4, 5]);
  });
});
