import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { putServiceToken } from '../../core/platform/service-tokens.ts';
import type { TestDb } from '../helpers/db.ts';
import { startE2eStack, type E2eStack } from '../helpers/e2e-stack.ts';
import { call, type Res } from '../helpers/http.ts';

/**
 * Issue 20 item 1 (reads): a tenant's Admin and Ops list and read its outlets and agents through
 * the gateway, paged with the administration cursor; ReadOnly is refused; another tenant's ids
 * are 404 and never listed; no credential is ever shown.
 */
describe('agents and outlets read by their tenant through the gateway', () => {
  let e2e: E2eStack;
  let tdb: TestDb;
  let gw: string;
  const tok: Record<string, string> = {};
  const outlets: string[] = [];
  const agents: string[] = [];

  const as =
    (who: string) =>
    (method: string, path: string, json?: unknown): Promise<Res> =>
      call(gw, method, path, {
        ...(json !== undefined ? { json } : {}),
        headers: {
          authorization: `Bearer ${tok[who]}`,
          'x-request-id': randomUUID(),
          ...(method === 'GET' ? {} : { 'idempotency-key': `k-${randomUUID()}` }),
        },
      });

  before(async () => {
    e2e = await startE2eStack('agent-reads');
    ({ tdb, gw } = e2e);
    const demo = e2e.demo as { serviceTokens: Record<'admin' | 'ops', { token: string }> };
    tok.admin = demo.serviceTokens.admin.token;
    tok.ops = demo.serviceTokens.ops.token;
    tok.readonly = await putServiceToken(tdb.db, 'demo', 'e2e-readonly', ['readonly']);
    const other = await as('admin')('POST', '/v1/tenants', {
      id: 'readsco',
      name: 'Reads Co',
      country: 'KE',
      baseCurrency: 'KES',
    });
    assert.equal(other.status, 201, other.text);
    tok.other = await putServiceToken(tdb.db, 'readsco', 'e2e-readsco-admin', ['admin']);
    for (let i = 0; i < 3; i++) {
      const o = await as('admin')('POST', '/v1/outlets', {
        name: `Shop ${i}`,
        region: i < 2 ? 'Coast' : 'Rift',
      });
      assert.equal(o.status, 201, o.text);
      outlets.push(o.json.id);
      const a = await as('admin')('POST', '/v1/agents', {
        code: `READ${i}00`,
        phone: `+25471150000${i}`,
        name: `Agent ${i}`,
        outletId: o.json.id,
        day_max_amount: '5000',
      });
      assert.equal(a.status, 201, a.text);
      agents.push(a.json.id);
    }
  });
  after(() => e2e?.stop());

  /** Every page of a list, following next_cursor with `limit`. */
  async function all(who: string, path: string, limit: number): Promise<{ id: string }[]> {
    const items: { id: string }[] = [];
    let cursor: string | null = null;
    for (let n = 0; n < 50; n++) {
      const sep = path.includes('?') ? '&' : '?';
      const r = await as(who)(
        'GET',
        `${path}${sep}limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
      );
      assert.equal(r.status, 200, r.text);
      assert.ok(r.json.items.length <= limit);
      items.push(...r.json.items);
      cursor = r.json.next_cursor;
      if (cursor === null) return items;
    }
    assert.fail('the cursor never ended');
  }

  it('Admin and Ops page through outlets and agents; filters apply; no credentials', async () => {
    for (const who of ['admin', 'ops']) {
      const os = await all(who, '/v1/outlets', 2);
      for (const id of outlets)
        assert.ok(
          os.some((o) => o.id === id),
          `${who} lists outlet ${id}`,
        );
      assert.equal(new Set(os.map((o) => o.id)).size, os.length, 'no outlet twice across pages');
      const listed = await all(who, '/v1/agents', 2);
      for (const id of agents)
        assert.ok(
          listed.some((a) => a.id === id),
          `${who} lists agent ${id}`,
        );
      assert.equal(new Set(listed.map((a) => a.id)).size, listed.length);
    }
    const coast = await all('ops', '/v1/outlets?region=Coast', 1);
    assert.deepEqual(coast.map((o) => o.id).sort(), outlets.slice(0, 2).sort());
    const atShop = await all('ops', `/v1/agents?outletId=${outlets[2]}`, 10);
    assert.deepEqual(
      atShop.map((a) => a.id),
      [agents[2]],
    );
    const one = await as('ops')('GET', `/v1/agents/${agents[0]}`);
    assert.equal(one.status, 200, one.text);
    assert.equal(one.json.code, 'READ000');
    assert.equal(one.json.outletId, outlets[0]);
    assert.equal(one.json.status, 'active');
    assert.equal(one.json.day_max_amount, '5000.00');
    assert.equal(one.json.credentials, undefined, 'credentials are shown once, at creation');
    assert.ok(!/pin|privateKey/i.test(one.text));
    const shop = await as('admin')('GET', `/v1/outlets/${outlets[1]}`);
    assert.equal(shop.status, 200, shop.text);
    assert.equal(shop.json.name, 'Shop 1');
    const badCursor = await as('ops')('GET', '/v1/agents?cursor=not-ours');
    assert.equal(badCursor.status, 400, badCursor.text);
    assert.equal(badCursor.json.code, 'CURSOR_INVALID');
    // A filter given twice is a 400 naming it, not a silent pick of one value (an empty page).
    const twice = await as('ops')('GET', `/v1/agents?outletId=${outlets[0]}&outletId=${outlets[1]}`);
    assert.equal(twice.status, 400, twice.text);
    assert.equal(twice.json.code, 'VALIDATION_FAILED');
    assert.match(twice.text, /outletId/);
  });

  it("ReadOnly is refused; another tenant's ids are 404 and never listed", async () => {
    const ro = await as('readonly')('GET', '/v1/agents');
    assert.equal(ro.status, 403, ro.text);
    for (const path of [`/v1/agents/${agents[0]}`, `/v1/outlets/${outlets[0]}`]) {
      const r = await as('other')('GET', path);
      assert.equal(r.status, 404, `${path}: ${r.text}`);
    }
    assert.equal((await as('other')('GET', `/v1/agents/${agents[0]}`)).json.code, 'AGENT_NOT_FOUND');
    assert.equal((await as('other')('GET', `/v1/outlets/${outlets[0]}`)).json.code, 'OUTLET_NOT_FOUND');
    const theirs = await as('other')('GET', '/v1/agents');
    assert.equal(theirs.status, 200, theirs.text);
    assert.deepEqual(theirs.json.items, []);
    assert.deepEqual((await as('other')('GET', '/v1/outlets')).json.items, []);
    assert.equal((await as('admin')('GET', `/v1/agents/${randomUUID()}`)).status, 404);
  });
});
