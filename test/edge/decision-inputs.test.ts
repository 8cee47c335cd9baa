import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { AuditThread, AuditWriter, inlineSink, type AuditSink } from '../../edge/audit-writer.ts';
import {
  expireDecisionInputs,
  recordDecisionInputs,
  Scrubber,
  truncateIp,
  type RecordedEntry,
} from '../../edge/decision-inputs.ts';
import { createLogger } from '../../shared/log.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

const log = createLogger('silent');
const key = randomBytes(32);

/** A policy input shaped like edge/authz.ts builds it, with a few things that must never be kept. */
const inputOf = (customer: string, extra: Record<string, unknown> = {}) => ({
  tenant: {
    id: 'ta',
    status: 'ACTIVE',
    security: {},
    tuples: [{ relation: 'owner', object_ns: 'tenant', object_id: 'tb', caveat: {} }],
  },
  subject: {
    id: customer,
    type: 'customer',
    roles: [],
    aal: 1,
    amr: ['pin'],
    tuples: [
      { relation: 'owner', object_ns: 'account', object_id: `acct-${customer}`, caveat: {} },
      { relation: 'member', object_ns: 'tenant', object_id: 'ta', caveat: {} },
    ],
  },
  resource: { type: 'account', id: `acct-${customer}`, tenant_id: 'ta', attrs: {} },
  action: 'account.read',
  purpose: 'customer.account.view',
  context: {
    ip: '203.0.113.77',
    ua: 'curl/8',
    risk: 'low',
    time: '2026-11-23T10:00:00.000Z',
    now_ns: 1,
    local_hour: 10,
  },
  ...extra,
});

const entry = (i: number, replay?: RecordedEntry['replay'], ts?: Date): RecordedEntry => ({
  tenantId: 'ta',
  actor: { type: 'customer', id: `c${i}` },
  action: 'authz.decision',
  target: { type: 'account', id: '/v1/accounts' },
  decision: { allow: true, code: 'OK', purpose: 'customer.account.view', decision_id: `d${i}` },
  attrs: { method: 'GET' },
  ...(ts ? { ts } : {}),
  ...(replay ? { replay } : {}),
});

async function eventuallyCount(t: TestDb, want: number): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const n = Number(
      (await t.db.query<{ n: string }>('SELECT count(*) AS n FROM decision_inputs')).rows[0]?.n,
    );
    if (n >= want) return n;
    await new Promise((r) => setTimeout(r, 25));
  }
  return Number((await t.db.query<{ n: string }>('SELECT count(*) AS n FROM decision_inputs')).rows[0]?.n);
}

describe('decision inputs recorded for replay (issue 22 item 1)', () => {
  it('pseudonymises personal identifiers per tenant, keeps tenant ids, truncates addresses and drops secrets', () => {
    const s = new Scrubber(key);
    const jwt = 'eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2ln';
    const out = s.scrub(
      'ta',
      inputOf('cust-1', {
        extra: { pin: '4826', otp_code: '123456', refresh_token: 'r1', note: jwt, api_key: 'k', keep: 'x' },
      }),
    ) as ReturnType<typeof inputOf> & { extra: Record<string, unknown> };
    const text = JSON.stringify(out);
    for (const secret of ['4826', '123456', '"r1"', jwt, 'cust-1', '203.0.113.77', 'curl/8'])
      assert.ok(!text.includes(secret), `${secret} is not recorded`);
    assert.deepEqual(out.extra, { note: '[redacted]', keep: 'x' });
    assert.equal(out.context.ip, '203.0.113.0');
    assert.equal(out.tenant.id, 'ta');
    assert.equal(out.resource.tenant_id, 'ta');
    assert.equal(out.tenant.tuples[0]?.object_id, 'tb', 'tenant ids are compared by the policy and kept');
    assert.equal(out.subject.tuples[1]?.object_id, 'ta');
    assert.match(out.subject.id, /^p_[\w-]{22}$/);
    assert.equal(
      out.subject.tuples[0]?.object_id,
      out.resource.id,
      'equal values stay equal, so comparisons replay the same',
    );
    assert.equal(s.pseudonym('ta', 'cust-1'), out.subject.id);
    assert.notEqual(s.pseudonym('tb', 'cust-1'), out.subject.id, 'another tenant, another key');
    assert.notEqual(
      new Scrubber(randomBytes(32)).pseudonym('ta', 'cust-1'),
      out.subject.id,
      'another key, another pseudonym',
    );
    assert.equal(truncateIp('2001:db8:1234:5678::1'), '2001:db8:1234::');
    assert.equal(truncateIp('::ffff:198.51.100.20'), '198.51.100.0');
    assert.equal(truncateIp('not an address'), '');
  });

  it('the audit thread writes each sampled input after its audit record, linked by id', async () => {
    const t = await freshDatabase();
    const audit = new AuditWriter(
      t.db,
      log,
      1000,
      100,
      new AuditThread(t.url, undefined, { key, retentionHours: 24, maxBytes: 1 << 30 }),
    );
    audit.recordInputs({ sample: 1, retentionDays: (p) => (p === 'customer.account.view' ? 30 : undefined) });
    try {
      for (let i = 0; i < 5; i++)
        audit.push(entry(i), { input: inputOf(`cust-${i}`), allow: true, policyVersion: 'v1' });
      audit.push(entry(5));
      await audit.flush();
      assert.equal(await eventuallyCount(t, 5), 5);
      const { rows } = await t.db.query<{
        decision_id: string;
        route: string;
        purpose: string;
        policy_version: string;
        linked: string;
        subject: string;
      }>(
        `SELECT i.decision_id, i.route, i.purpose, i.policy_version, a.decision->>'decision_id' AS linked, i.input->'subject'->>'id' AS subject
         FROM decision_inputs i JOIN audit_log a ON a.id = i.audit_id ORDER BY i.audit_id`,
      );
      assert.deepEqual(
        rows.map((r) => r.decision_id),
        ['d0', 'd1', 'd2', 'd3', 'd4'],
      );
      assert.ok(
        rows.every(
          (r) =>
            r.linked === r.decision_id &&
            r.route === 'GET /v1/accounts' &&
            r.purpose === 'customer.account.view' &&
            r.policy_version === 'v1',
        ),
      );
      assert.ok(rows.every((r) => r.subject.startsWith('p_')));
      assert.equal(audit.inputStats().sampledOut, 0);
    } finally {
      await audit.stop();
      await t.drop();
    }
  });

  /**
   * The Check hands its input as the JSON text it evaluated (policy/runtime/bundle.ts
   * policyInputJson), spliced into the batch as `input`: each sink must keep exactly what it kept
   * from the input as an object, scrubbed alike, whatever the text holds.
   */
  it('keeps an input given as JSON text exactly as the same input given as an object, on either sink', async () => {
    const hostile = inputOf('cust-x', {
      // Keys a splice could confuse, and text JSON writes escaped or not at all.
      input: { replay: 1, inputJson: '{"a":1}', __proto__text: '}' },
      resource: {
        type: 'transfer',
        id: '</script><!--',
        tenant_id: 'ta',
        attrs: { payer_for: 'cust-y', note: 'a\u2028b\u2029c "q" \\ }' },
      },
      extra: JSON.parse('{"__proto__":{"allow":true},"n":1e300,"neg":-0}') as unknown,
    });
    const attrs = { method: 'POST', replay: 'x', inputJson: '"y"', input: null };
    for (const which of ['thread', 'inline'] as const) {
      const t = await freshDatabase();
      const sink: AuditSink =
        which === 'thread'
          ? new AuditThread(t.url, undefined, { key, retentionHours: 24, maxBytes: 1 << 30 })
          : inlineSink(t.db, { key, retentionHours: 24, maxBytes: 1 << 30 });
      const audit = new AuditWriter(t.db, log, 1000, 100, sink);
      audit.recordInputs({ sample: 1, retentionDays: () => undefined });
      try {
        audit.push({ ...entry(0), attrs }, { input: hostile, allow: true, policyVersion: 'v1' });
        audit.push(
          { ...entry(1), attrs },
          { inputJson: JSON.stringify(hostile), allow: true, policyVersion: 'v1' },
        );
        await audit.flush();
        assert.equal(await eventuallyCount(t, 2), 2, which);
        const { rows } = await t.db.query<{ input: unknown; attrs: unknown }>(
          `SELECT i.input, a.attrs FROM decision_inputs i JOIN audit_log a ON a.id = i.audit_id ORDER BY i.audit_id`,
        );
        assert.equal(rows.length, 2);
        assert.deepEqual(rows[1]?.input, rows[0]?.input, which);
        assert.deepEqual(rows[1]?.attrs, rows[0]?.attrs, which);
        const kept = rows[1]?.input as { subject: { id: string }; input: unknown };
        assert.ok(kept.subject.id.startsWith('p_'), `${which}: the subject is pseudonymised`);
        assert.deepEqual(kept.input, { replay: 1, inputJson: '{"a":1}', __proto__text: '}' });
      } finally {
        await audit.stop();
        await t.drop();
      }
    }
  });

  it('a sample of 0 records no input and counts what it left out', async () => {
    const t = await freshDatabase();
    const audit = new AuditWriter(
      t.db,
      log,
      1000,
      100,
      new AuditThread(t.url, undefined, { key, retentionHours: 24, maxBytes: 1 << 30 }),
    );
    audit.recordInputs({ sample: 0, retentionDays: () => undefined });
    try {
      for (let i = 0; i < 4; i++)
        audit.push(entry(i), { input: inputOf(`cust-${i}`), allow: true, policyVersion: 'v1' });
      await audit.flush();
      assert.equal(
        Number(
          (await t.db.query<{ n: string }>(`SELECT count(*) AS n FROM audit_log WHERE tenant_id = 'ta'`))
            .rows[0]?.n,
        ),
        4,
        'every decision is still audited',
      );
      assert.equal(await eventuallyCount(t, 1), 0);
      assert.equal(audit.inputStats().sampledOut, 4);
    } finally {
      await audit.stop();
      await t.drop();
    }
  });

  it('retention: partitions past the window are dropped, a shorter purpose retention deletes rows, the size cap drops the oldest hours', async () => {
    const t = await freshDatabase();
    try {
      const s = new Scrubber(key);
      const now = Date.parse('2026-11-23T12:30:00Z');
      const at = (h: number) => new Date(now - h * 3_600_000);
      const rows = [
        entry(1, { input: inputOf('a'), allow: true, policyVersion: 'v1' }, at(5)),
        entry(2, { input: inputOf('b'), allow: true, policyVersion: 'v1' }, at(2)),
        entry(3, { input: inputOf('c'), allow: true, policyVersion: 'v1', retentionDays: 0 }, at(1)),
        entry(4, { input: inputOf('d'), allow: false, policyVersion: 'v1' }, at(0)),
      ];
      assert.equal(
        await recordDecisionInputs(t.db, s, { retentionHours: 3 }, rows, [11, 12, 13, 14], now),
        4,
      );
      const parts = async () =>
        (await t.db.query<{ name: string }>('SELECT name FROM decision_inputs_partitions()')).rows.map(
          (r) => r.name,
        );
      assert.deepEqual(
        await parts(),
        [
          'decision_inputs_p2026112307',
          'decision_inputs_p2026112310',
          'decision_inputs_p2026112311',
          'decision_inputs_p2026112312',
        ],
        'one partition per UTC hour',
      );
      const r = await expireDecisionInputs(t.db, { retentionHours: 3, maxBytes: 1 << 30 }, now);
      assert.equal(r.droppedPartitions, 1, 'the 07:00 hour is wholly past the 3 h window');
      assert.equal(r.expiredRows, 1, 'the purpose with 0 days of retention');
      const left = (
        await t.db.query<{ audit_id: string }>('SELECT audit_id FROM decision_inputs ORDER BY audit_id')
      ).rows.map((x) => Number(x.audit_id));
      assert.deepEqual(left, [12, 14]);
      const capped = await expireDecisionInputs(t.db, { retentionHours: 3, maxBytes: 1 }, now);
      assert.deepEqual(
        await parts(),
        ['decision_inputs_p2026112312'],
        'past the cap only the newest hour stays',
      );
      assert.equal(capped.partitions, 1);
    } finally {
      await t.drop();
    }
  });
});
