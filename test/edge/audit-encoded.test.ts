/**
 * The decision audit's entries encoded as they come (edge/audit-writer.ts `encodeEntry`): for a
 * sink that takes encoded entries (the audit thread), the writer keeps each entry's JSON as bytes
 * instead of its objects, encodes after the turn's answers, and still writes every entry once, in
 * push order, with poison entries recorded as audit.unwritable and failed batches sent again.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Db } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';
import {
  AuditWriter,
  type AuditSink,
  decodeEntry,
  encodedBatch,
  encodeEntry,
} from '../../edge/audit-writer.ts';
import { recordedEntryJson, type RecordedEntry } from '../../edge/decision-inputs.ts';

const log = createLogger('silent');
const noDb = {} as Db;
const entry = (i: number): RecordedEntry => ({
  tenantId: 'ta',
  actor: { type: 'customer', id: `c${i}` },
  action: 'authz.decision',
  target: { type: 'transaction', id: '/v1/transfers' },
  decision: { allow: true, code: 'OK', n: i },
  attrs: { ip: '203.0.113.9', ua: 'x\u{1F600}\uD800y' },
});
const input = (i: number) => ({
  inputJson: JSON.stringify({ subject: { id: `c${i}` }, note: 'caf\u00e9 \uDC00' }),
  allow: true,
  policyVersion: 'p1',
  route: 'POST /v1/transfers',
});

/** A sink that takes encoded entries and records what it got; `fail` makes the next writes throw. */
function recordingSink() {
  const got = { encoded: [] as Buffer[][], objects: [] as RecordedEntry[][], fail: 0 };
  const sink: AuditSink = {
    async write(batch) {
      if (got.fail > 0 && got.fail--) throw new Error('connection refused');
      for (const e of batch)
        JSON.stringify(e, (_k, v: unknown) => {
          if (typeof v === 'number' && !Number.isFinite(v)) throw new TypeError('not storable');
          return v;
        });
      got.objects.push(batch);
    },
    async writeEncoded(batch) {
      if (got.fail > 0 && got.fail--) throw new Error('connection refused');
      got.encoded.push([...batch]);
    },
  };
  return { sink, got };
}
const n = (e: RecordedEntry) => (e.decision as { n: number }).n;

describe('decision audit entries encoded as they come', () => {
  it('encodes an entry as the JSON the audit thread reads, input text included, and decodes it back', () => {
    const e: RecordedEntry = { ...entry(1), ts: new Date('2026-11-24T10:00:00.000Z'), replay: input(1) };
    const bytes = encodeEntry(e);
    assert.equal(bytes.toString('utf8'), recordedEntryJson(e));
    const back = decodeEntry(bytes);
    assert.deepEqual(back.ts, e.ts);
    assert.deepEqual(back.attrs, e.attrs, 'lone surrogates and astral characters survive');
    assert.deepEqual(back.replay?.input, JSON.parse(input(1).inputJson));
    assert.throws(() => encodeEntry({ ...entry(2), attrs: { risk: Number.NaN } }), TypeError);
    const batch = encodedBatch([encodeEntry(entry(1)), encodeEntry(entry(2))]);
    assert.deepEqual((JSON.parse(batch.toString('utf8')) as RecordedEntry[]).map(n), [1, 2]);
    assert.equal(encodedBatch([]).toString(), '[]');
    assert.equal(batch.byteOffset, 0, 'a buffer of its own: transferable');
    assert.equal(batch.buffer.byteLength, batch.length);
  });

  it('encodes after the turn, counts the entries meanwhile, and writes them once each in push order', async () => {
    const { sink, got } = recordingSink();
    const audit = new AuditWriter(noDb, log, 1000, 100, sink);
    audit.recordInputs({ sample: 1, retentionDays: () => 30 });
    for (let i = 0; i < 300; i++) audit.push(entry(i), i % 2 === 0 ? input(i) : undefined);
    assert.equal(audit.pending(), 300, 'not yet encoded, still counted');
    await new Promise<void>((r) => setImmediate(r));
    await audit.flush();
    assert.equal(audit.pending(), 0);
    assert.equal(got.objects.length, 0, 'every batch went encoded');
    const written = got.encoded.flat().map(decodeEntry);
    assert.deepEqual(
      written.map(n),
      Array.from({ length: 300 }, (_, i) => i),
    );
    assert.deepEqual(written[0]?.replay?.input, JSON.parse(input(0).inputJson));
    assert.equal(written[0]?.replay?.retentionDays, 30);
    assert.equal(written[1]?.replay, undefined);
    await audit.stop();
  });

  it("encodes a turn's entries into one buffer of their own, exactly their size (no slice of Node's shared pool)", async () => {
    const { sink, got } = recordingSink();
    const audit = new AuditWriter(noDb, log, 1000, 100, sink);
    for (let i = 0; i < 3; i++) audit.push(entry(i));
    await new Promise<void>((r) => setImmediate(r));
    await audit.flush();
    const parts = got.encoded.flat();
    assert.equal(parts.length, 3);
    const backing = parts[0]?.buffer;
    assert.ok(
      parts.every((b) => b.buffer === backing),
      'one buffer for the turn',
    );
    assert.equal(
      backing?.byteLength,
      parts.reduce((n, b) => n + b.length, 0),
    );
    assert.deepEqual(
      parts.map((b) => b.toString('utf8')),
      [0, 1, 2].map((i) => recordedEntryJson(entry(i))),
    );
    await audit.stop();
  });

  it('refuses decisions once entries not yet encoded reach the bound', () => {
    const { sink } = recordingSink();
    const audit = new AuditWriter(noDb, log, 10, 5, sink);
    for (let i = 0; i < 10; i++) audit.push(entry(i));
    assert.equal(audit.overloaded(), true);
  });

  it('sends a failed batch again, the same bytes, and nothing twice', async () => {
    const { sink, got } = recordingSink();
    const audit = new AuditWriter(noDb, log, 1000, 100, sink);
    for (let i = 0; i < 5; i++) audit.push(entry(i), input(i));
    got.fail = 1;
    await audit.flush();
    assert.equal(audit.pending(), 5, 'kept after a transient failure');
    await audit.flush();
    assert.equal(audit.pending(), 0);
    assert.deepEqual(got.encoded.flat().map(decodeEntry).map(n), [0, 1, 2, 3, 4]);
    await audit.stop();
  });

  it('records an entry that cannot be encoded as audit.unwritable and writes the others around it', async () => {
    const { sink, got } = recordingSink();
    const audit = new AuditWriter(noDb, log, 1000, 100, sink);
    audit.push(entry(0), input(0));
    audit.push({ ...entry(1), attrs: { risk: Number.POSITIVE_INFINITY } });
    audit.push(entry(2));
    await audit.flush();
    assert.equal(audit.pending(), 0);
    const written = [...got.encoded.flat().map(decodeEntry), ...got.objects.flat()];
    assert.deepEqual(
      written.map((e) => e.action),
      ['authz.decision', 'authz.decision', 'audit.unwritable'],
    );
    assert.deepEqual(written.slice(0, 2).map(n), [0, 2]);
    assert.equal(written[2]?.attrs?.original_action, 'authz.decision');
    await audit.stop();
  });
});

describe('a batch of 128 mixing an unencodable object, unreadable bytes and a transient failure', () => {
  it('writes every good entry once, records both bad ones once, and loses nothing', async () => {
    const written: RecordedEntry[] = [];
    let calls = 0;
    const sink: AuditSink = {
      async write(batch) {
        for (const e of batch)
          if (Number.isNaN((e.attrs as { risk?: number } | undefined)?.risk))
            throw new TypeError('not storable');
        written.push(...batch);
      },
      async writeEncoded(batch) {
        calls += 1;
        if (calls === 40) throw new Error('connection refused'); // in the middle of the one-by-one pass
        let read: RecordedEntry[];
        try {
          read = JSON.parse(encodedBatch(batch).toString('utf8')) as RecordedEntry[];
        } catch {
          throw Object.assign(new Error('audit batch does not read as JSON'), { poison: true });
        }
        written.push(...read);
      },
    };
    const audit = new AuditWriter(noDb, log, 1000, 100, sink);
    audit.recordInputs({ sample: 1, retentionDays: () => undefined });
    for (let i = 0; i < 128; i++) {
      if (i === 5) audit.push({ ...entry(i), attrs: { risk: Number.NaN } });
      else if (i === 60) audit.push(entry(i), { ...input(i), inputJson: '{"a":' });
      else audit.push(entry(i));
    }
    await new Promise<void>((r) => setImmediate(r));
    await audit.flush();
    await audit.flush(); // the one after the transient failure, if the first drain was the full batch's tick
    assert.ok(calls > 40, 'the transient failure happened');
    assert.equal(audit.pending(), 0);
    const good = written.filter((e) => e.action === 'authz.decision').map(n);
    assert.deepEqual(
      good,
      [...Array(128).keys()].filter((i) => i !== 5 && i !== 60),
    );
    const lost = written.filter((e) => e.action === 'audit.unwritable');
    assert.deepEqual(
      lost.map((e) => [e.tenantId, e.actor.id, e.attrs?.original_action]),
      [
        ['ta', 'c5', 'authz.decision'],
        ['ta', 'c60', 'authz.decision'],
      ],
    );
  });
});

describe('an entry whose time is not a time', () => {
  it('is recorded as audit.unwritable without it instead of being retried for ever', async () => {
    const written: RecordedEntry[] = [];
    const sink: AuditSink = {
      async write(batch) {
        for (const e of batch) e.ts?.toISOString(); // what appendAudit does: RangeError for an invalid Date
        written.push(...batch);
      },
    };
    const audit = new AuditWriter(noDb, log, 1000, 100, sink);
    audit.push(entry(0));
    audit.push({ ...entry(1), ts: new Date(Number.NaN) });
    audit.push(entry(2));
    await audit.flush();
    assert.equal(audit.pending(), 0);
    assert.deepEqual(
      written.map((e) => e.action),
      ['authz.decision', 'audit.unwritable', 'authz.decision'],
    );
  });
});
