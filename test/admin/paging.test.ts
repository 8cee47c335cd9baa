import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { enqueue } from '../../core/outbox/outbox.ts';
import { startAdmin, type AdminHarness } from './harness.ts';

type Caller = ReturnType<AdminHarness['as']>;

/** Every page of `path` at `limit`, following next_cursor; fails on a repeated row. */
async function pages(
  as: Caller,
  path: string,
  limit: number,
  idOf: (item: Record<string, unknown>) => string,
): Promise<{ ids: string[]; pageCount: number }> {
  const ids: string[] = [];
  let cursor: string | null = null;
  let pageCount = 0;
  do {
    const sep = path.includes('?') ? '&' : '?';
    const r = await as(
      'GET',
      `${path}${sep}limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
    );
    assert.equal(r.status, 200, `${path}: ${r.text}`);
    const items = r.json.items as Record<string, unknown>[];
    assert.ok(items.length <= limit, `${path}: page larger than limit`);
    for (const it of items) ids.push(idOf(it));
    cursor = r.json.next_cursor;
    pageCount++;
    assert.ok(pageCount < 500, `${path}: runaway paging`);
  } while (cursor);
  assert.equal(new Set(ids).size, ids.length, `${path}: a row appeared on two pages`);
  return { ids, pageCount };
}

const sorted = (xs: string[]) => [...xs].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));

describe('administration lists: cursor pagination (limit + cursor, stable order, tamper-evident cursors)', () => {
  let h: AdminHarness;
  let admin: Caller;
  let ro: Caller;
  let ops: Caller;
  let n = 0;
  const key = () => ({ 'idempotency-key': `paging-${String(++n).padStart(6, '0')}` });

  before(async () => {
    h = await startAdmin({ seed: false });
    admin = h.as('admin');
    ro = h.as('readonly');
    ops = h.as('ops');
    assert.equal(
      (
        await admin('POST', '/v1/countries', {
          json: { code: 'KE', base_currency: 'KES', allowed_currencies: ['KES', 'USD'] },
          headers: key(),
        })
      ).status,
      201,
    );
    assert.equal(
      (
        await admin('PUT', '/v1/countries/KE/config', {
          json: { values: { 'sms.sender': 'DEMO' } },
          headers: key(),
        })
      ).status,
      200,
    );
    assert.equal(
      (
        await admin('POST', '/v1/countries', {
          json: { code: 'UG', base_currency: 'UGX', allowed_currencies: ['UGX'] },
          headers: key(),
        })
      ).status,
      201,
    );
    assert.equal(
      (
        await admin('POST', '/v1/countries', {
          json: { code: 'TZ', base_currency: 'TZS', allowed_currencies: ['TZS'] },
          headers: key(),
        })
      ).status,
      201,
    );
    for (const f of ['zeta', 'alpha', 'mid.one', 'beta', 'omega', 'gamma', 'delta']) {
      assert.equal(
        (await admin('PUT', `/v1/flags/${f}`, { json: { enabled: true }, headers: key() })).status,
        200,
      );
    }
    for (const t of ['t-delta', 't-alpha', 't-charlie', 't-bravo']) {
      const r = await admin('POST', '/v1/tenants', {
        json: { id: t, name: t, country: 'KE', baseCurrency: 'KES' },
        headers: key(),
      });
      assert.equal(r.status, 201, r.text);
    }
    for (const p of ['WALLET', 'CASHIN', 'TRANSFER', 'AIRTIME'])
      assert.equal(
        (await admin('POST', '/v1/products', { json: { code: p, category: 'X' }, headers: key() })).status,
        201,
      );
    for (const e of ['stg', 'prd', 'dev'])
      assert.equal(
        (
          await admin('POST', '/v1/tenants/demo/environments', {
            json: { name: e, envType: e.toUpperCase() },
            headers: key(),
          })
        ).status,
        201,
      );
    for (let i = 0; i < 3; i++)
      assert.equal(
        (
          await admin('POST', '/v1/configs', {
            json: { scope: 'TENANT', key: `k.n${i}`, value: i },
            headers: key(),
          })
        ).status,
        201,
      );
    for (const p of ['TRANSFER', 'CASHIN', 'WALLET']) {
      assert.equal(
        (
          await admin('POST', '/v1/schedules', {
            json: { kind: 'FEE', product: p, currency: 'KES', items: [{ min_amount: '0', fixed: '1' }] },
            headers: key(),
          })
        ).status,
        201,
      );
    }
    for (let i = 0; i < 3; i++)
      await enqueue(h.tdb.db, {
        tenantId: 'demo',
        aggregate: 'order',
        aggregateId: `o-${i}`,
        event: 'order.placed',
        payload: { i },
      });
    for (let i = 0; i < 3; i++)
      assert.equal(
        (
          await admin('POST', '/v1/webhooks', {
            json: { url: `https://hooks.example.com/${i}`, events: ['tenant.suspended'] },
            headers: key(),
          })
        ).status,
        201,
      );
  });
  after(async () => h.close());

  it('pages through flags by key and tenants by id, more rows than one page, in a stable order', async () => {
    const flags = await pages(ro, '/v1/flags', 3, (f) => String(f.key));
    assert.equal(flags.pageCount, 3);
    assert.deepEqual(flags.ids, ['alpha', 'beta', 'delta', 'gamma', 'mid.one', 'omega', 'zeta']);
    assert.deepEqual((await pages(ro, '/v1/flags', 7, (f) => String(f.key))).pageCount, 1);

    const tenants = await pages(ro, '/v1/tenants', 2, (t) => String(t.id));
    assert.equal(tenants.pageCount, 3);
    assert.deepEqual(
      tenants.ids,
      ['demo', 't-alpha', 't-bravo', 't-charlie', 't-delta'],
      'its own tenant and those it created; never another tenant',
    );
    assert.equal((await ro('GET', '/v1/tenants/t-alpha')).status, 200);
    const other = h.as('admin', 'other');
    assert.deepEqual((await pages(other, '/v1/tenants', 2, (t) => String(t.id))).ids, ['other']);
    assert.equal((await other('GET', '/v1/tenants/t-alpha')).json.code, 'TENANT_NOT_FOUND');
    assert.equal((await other('POST', '/v1/tenants/t-alpha:suspend')).json.code, 'TENANT_NOT_FOUND');
    const s = await admin('POST', '/v1/tenants/t-bravo:suspend');
    assert.equal(s.json.status, 'SUSPENDED', s.text);
    assert.deepEqual((await pages(ro, '/v1/tenants?status=SUSPENDED', 1, (t) => String(t.id))).ids, [
      't-bravo',
    ]);
  });

  it('pages every other list the same way: all rows once at limit 1, the same rows as one big page', async () => {
    const lists: [Caller, string, (x: Record<string, unknown>) => string][] = [
      [ro, '/v1/countries', (c) => String(c.code)],
      [ro, '/v1/countries?sort=name', (c) => String(c.code)],
      [ro, '/v1/products', (p) => String(p.code)],
      [ro, '/v1/tenants/demo/environments', (e) => String(e.id)],
      [ro, '/v1/configs?scope=TENANT', (c) => String(c.id)],
      [ro, '/v1/schedules?kind=FEE', (s) => String(s.id)],
      [ro, '/v1/webhooks', (w) => String(w.id)],
      [ro, '/v1/outbox?status=ALL', (o) => String(o.id)],
      [ops, '/v1/idempotency', (i) => String(i.key)],
      [ro, '/v1/audit?action=flag', (a) => String(a.id)],
      [ro, '/v1/countries/KE/history', (a) => String(a.id)],
    ];
    for (const [as, path, idOf] of lists) {
      const small = await pages(as, path, 1, idOf);
      const big = await pages(as, path, 200, idOf);
      assert.ok(small.ids.length >= 2, `${path}: needs at least two rows (${small.ids.length})`);
      assert.equal(small.pageCount, small.ids.length, path);
      assert.equal(big.pageCount, 1, path);
      assert.deepEqual(small.ids, big.ids, `${path}: the same order page by page`);
    }
    const names = (await pages(ro, '/v1/countries?sort=name', 1, (c) => String(c.name))).ids;
    assert.deepEqual(names, ['Kenya', 'Tanzania', 'Uganda']);
    const currencies = await pages(ro, '/v1/currencies', 100, (c) => String(c.code));
    assert.ok(
      currencies.pageCount >= 2 && currencies.ids.length > 150,
      `${currencies.ids.length} currencies`,
    );
    assert.deepEqual(currencies.ids, sorted(currencies.ids));
    const audit = (await pages(ro, '/v1/audit?action=flag', 2, (a) => String(a.id))).ids.map(Number);
    assert.deepEqual(
      audit,
      [...audit].sort((a, b) => b - a),
      'audit is newest first',
    );
    // the legacy offset fallback of the country list
    const off = await ro('GET', '/v1/countries?offset=1&limit=1');
    assert.equal(off.json.items[0].code, 'TZ');
  });

  it('refuses a tampered, made-up or foreign cursor with 400 CURSOR_INVALID', async () => {
    const first = await ro('GET', '/v1/flags?limit=2');
    const cursor: string = first.json.next_cursor;
    assert.ok(cursor);
    assert.equal((await ro('GET', `/v1/flags?limit=2&cursor=${cursor}`)).status, 200);
    const [payload, mac] = cursor.split('.') as [string, string];
    const forged = Buffer.from(JSON.stringify(['omega'])).toString('base64url');
    const flip = (s: string) => `${s.slice(0, -1)}${s.endsWith('A') ? 'B' : 'A'}`;
    const bad = [
      `${forged}.${mac}`, // another sort key under the old MAC
      `${payload}.${flip(mac)}`, // the MAC changed
      flip(payload) + '.' + mac,
      payload, // no MAC
      Buffer.from(JSON.stringify(['beta'])).toString('base64url'), // the old unsigned form
      'not-a-cursor',
      `${cursor}.x`,
    ];
    for (const c of bad) {
      const r = await ro('GET', `/v1/flags?limit=2&cursor=${encodeURIComponent(c)}`);
      assert.equal(r.status, 400, `${c}: ${r.text}`);
      assert.equal(r.json.code, 'CURSOR_INVALID');
      assert.match(r.headers['content-type'] ?? '', /application\/problem\+json/);
    }
    // bound to the list, its filter and the caller's tenant
    assert.equal((await ro('GET', `/v1/products?limit=2&cursor=${cursor}`)).json.code, 'CURSOR_INVALID');
    const tenants = await ro('GET', '/v1/tenants?limit=1');
    assert.equal(
      (await ro('GET', `/v1/tenants?limit=1&status=ACTIVE&cursor=${tenants.json.next_cursor}`)).json.code,
      'CURSOR_INVALID',
    );
    assert.equal(
      (await ro('GET', `/v1/tenants?limit=3&cursor=${tenants.json.next_cursor}`)).status,
      200,
      'the page size may change between pages',
    );
    assert.equal(
      (await h.as('readonly', 'other')('GET', `/v1/flags?limit=2&cursor=${cursor}`)).json.code,
      'CURSOR_INVALID',
    );
    assert.equal((await ro('GET', `/v1/countries?cursor=${cursor}&offset=1`)).status, 400);
    assert.equal((await ro('GET', '/v1/flags?limit=0')).status, 400);
    assert.equal((await ro('GET', '/v1/flags?limit=201')).status, 400);
  });
});
