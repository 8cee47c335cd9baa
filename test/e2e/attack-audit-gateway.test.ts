/**
 * Attacks on the edge's decision audit through the dev gateway: hostile text in the audited
 * fields (user agent as raw bytes, path), many concurrent callers of two tenants and a policy
 * denial. Every decision is recorded once, in its caller's chain, with the text as the gateway
 * read it; no chain breaks, no audit.unwritable, never a 5xx.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { verifyChain } from '../../shared/audit.ts';
import { startE2eStack, type E2eStack } from '../helpers/e2e-stack.ts';
import { tenantWithAdmin } from '../helpers/tenants.ts';

interface Demo {
  serviceTokens: Record<'admin' | 'readOnly', { token: string }>;
}

/** One HTTP/1.1 request written as raw bytes (header values as sent, not as Node would encode them); its status. */
function rawRequest(
  port: number,
  method: string,
  path: Buffer,
  headers: [string, Buffer][],
  body = Buffer.alloc(0),
): Promise<number> {
  const head = Buffer.concat([
    Buffer.from(`${method} `),
    path,
    Buffer.from(' HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n'),
    Buffer.from(`content-length: ${body.length}\r\ncontent-type: application/json\r\n`),
    ...headers.flatMap(([k, v]) => [Buffer.from(`${k}: `), v, Buffer.from('\r\n')]),
    Buffer.from('\r\n'),
    body,
  ]);
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => s.write(head));
    const got: Buffer[] = [];
    s.on('data', (d: Buffer) => got.push(d));
    s.on('error', reject);
    s.on('close', () => {
      const m = /^HTTP\/1\.1 (\d{3})/.exec(Buffer.concat(got).toString('latin1'));
      m ? resolve(Number(m[1])) : reject(new Error('no status line'));
    });
  });
}

/** `probe`'s value once it stops throwing (10 s at most). */
async function poll<T>(probe: () => Promise<T>): Promise<T> {
  const until = Date.now() + 10_000;
  for (;;) {
    try {
      return await probe();
    } catch (err) {
      if (Date.now() > until) throw err;
      await new Promise((res) => setTimeout(res, 100));
    }
  }
}

/** Hostile JSON bodies: escapes a JSON parser turns into lone surrogates and NULs, splice attempts. */
const bodies: string[] = [
  '{"code":"\\ud800","category":"\\udfff\\u0000"}',
  '{"code":"X\\",\\"replay\\":{}}}","category":"\\u2028\\u2029"}',
  '{"code":"Y","category":"}},\\"tenantId\\":\\"OTHER\\",\\"replay\\":","tenantId":"\\ud83d"}',
  `{"code":"${'\\ud800'.repeat(600)}","category":"${'","replay":'.replaceAll('"', '\\"').repeat(100)}"}`,
];

/** Hostile user agents as raw bytes. */
const hostile: Buffer[] = [
  Buffer.from([0x61, 0xed, 0xa0, 0x80, 0x62]), // a lone high surrogate encoded as UTF-8 (CESU)
  Buffer.from([0xed, 0xbf, 0xbf]), // a lone low surrogate
  Buffer.from('sep\u2028line\u2029para', 'utf8'),
  Buffer.from([0x6e, 0xc0, 0x80, 0x75, 0x6c]), // overlong NUL
  Buffer.from('lit\\u0000eral \\ud800'),
  Buffer.from('x","replay":{"a":1}}'),
  Buffer.from('"}},"tenantId":"OTHER","replay":{}}'),
  Buffer.from(`${'","replay":'.repeat(400)}}}${'}'.repeat(3000)}`),
  Buffer.from('A'.repeat(15_000)),
  Buffer.from([0xff, 0xfe, 0x80, 0x22, 0x7d, 0x7d]),
];

describe('decision audit under hostile input through the gateway', () => {
  let e2e: E2eStack;
  let port: number;
  let admin: string;
  let readOnly: string;
  let other: string;
  const otherTenant = `atkaud-${randomUUID().slice(0, 6)}`;

  before(async () => {
    e2e = await startE2eStack('attack-audit-gw');
    port = e2e.stack.ports.gateway;
    const demo = e2e.demo as Demo;
    admin = demo.serviceTokens.admin.token;
    readOnly = demo.serviceTokens.readOnly.token;
    other = await tenantWithAdmin(e2e.gw, admin, e2e.tdb.db, otherTenant);
  });
  after(async () => {
    await e2e?.stop();
  });

  it('records every decision once, in its own chain, with the text as read', async () => {
    const probe = randomUUID();
    const first = await rawRequest(port, 'GET', Buffer.from('/v1/countries'), [
      ['authorization', Buffer.from(`Bearer ${admin}`)],
      ['x-request-id', Buffer.from(probe)],
    ]);
    assert.equal(first, 200);
    const adminTenant = await poll(async () => {
      const { rows } = await e2e.tdb.db.query<{ tenant_id: string }>(
        `SELECT tenant_id FROM audit_log WHERE action = 'authz.decision' AND decision->>'trace_id' = $1`,
        [probe],
      );
      assert.equal(rows.length, 1);
      return (rows[0] as { tenant_id: string }).tenant_id;
    });
    type Sent = { id: string; tenant: string; ua: string; status: Promise<number> };
    let sent: Sent[] = [];
    const paths = [
      Buffer.from('/v1/countries'),
      Buffer.from('/v1/x%22,%22replay%22:%7B%7D%7D%7D'),
      Buffer.from('/v1/","replay":{}}}/%E2%80%A8'),
      Buffer.from([0x2f, 0x76, 0x31, 0x2f, 0xed, 0xa0, 0x80, 0x22, 0x7d, 0x7d]), // /v1/ + a CESU lone surrogate + "}}
    ];
    for (let round = 0; round < 16; round++) {
      for (const [i, ua] of hostile.entries()) {
        for (const [token, tenant] of [
          [admin, adminTenant],
          [other, otherTenant],
          [readOnly, adminTenant],
        ] as const) {
          const id = randomUUID();
          const isDenial = token === readOnly;
          const post = isDenial || (round + i) % 3 === 0;
          const path = post ? Buffer.from('/v1/products') : (paths[(round + i) % paths.length] as Buffer);
          const headers: [string, Buffer][] = [
            ['authorization', Buffer.from(`Bearer ${token}`)],
            ['x-request-id', Buffer.from(id)],
            ['user-agent', ua],
            ['idempotency-key', Buffer.from(`k-${id}`)],
          ];
          // An unmapped route authenticates nobody: its denial is chained under _platform.
          const mapped = post || path.toString() === '/v1/countries';
          sent.push({
            id,
            tenant: path.some((b) => b > 0x7f) ? 'unparsed' : mapped ? tenant : '_platform',
            ua: ua.toString('latin1'),
            status: rawRequest(
              port,
              post ? 'POST' : 'GET',
              path,
              headers,
              post ? Buffer.from(bodies[(round + i) % bodies.length] as string) : undefined,
            ),
          });
        }
      }
    }
    const answered = await Promise.all(sent.map((s) => s.status));
    for (const [i, s] of answered.entries()) assert.ok(s < 500, `request ${i} answered ${s}`);
    // A request line with bytes outside ASCII is refused by the HTTP parser: no decision to audit.
    const unparsed = sent.filter((s) => s.tenant === 'unparsed');
    assert.ok(unparsed.length > 0);
    for (const [i, s] of sent.entries()) if (s.tenant === 'unparsed') assert.equal(answered[i], 400);
    const statuses = answered.filter((_, i) => sent[i]?.tenant !== 'unparsed');
    sent = sent.filter((s) => s.tenant !== 'unparsed');

    const rows = await poll(async () => {
      const { rows } = await e2e.tdb.db.query<{
        tenant_id: string;
        attrs: { ua: string };
        decision: { trace_id: string; allow: boolean };
      }>(
        `SELECT tenant_id, actor, target, attrs, decision FROM audit_log WHERE action = 'authz.decision' AND decision->>'trace_id' = ANY($1)`,
        [sent.map((s) => s.id)],
      );
      const seen = new Set(rows.map((r) => r.decision.trace_id));
      const missing = sent.flatMap((s, i) =>
        seen.has(s.id) ? [] : [[i, statuses[i], s.tenant, s.ua.slice(0, 30)]],
      );
      assert.deepEqual(missing, []);
      return rows;
    });
    // Exactly once: no decision written twice (a retried batch, a trace audited as a second row).
    await new Promise((res) => setTimeout(res, 300));
    const { rows: twice } = await e2e.tdb.db.query(
      `SELECT decision->>'trace_id' AS t, count(*)::int AS n FROM audit_log
        WHERE action = 'authz.decision' AND decision->>'trace_id' = ANY($1) GROUP BY 1 HAVING count(*) > 1`,
      [sent.map((s) => s.id)],
    );
    assert.deepEqual(twice, []);
    const byId = new Map(rows.map((r) => [r.decision.trace_id, r]));
    for (const s of sent) {
      const r = byId.get(s.id);
      assert.ok(r, s.id);
      assert.equal(
        r.tenant_id,
        s.tenant,
        `${s.id} chained under ${r.tenant_id}: ${JSON.stringify(r).slice(0, 600)}`,
      );
      assert.equal(r.attrs.ua, s.ua, `ua of ${s.id}`);
    }
    // The denials' traces were audited too (a turn later), still in the right chain.
    const denials = rows.filter((r) => r.decision.allow === false);
    assert.ok(denials.length >= hostile.length * 16);
    const unwritable = await e2e.tdb.db.query(
      `SELECT tenant_id, attrs FROM audit_log WHERE action LIKE 'audit.un%'`,
    );
    assert.deepEqual(unwritable.rows, []);
    const tenants = await e2e.tdb.db.query<{ tenant_id: string }>(`SELECT DISTINCT tenant_id FROM audit_log`);
    for (const { tenant_id } of tenants.rows) {
      const v = await verifyChain(e2e.tdb.db, tenant_id);
      assert.equal(v.ok, true, `${tenant_id}: ${JSON.stringify(v)}`);
    }
    assert.ok(!tenants.rows.some((t) => t.tenant_id === 'OTHER'));
    // The decisions' replay inputs (recorded after their audit rows) are in the same tenant as their row.
    const inputs = await poll(async () => {
      const { rows } = await e2e.tdb.db.query<{
        tenant_id: string;
        chain: string;
        input: unknown;
        t: string;
      }>(
        `SELECT i.tenant_id, a.tenant_id AS chain, i.input, a.decision->>'trace_id' AS t FROM decision_inputs i
           JOIN audit_log a ON a.id = i.audit_id
          WHERE a.decision->>'trace_id' = ANY($1)`,
        [sent.map((s) => s.id)],
      );
      const got = new Set(rows.map((r) => r.t));
      // Unmapped routes record no replay input (it would name a raw path).
      const lacking = sent.flatMap((s, i) =>
        got.has(s.id) || s.tenant === '_platform' ? [] : [[i, statuses[i], s.tenant, s.ua.slice(0, 20)]],
      );
      assert.deepEqual(lacking, []);
      return rows;
    });
    for (const r of inputs) assert.equal(r.tenant_id, r.chain);
  });
});
