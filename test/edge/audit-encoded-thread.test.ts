/**
 * Encoded batches through the real audit thread (edge/audit-thread.ts) and database: the bytes
 * path stores exactly what the text path stores, whatever the strings hold; the entries' own
 * buffers survive the batch's transfer and a retry; a thread that times out fails only its own
 * batches, not those already sent to the thread that replaced it.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pg from 'pg';
import { audit as auditOwn, verifyChain } from '../../shared/audit.ts';
import { createLogger } from '../../shared/log.ts';
import { AuditThread, AuditWriter, decodeEntry, encodedBatch, encodeEntry } from '../../edge/audit-writer.ts';
import { recordedEntryJson, type RecordedEntry } from '../../edge/decision-inputs.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

const log = createLogger('silent');

/** Strings that UTF-8 and JSON treat specially, and long ones. */
const odd = [
  'plain',
  'lone high \uD800 end',
  'lone low \uDC00 start',
  '\uDBFF',
  'astral \u{1F600}\u{10FFFF}',
  'separators \u2028 and \u2029',
  'nul \u0000 inside',
  '\uFEFFbyte order mark first',
  'controls \u0001\u001f\u007f\u0085',
  'quote " backslash \\ slash /',
  `long ${'\u00e9\u{1F600}x'.repeat(40_000)}`,
];

const oddEntry = (tenantId: string, i: number): RecordedEntry => {
  const s = odd[i % odd.length] ?? '';
  return {
    tenantId,
    actor: { type: 'customer', id: `c${i}${s.slice(0, 40)}` },
    action: 'authz.decision',
    target: { type: 'transaction', id: '/v1/transfers' },
    decision: { allow: true, code: 'OK', n: i },
    attrs: { ua: s, [`k${s.slice(0, 20)}`]: i },
    ts: new Date(Date.UTC(2026, 10, 24, 10, 0, 0, i)),
  };
};

const rowsOf = async (t: TestDb, tenant: string) =>
  (
    await t.db.query<{
      ts: Date;
      actor: unknown;
      action: string;
      target: unknown;
      decision: unknown;
      attrs: unknown;
    }>(`SELECT ts, actor, action, target, decision, attrs FROM audit_log WHERE tenant_id = $1 ORDER BY id`, [
      tenant,
    ])
  ).rows;

describe('encoded audit batches on the real thread', () => {
  it('stores from bytes exactly what it stores from text, for any string', async () => {
    const t = await freshDatabase();
    const sink = new AuditThread(t.url);
    try {
      const text = odd.map((_, i) => oddEntry('ta', i));
      const bytes = odd.map((_, i) => oddEntry('tb', i));
      for (const e of bytes) {
        const b = encodeEntry(e);
        assert.equal(b.toString('utf8'), recordedEntryJson(e), 'the text as the text path sends it');
        assert.deepEqual(
          decodeEntry(b),
          JSON.parse(recordedEntryJson(e), (k, v) => (k === 'ts' ? new Date(v) : v)),
        );
      }
      const batch = encodedBatch(bytes.map(encodeEntry));
      assert.deepEqual(
        JSON.parse(new TextDecoder().decode(batch)),
        JSON.parse(`[${bytes.map((e) => recordedEntryJson(e)).join(',')}]`),
      );
      await sink.write(text);
      await sink.writeEncoded(bytes.map(encodeEntry));
      const [a, b] = [await rowsOf(t, 'ta'), await rowsOf(t, 'tb')];
      assert.equal(a.length, odd.length);
      assert.deepEqual(b, a);
      assert.deepEqual(await verifyChain(t.db, 'ta'), { ok: true, count: odd.length });
      assert.deepEqual(await verifyChain(t.db, 'tb'), { ok: true, count: odd.length });
    } finally {
      await sink.close();
      await t.drop();
    }
  });

  it('keeps each entry`s bytes across the batch`s transfer and a failed send, and writes them once', async () => {
    const t = await freshDatabase();
    const sink = new AuditThread(t.url);
    const writer = new AuditWriter(t.db, log, 1000, 100, sink);
    try {
      await t.db.query('ALTER TABLE audit_log RENAME TO audit_log_away');
      const parts = [0, 1, 2].map((i) => encodeEntry(oddEntry('ta', i)));
      const copies = parts.map((p) => Buffer.from(p));
      await assert.rejects(sink.writeEncoded(parts));
      // Small entries live in slices of Buffer's shared pool: none was detached by the transfer.
      parts.forEach((p, i) => {
        assert.ok(p.buffer.byteLength > 0);
        assert.deepEqual(p, copies[i]);
      });
      const small = Buffer.from('{"x":1}');
      assert.equal(small.toString(), '{"x":1}', 'the shared pool still works');
      for (let i = 0; i < 20; i++) writer.push(oddEntry('ta', i));
      await writer.flush();
      assert.equal(writer.pending(), 20, 'kept after the failed transfer');
      await t.db.query('ALTER TABLE audit_log_away RENAME TO audit_log');
      await sink.writeEncoded(parts);
      await writer.flush();
      assert.equal(writer.pending(), 0);
      const rows = await rowsOf(t, 'ta');
      assert.deepEqual(
        rows.map((r) => (r.decision as { n: number }).n),
        [0, 1, 2, ...Array.from({ length: 20 }, (_, i) => i)],
      );
      assert.deepEqual(await verifyChain(t.db, 'ta'), { ok: true, count: 23 });
    } finally {
      await writer.stop();
      await t.drop();
    }
  });

  it('a batch sent to the new thread is not failed by the exit of the thread that timed out', async () => {
    const t = await freshDatabase();
    await auditOwn(t.db, oddEntry('ta', 0));
    // Holding tenant ta's chain head: the first thread's write waits on it until it times out.
    const holder = new pg.Client({ connectionString: t.url });
    await holder.connect();
    await holder.query('BEGIN');
    await holder.query(`SELECT 1 FROM audit_chain_heads WHERE tenant_id = 'ta' FOR UPDATE`);
    const sink = new AuditThread(t.url, 4000);
    try {
      await assert.rejects(sink.writeEncoded([encodeEntry(oddEntry('ta', 1))]), /did not answer/);
      // At once, as a flush right after the failure would: a new thread takes it.
      await sink.writeEncoded([encodeEntry(oddEntry('tb', 2))]);
      await holder.query('ROLLBACK');
      assert.equal((await rowsOf(t, 'tb')).length, 1);
    } finally {
      await holder.end();
      await sink.close();
      await t.drop();
    }
  });

  it('settles a batch in flight when the thread is closed, and a settled write is stored', async () => {
    const t = await freshDatabase();
    const sink = new AuditThread(t.url);
    try {
      await sink.write([]);
      const sent = sink.writeEncoded(Array.from({ length: 50 }, (_, i) => encodeEntry(oddEntry('ta', i))));
      const outcome = sent.then(
        () => 'stored',
        () => 'failed',
      );
      await sink.close();
      const got = await outcome;
      const rows = await rowsOf(t, 'ta');
      assert.equal(rows.length, got === 'stored' ? 50 : rows.length);
      assert.ok(rows.length === 0 || rows.length === 50, 'all of the batch or none');
      await assert.rejects(sink.writeEncoded([encodeEntry(oddEntry('ta', 99))]), /closed/);
    } finally {
      await t.drop();
    }
  });
});

const platformActions = async (t: TestDb) =>
  (
    await t.db.query<{ action: string }>(`SELECT action FROM audit_log WHERE tenant_id = '_platform'`)
  ).rows.map((r) => r.action);

describe('an encoded entry that does not read as JSON', () => {
  it('is recorded as audit.unwritable and the others are written, the thread answering instead of dying', async () => {
    const t = await freshDatabase();
    const audit = new AuditWriter(t.db, log, 1000, 100, new AuditThread(t.url));
    audit.recordInputs({ sample: 1, retentionDays: () => undefined });
    const replay = (inputJson: string) => ({
      inputJson,
      allow: true,
      policyVersion: 'p',
      route: 'POST /v1/transfers',
    });
    try {
      audit.push(oddEntry('tz', 0), replay('{"a":1}'));
      audit.push(oddEntry('tz', 1), replay('{"a":')); // what policyInputJson can never give
      audit.push(oddEntry('tz', 2), replay('{"b":2}'));
      await new Promise<void>((r) => setImmediate(r));
      await audit.flush();
      assert.equal(audit.pending(), 0, 'nothing left to retry for ever');
      // Its record goes into its own tenant's chain, saying who, what and when (all but the input reads).
      const rows = await rowsOf(t, 'tz');
      assert.deepEqual(
        rows.map((r) => [r.action, (r.decision as { n: number } | null)?.n]),
        [
          ['authz.decision', 0],
          ['audit.unwritable', undefined],
          ['authz.decision', 2],
        ],
      );
      const lost = rows[1];
      assert.deepEqual(lost?.actor, { type: 'customer', id: 'c1lone high ? end' }); // unwritable()'s printable ASCII
      assert.deepEqual(lost?.target, oddEntry('tz', 1).target);
      assert.equal(lost?.ts.getTime(), oddEntry('tz', 1).ts?.getTime());
      assert.equal((lost?.attrs as Record<string, unknown>).original_action, 'authz.decision');
      assert.match(String((lost?.attrs as Record<string, unknown>).error), /JSON/);
      assert.deepEqual(await platformActions(t), []);
    } finally {
      await audit.stop();
      await t.drop();
    }
  });
});

describe('the record of an encoded entry that does not read', () => {
  it('carries no text of the unscrubbed input (JSON.parse quotes the bytes around the error)', async () => {
    const t = await freshDatabase();
    const messages: string[] = [];
    const spy = {
      ...log,
      error: (o: { err?: unknown }) => messages.push(String(o.err)),
      warn: (o: { err?: unknown }) => messages.push(String(o.err)),
    } as unknown as typeof log;
    const audit = new AuditWriter(t.db, spy, 1000, 100, new AuditThread(t.url));
    audit.recordInputs({ sample: 1, retentionDays: () => undefined });
    try {
      audit.push(oddEntry('tz', 0), {
        inputJson: '{"password":["hunter2",]}',
        allow: true,
        policyVersion: 'p',
        route: 'POST /v1/transfers',
      });
      await new Promise<void>((r) => setImmediate(r));
      await audit.flush();
      assert.equal(audit.pending(), 0);
      const rows = await rowsOf(t, 'tz');
      assert.deepEqual(
        rows.map((r) => r.action),
        ['audit.unwritable'],
      );
      assert.match(String((rows[0]?.attrs as Record<string, unknown>).error), /JSON/);
      assert.doesNotMatch(JSON.stringify(rows), /hunter2/);
      assert.doesNotMatch(messages.join('\n'), /hunter2/);
    } finally {
      await audit.stop();
      await t.drop();
    }
  });
});

describe('a batch that reads as more entries than were sent', () => {
  /** A replay input that closes its entry and opens one of tenant `victim`: balanced, and never what policyInputJson gives. */
  const forging = (victim: string) =>
    `{}}},{"tenantId":"${victim}","actor":{"type":"staff","id":"forged"},"action":"authz.decision",` +
    `"target":{"type":"transaction","id":"x"},"decision":{"allow":true},"attrs":{},"replay":{"input":{}`;
  const replay = (inputJson: string) => ({ inputJson, allow: true, policyVersion: 'p', route: 'POST /v1/x' });

  it('is refused as poison: nothing in the other tenant, the entry recorded as unwritable in its own, the rest written', async () => {
    const t = await freshDatabase();
    const audit = new AuditWriter(t.db, log, 1000, 100, new AuditThread(t.url));
    audit.recordInputs({ sample: 1, retentionDays: () => undefined });
    try {
      const crafted: RecordedEntry = { ...oddEntry('tz', 1), replay: replay(forging('victim')) };
      // As it would cross to the thread: a second, well-formed entry of the other tenant appears.
      const read = JSON.parse(`[${recordedEntryJson(crafted)}]`) as { tenantId: string }[];
      assert.deepEqual(
        read.map((e) => e.tenantId),
        ['tz', 'victim'],
      );
      audit.push(oddEntry('tz', 0), replay('{"a":1}'));
      audit.push(oddEntry('tz', 1), replay(forging('victim')));
      audit.push(oddEntry('tz', 2), replay('{"b":2}'));
      await new Promise<void>((r) => setImmediate(r));
      await audit.flush();
      assert.equal(audit.pending(), 0);
      assert.deepEqual(await rowsOf(t, 'victim'), [], "nothing written in the other tenant's chain");
      const rows = await rowsOf(t, 'tz');
      assert.deepEqual(
        rows.map((r) => [r.action, (r.decision as { n: number } | null)?.n]),
        [
          ['authz.decision', 0],
          ['audit.unwritable', undefined],
          ['authz.decision', 2],
        ],
      );
      assert.match(
        String((rows[1]?.attrs as Record<string, unknown>).error),
        /reads as 2 entries, not the 1 sent/,
      );
      assert.deepEqual(await verifyChain(t.db, 'tz'), { ok: true, count: 3 });
      assert.deepEqual(await platformActions(t), []);
    } finally {
      await audit.stop();
      await t.drop();
    }
  });

  it('is refused whole on the text path too (entries sent as objects)', async () => {
    const t = await freshDatabase();
    const sink = new AuditThread(t.url);
    try {
      const crafted: RecordedEntry = { ...oddEntry('tz', 1), replay: replay(forging('victim')) };
      await assert.rejects(sink.write([oddEntry('tz', 0), crafted]), { poison: true });
      assert.deepEqual(await rowsOf(t, 'victim'), []);
      assert.deepEqual(await rowsOf(t, 'tz'), [], 'none of the batch');
    } finally {
      await sink.close();
      await t.drop();
    }
  });
});
