/**
 * API-key allowlists (SPEC 5.4) in every spelling an operator might paste: each is either stored
 * (201) as a range the edge reads (shared/ip-ranges.ts readRange) holding the addresses meant,
 * or refused 400 VALIDATION_FAILED; none reaches PostgreSQL's cidr to fail there as a 500.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { insideRanges, readRange } from '../../shared/ip-ranges.ts';
import { startTestCore, type TestCore } from '../helpers/core.ts';
import { viaEdge } from '../helpers/edge-auth.ts';
import { call } from '../helpers/http.ts';

describe('API-key allowlist spellings', () => {
  let t: TestCore;
  const admin = viaEdge({ 'x-tenant-id': 't1', 'x-principal-id': 'service-token:admin', 'x-roles': 'admin' });
  before(async () => {
    t = await startTestCore();
    await t.tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('t1', 't1', 'KE', 'KES')`,
    );
  });
  after(() => t.close());

  const create = (range: string) =>
    call(t.origin, 'POST', '/api-keys', {
      json: { name: 'forms', scopes: ['payments:write'], ip_allowlist: [range] },
      headers: admin,
    });

  /** Stored, with an address it must hold and one it must not, as the edge reads the stored range. */
  const kept: [string, string, string][] = [
    ['::ffff:10.0.0.0/104', '::ffff:10.9.9.9', '10.9.9.9'],
    ['::ffff:a00:0/104', '::ffff:10.9.9.9', '::ffff:11.0.0.1'],
    ['::ffff:10.0.0.1/128', '::ffff:10.0.0.1', '::ffff:10.0.0.2'],
    ['0:0:0:0:0:0:0:0/0', '2001:db8::1', '10.0.0.1'],
    ['2001:DB8::/32', '2001:db8:ffff::1', '2001:db9::1'],
    ['2001:0db8:0000::/48', '2001:db8:0:1::1', '2001:db8:1::1'],
    ['10.0.0.0/08', '10.200.0.1', '11.0.0.1'],
    ['10.0.0.1', '10.0.0.1', '10.0.0.2'],
    ['::1', '::1', '::2'],
    [' 192.0.2.0/24 ', '192.0.2.77', '192.0.3.1'],
    ['1:2:3:4:5:6:7::/128', '1:2:3:4:5:6:7:0', '1:2:3:4:5:6:7:1'],
  ];
  const refused = [
    '::ffff:10.0.0.1/104',
    '::ffff:10.0.0.0/95',
    '10.0.0.0/0',
    '::1/0',
    '2001:db8::1/64',
    'fe80::1%eth0/64',
    'fe80::%1/64',
    '010.0.0.0/8',
    '10.0.0/24',
    '10.0.0.0/33',
    '::/129',
    '::/-1',
    '10.0.0.0/',
    '/8',
    '10.0.0.0/8/8',
    '10.0.0.0/8 x',
    '0x0a.0.0.0/8',
    '',
  ];

  for (const [range, inside, outside] of kept)
    it(`keeps ${JSON.stringify(range)} as a range holding ${inside}, not ${outside}`, async () => {
      const r = await create(range);
      assert.equal(r.status, 201, r.text);
      const got = await call(t.origin, 'GET', `/api-keys/${r.json.id}`, { headers: admin });
      const stored = got.json.ip_allowlist as string[];
      assert.equal(stored.length, 1);
      assert.ok(readRange(stored[0] as string), `the edge reads ${stored[0]}`);
      assert.equal(insideRanges(stored, inside), true, `${stored[0]} holds ${inside}`);
      assert.equal(insideRanges(stored, outside), false, `${stored[0]} does not hold ${outside}`);
    });

  it('refuses every other spelling 400 VALIDATION_FAILED, never a 500', async () => {
    for (const range of refused) {
      const r = await create(range);
      assert.equal(r.status, 400, `${JSON.stringify(range)}: ${r.text}`);
      assert.equal(r.json.code, 'VALIDATION_FAILED', r.text);
    }
  });

  // SPEC 2.9: `ip_allowlist` is an array of CIDR. The create answer, GET, the list and the audit
  // record show each range in one form: what the edge reads from the table (`cidr::text`).
  it('shows the allowlist in one form on create, GET, list and in the audit record', async () => {
    const given = [
      '10.0.0.1',
      '2001:DB8::/32',
      '2001:0db8:0000::/48',
      '::ffff:10.0.0.0/104',
      '::ffff:a00:1',
      '10.0.0.0/08',
      ' 192.0.2.0/24 ',
      '1:2:3:4:5:6:7::/128',
      '0:0:0:0:0:0:0:0/0',
    ];
    const canonical = [
      '10.0.0.1/32',
      '2001:db8::/32',
      '2001:db8::/48',
      '::ffff:10.0.0.0/104',
      '::ffff:10.0.0.1/128',
      '10.0.0.0/8',
      '192.0.2.0/24',
      '1:2:3:4:5:6:7:0/128',
      '::/0',
    ];
    const r = await call(t.origin, 'POST', '/api-keys', {
      json: { name: 'forms', scopes: ['payments:write'], ip_allowlist: given },
      headers: admin,
    });
    assert.equal(r.status, 201, r.text);
    assert.deepEqual(r.json.ip_allowlist, canonical);
    const got = await call(t.origin, 'GET', `/api-keys/${r.json.id}`, { headers: admin });
    assert.deepEqual(got.json.ip_allowlist, r.json.ip_allowlist);
    const listed = await call(t.origin, 'GET', '/api-keys?limit=100', { headers: admin });
    const item = listed.json.items.find((k: { id: string }) => k.id === r.json.id);
    assert.deepEqual(item?.ip_allowlist, r.json.ip_allowlist);
    const { rows } = await t.tdb.db.query<{ attrs: { ip_allowlist: string[] } }>(
      `SELECT attrs FROM audit_log WHERE action = 'apikey.create' AND target->>'id' = $1`,
      [r.json.id],
    );
    assert.deepEqual(rows[0]?.attrs.ip_allowlist, r.json.ip_allowlist, 'the audit names the ranges stored');
  });
});
