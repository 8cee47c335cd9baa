import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startAdmin, type AdminHarness } from './harness.ts';

/**
 * Issue 13 items 3 and 7 in the administration frame (runWrite) and its inspection routes:
 * staff keys are the staff member's, webhook secrets are sealed at rest and never shown by
 * GET /v1/idempotency/{key}, and a key value used by two principals is addressed with ?principal=.
 */
describe('administration idempotency: per principal, secrets unreadable', () => {
  let h: AdminHarness;
  before(async () => {
    h = await startAdmin({ seed: false, allowPrivateWebhookTargets: true });
  });
  after(() => h.close());

  const adminA = (m: string, p: string, o: { json?: unknown; headers?: Record<string, string> } = {}) =>
    h.as('admin')(m, p, o);
  const adminB = (m: string, p: string, o: { json?: unknown; headers?: Record<string, string> } = {}) =>
    h.as('admin')(m, p, { ...o, headers: { 'x-principal-id': 'staff-admin-two', ...o.headers } });
  const hook = { url: 'http://127.0.0.1:9/hook', events: ['transfer.completed'] };

  it("gives each staff member their own record for one key value; the owner's replay returns the original secret", async () => {
    const key = { 'idempotency-key': 'hook-key-000001' };
    const a = await adminA('POST', '/v1/webhooks', { json: hook, headers: key });
    assert.equal(a.status, 201, a.text);
    assert.match(a.json.secret, /^whsec_/);
    const b = await adminB('POST', '/v1/webhooks', { json: hook, headers: key });
    assert.equal(b.status, 201, b.text);
    assert.equal(b.headers['idempotent-replayed'], undefined, "not A's stored response");
    assert.notEqual(b.json.id, a.json.id);
    assert.notEqual(b.json.secret, a.json.secret);
    const replay = await adminA('POST', '/v1/webhooks', { json: hook, headers: key });
    assert.equal(replay.status, 201);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.deepEqual(
      replay.json,
      a.json,
      'a replay by the same caller returns the original response, secret included',
    );

    const { rows } = await h.tdb.db.query<{ principal: string; response_body: string; sealed: boolean }>(
      `SELECT principal, response_body, response_sealed IS NOT NULL AS sealed FROM idempotency_keys WHERE tenant_id = 'demo' AND key = 'hook-key-000001' ORDER BY principal`,
    );
    assert.deepEqual(
      rows.map((r) => [r.principal, r.sealed]),
      [
        ['staff:staff-admin', true],
        ['staff:staff-admin-two', true],
      ],
    );
    for (const r of rows) {
      assert.doesNotMatch(r.response_body, /whsec_/, 'no secret in clear at rest');
      assert.equal(JSON.parse(r.response_body).secret, '[redacted]');
    }
  });

  it("shows each record's principal, addresses one with ?principal=, and never shows a secret", async () => {
    const list = await h.as('ops')('GET', '/v1/idempotency?key=hook-key-000001');
    assert.equal(list.status, 200, list.text);
    assert.deepEqual(
      list.json.items.map((i: { principal: string; secret_redacted: boolean }) => [
        i.principal,
        i.secret_redacted,
      ]),
      [
        ['staff:staff-admin', true],
        ['staff:staff-admin-two', true],
      ],
    );
    const byPrincipal = await h.as('ops')(
      'GET',
      '/v1/idempotency?principal=staff:staff-admin-two&key=hook-key',
    );
    assert.deepEqual(
      byPrincipal.json.items.map((i: { principal: string }) => i.principal),
      ['staff:staff-admin-two'],
    );
    const page1 = await h.as('ops')('GET', '/v1/idempotency?key=hook-key-000001&limit=1');
    assert.equal(page1.json.items.length, 1);
    const page2 = await h.as('ops')(
      'GET',
      `/v1/idempotency?key=hook-key-000001&limit=1&cursor=${encodeURIComponent(page1.json.next_cursor)}`,
    );
    assert.equal(page2.status, 200, page2.text);
    assert.deepEqual(
      [page1.json.items[0].principal, page2.json.items[0].principal],
      ['staff:staff-admin', 'staff:staff-admin-two'],
    );

    const ambiguous = await adminA('GET', '/v1/idempotency/hook-key-000001');
    assert.equal(ambiguous.status, 409, ambiguous.text);
    const one = await adminA('GET', '/v1/idempotency/hook-key-000001?principal=staff:staff-admin');
    assert.equal(one.status, 200, one.text);
    assert.equal(one.json.principal, 'staff:staff-admin');
    assert.equal(one.json.secret_redacted, true);
    assert.doesNotMatch(one.text, /whsec_/, 'the inspection route never shows the secret');
    assert.equal(JSON.parse(one.json.response_body).secret, '[redacted]');
    assert.equal((await adminA('GET', '/v1/idempotency/hook-key-000001?principal=staff:nobody')).status, 404);

    assert.equal(
      (await h.as('ops')('DELETE', '/v1/idempotency/hook-key-000001')).status,
      409,
      'a purge names one record',
    );
    assert.equal(
      (await h.as('ops')('DELETE', '/v1/idempotency/hook-key-000001?principal=staff:staff-admin-two')).status,
      204,
    );
    const left = await adminA('GET', '/v1/idempotency/hook-key-000001');
    assert.equal(
      left.status,
      200,
      'one record left: the key alone names it, as the documented route always did',
    );
    assert.equal(left.json.principal, 'staff:staff-admin');
    const audit = await adminA('GET', '/v1/audit?action=idempotency.purge');
    assert.deepEqual(
      audit.json.items.map((i: { attrs: { principal?: string } }) => i.attrs.principal),
      ['staff:staff-admin-two'],
      'the purge is audited naming whose record it was',
    );
  });

  it('cannot be poisoned: a key another staff member used first with another body still runs for its owner', async () => {
    const key = { 'idempotency-key': 'product-key-0001' };
    const b = await adminB('POST', '/v1/products', {
      json: { code: 'BILLS', category: 'VAS' },
      headers: key,
    });
    assert.equal(b.status, 201, b.text);
    const a = await adminA('POST', '/v1/products', {
      json: { code: 'TOPUP', category: 'VAS' },
      headers: key,
    });
    assert.equal(a.status, 201, a.text);
    assert.equal(a.json.code, 'TOPUP');
  });

  it("stores a refused write in core's one frame: replayed as the same Problem+JSON, never cached", async () => {
    const product = (code: string, key: string) =>
      adminA('POST', '/v1/products', {
        json: { code, category: 'VAS' },
        headers: { 'idempotency-key': key },
      });
    const first = await product('DUPE', 'product-dup-0000');
    assert.equal(first.status, 201, first.text);
    // The same code again under a new key: refused (409 PRODUCT_EXISTS), and the refusal is kept.
    const refused = await product('DUPE', 'product-dup-0001');
    assert.equal(refused.status, 409, refused.text);
    assert.equal(refused.json.code, 'PRODUCT_EXISTS');
    assert.match(refused.headers['content-type'] ?? '', /^application\/problem\+json/);
    const again = await product('DUPE', 'product-dup-0001');
    assert.equal(again.status, 409);
    assert.equal(again.headers['idempotent-replayed'], 'true');
    assert.equal(again.headers['cache-control'], 'no-store');
    assert.match(
      again.headers['content-type'] ?? '',
      /^application\/problem\+json/,
      'the refusal keeps its format',
    );
    assert.deepEqual(again.json, refused.json);
    const other = await product('OTHER', 'product-dup-0001');
    assert.equal(other.status, 409);
    assert.equal(other.json.code, 'IDEMPOTENCY_CONFLICT');
  });

  it('refuses an idempotent write whose caller the edge did not name', async () => {
    const r = await h.as('admin')('POST', '/v1/products', {
      json: { code: 'NONAME', category: 'VAS' },
      headers: { 'idempotency-key': 'nameless-key-01', 'x-principal-id': '' },
    });
    assert.equal(r.status, 401, r.text);
  });
});
