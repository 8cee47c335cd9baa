import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startTestCore, type TestCore } from '../helpers/core.ts';
import { call } from '../helpers/http.ts';
import { viaEdge } from '../helpers/edge-auth.ts';

describe('/api-keys routes', () => {
  let t: TestCore;
  const admin = viaEdge({ 'x-tenant-id': 't1', 'x-principal-id': 'service-token:admin', 'x-roles': 'admin' });
  before(async () => {
    t = await startTestCore();
    for (const id of ['t1', 't2'])
      await t.tdb.db.query(
        `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`,
        [id],
      );
  });
  after(() => t.close());

  it('creates a key and shows its secret exactly once', async () => {
    const r = await call(t.origin, 'POST', '/api-keys', {
      json: {
        name: 'merchant',
        scopes: ['payments:write'],
        budget: { per_minute: 60, daily_amount: '50000.00', currency: 'KES' },
        ip_allowlist: ['198.51.100.0/24'],
      },
      headers: admin,
    });
    assert.equal(r.status, 201, r.text);
    assert.match(r.json.id, /^pk_live_[A-Za-z0-9]{24}$/);
    assert.match(r.json.secret, /^sk_live_/);
    assert.equal(r.headers['cache-control'], 'no-store');
    assert.equal(r.json.created_by, 'service-token:admin');
    const got = await call(t.origin, 'GET', `/api-keys/${r.json.id}`, { headers: admin });
    assert.equal(got.status, 200);
    assert.equal(got.json.secret, undefined);
    assert.doesNotMatch(got.text, new RegExp(r.json.secret));
    const { rows } = await t.tdb.db.query<{ secret_enc: Buffer }>(
      'SELECT secret_enc FROM api_keys WHERE id = $1',
      [r.json.id],
    );
    assert.ok(
      rows[0] && !rows[0].secret_enc.toString('latin1').includes(r.json.secret),
      'stored sealed, not in clear',
    );
    const list = await call(t.origin, 'GET', '/api-keys', { headers: admin });
    assert.equal(list.json.items.length, 1);
    assert.doesNotMatch(list.text, /sk_live_/);
  });

  it('rotates (new secret once) and revokes; each change is audited', async () => {
    const made = await call(t.origin, 'POST', '/api-keys', {
      json: { name: 'rot', scopes: ['payments:read'] },
      headers: admin,
    });
    const rotated = await call(t.origin, 'POST', '/api-keys', {
      json: { name: 'rot', scopes: ['payments:read'], rotate: made.json.id, grace_seconds: 600 },
      headers: admin,
    });
    assert.equal(rotated.status, 201, rotated.text);
    assert.equal(rotated.json.id, made.json.id);
    assert.notEqual(rotated.json.secret, made.json.secret);
    assert.ok(rotated.json.rotated_at);
    assert.equal(
      (await call(t.origin, 'DELETE', `/api-keys/${made.json.id}`, { headers: admin })).status,
      204,
    );
    assert.ok((await call(t.origin, 'GET', `/api-keys/${made.json.id}`, { headers: admin })).json.revoked_at);
    const { rows } = await t.tdb.db.query<{ action: string }>(
      `SELECT action FROM audit_log WHERE target->>'id' = $1 ORDER BY id`,
      [made.json.id],
    );
    assert.deepEqual(
      rows.map((r) => r.action),
      ['apikey.create', 'apikey.rotate', 'apikey.revoke'],
    );
  });

  it('refuses bad input with 400 and never a 500', async () => {
    const bad = [
      { name: 'x', scopes: [] },
      { name: 'x', scopes: ['Payments Write'] },
      { name: 'x', scopes: ['payments:write'], ip_allowlist: ['10.0.0.0/33'] },
      { name: 'x', scopes: ['payments:write'], ip_allowlist: ['not-an-ip'] },
      { name: 'x', scopes: ['payments:write'], ip_allowlist: ['10.0.0.1/8'] },
      { name: 'x', scopes: ['payments:write'], ip_allowlist: ['2001:db8::1/32'] },
      { name: 'x', scopes: ['payments:write'], budget: { daily_amount: '1.1234567', currency: 'KES' } },
      { name: 'x', scopes: ['payments:write'], budget: { daily_amount: '100.00' } },
      { name: 'x', scopes: ['payments:write'], expires_at: '2001-01-01T00:00:00Z' },
    ];
    for (const json of bad) {
      const r = await call(t.origin, 'POST', '/api-keys', { json, headers: admin });
      assert.equal(r.status, 400, JSON.stringify(json));
      assert.equal(r.json.code, 'VALIDATION_FAILED', r.text);
    }
    // Bits past the prefix are named with what to write instead; a network or host range is kept.
    const loose = await call(t.origin, 'POST', '/api-keys', {
      json: { name: 'x', scopes: ['payments:write'], ip_allowlist: ['198.51.100.7/24'] },
      headers: admin,
    });
    assert.match(loose.json.message, /address bits set past the prefix.*198\.51\.100\.7\/24/);
    const fine = await call(t.origin, 'POST', '/api-keys', {
      json: {
        name: 'x',
        scopes: ['payments:write'],
        ip_allowlist: ['198.51.100.0/24', '198.51.100.7/32', '::/0', '0.0.0.0/0'],
      },
      headers: admin,
    });
    assert.equal(fine.status, 201, fine.text);
  });

  it('keeps tenants apart and needs the admin role to change keys', async () => {
    const mine = await call(t.origin, 'POST', '/api-keys', {
      json: { name: 'mine', scopes: ['payments:read'] },
      headers: admin,
    });
    const other = { ...admin, 'x-tenant-id': 't2' };
    assert.equal((await call(t.origin, 'GET', `/api-keys/${mine.json.id}`, { headers: other })).status, 404);
    assert.equal(
      (await call(t.origin, 'DELETE', `/api-keys/${mine.json.id}`, { headers: other })).status,
      404,
    );
    const readOnly = { ...admin, 'x-roles': 'readonly' };
    assert.equal(
      (
        await call(t.origin, 'POST', '/api-keys', {
          json: { name: 'ro', scopes: ['payments:read'] },
          headers: readOnly,
        })
      ).status,
      403,
    );
    assert.equal(
      (await call(t.origin, 'GET', '/api-keys', { headers: { ...admin, 'x-roles': 'ops' } })).status,
      200,
    );
  });

  it('pages with the one cursor codec: next_cursor, signed for its list and tenant', async () => {
    const all = await call(t.origin, 'GET', '/api-keys', { headers: admin });
    assert.ok(all.json.items.length >= 3, 'earlier tests made keys');
    assert.equal(all.json.next_cursor, null);
    const seen: string[] = [];
    let cursor: string | null = '';
    let first = '';
    while (cursor !== null) {
      const q: string = cursor ? `?limit=1&cursor=${encodeURIComponent(cursor)}` : '?limit=1';
      const page = await call(t.origin, 'GET', `/api-keys${q}`, { headers: admin });
      assert.equal(page.status, 200, page.text);
      seen.push(...page.json.items.map((k: { id: string }) => k.id));
      if (!first && page.json.next_cursor) first = page.json.next_cursor;
      cursor = page.json.next_cursor;
    }
    assert.deepEqual(
      seen,
      all.json.items.map((k: { id: string }) => k.id),
      'every key once, in order',
    );
    const refusedCode = async (c: string, headers = admin) =>
      (await call(t.origin, 'GET', `/api-keys?limit=1&cursor=${encodeURIComponent(c)}`, { headers })).json
        .code;
    const [payload, mac] = first.split('.') as [string, string];
    const edited = Buffer.from(JSON.stringify(['2000-01-01T00:00:00.000Z', 'pk_live_x'])).toString(
      'base64url',
    );
    assert.equal(await refusedCode(`${edited}.${mac}`), 'CURSOR_INVALID', 'an edited cursor');
    assert.equal(await refusedCode(payload), 'CURSOR_INVALID', 'a made-up cursor');
    assert.equal(
      await refusedCode(first, { ...admin, 'x-tenant-id': 't2' }),
      'CURSOR_INVALID',
      "another tenant's",
    );
  });
});
