import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { loadLedgerCurrencies } from '../../core/admin/reference/currencies.ts';
import { openAccount } from '../../core/ledger/accounts.ts';
import { ensureTenantLedger } from '../../core/ledger/catalog.ts';
import { minorUnitsOf } from '../../core/ledger/currency.ts';
import { enqueue } from '../../core/outbox/outbox.ts';
import { startAdmin, type AdminHarness } from './harness.ts';

type Caller = ReturnType<AdminHarness['as']>;

/**
 * Administration routes that were only covered indirectly (issue 6 follow-up): promote,
 * environments and products, config state changes, dry-run, schedule items and :effective,
 * currency PATCH/DELETE, idempotency search/view/purge, outbox retry-batch, rotate-keys.
 */
describe('administration API: promote, environments, products, configs, schedules, currencies, ops', () => {
  let h: AdminHarness;
  let admin: Caller;
  let ro: Caller;
  let ops: Caller;
  let n = 0;
  const key = (k = 'op') => ({ 'idempotency-key': `${k}-${String(++n).padStart(6, '0')}-key` });
  let stg = '';
  let prd = '';

  before(async () => {
    h = await startAdmin({ seed: false });
    admin = h.as('admin');
    ro = h.as('readonly');
    ops = h.as('ops');
    const ke = await admin('POST', '/v1/countries', {
      json: { code: 'KE', base_currency: 'KES', allowed_currencies: ['KES', 'USD'] },
      headers: key(),
    });
    assert.equal(ke.status, 201, ke.text);
  });
  after(async () => h.close());

  it('creates environments, PATCHes their flags (merged; If-Match honoured) and audits each change', async () => {
    const s = await admin('POST', '/v1/tenants/demo/environments', {
      json: { name: 'stg', envType: 'STG', flags: { beta: true } },
      headers: key(),
    });
    assert.equal(s.status, 201, s.text);
    stg = s.json.id;
    const p = await admin('POST', '/v1/tenants/demo/environments', {
      json: { name: 'prd', envType: 'PRD' },
      headers: key(),
    });
    prd = p.json.id;
    assert.equal(
      (
        await admin('POST', '/v1/tenants/demo/environments', {
          json: { name: 'stg', envType: 'DEV' },
          headers: key(),
        })
      ).json.code,
      'ENVIRONMENT_EXISTS',
    );
    assert.equal(
      (
        await admin('POST', '/v1/tenants/demo/environments', {
          json: { name: 'x', envType: 'QA' },
          headers: key(),
        })
      ).status,
      400,
    );
    assert.equal(
      (
        await ro('POST', '/v1/tenants/demo/environments', {
          json: { name: 'ro', envType: 'DEV' },
          headers: key(),
        })
      ).status,
      403,
    );
    const got = await ro('GET', `/v1/tenants/demo/environments/${stg}`);
    const patched = await admin('PATCH', `/v1/tenants/demo/environments/${stg}`, {
      json: { flags: { dark_mode: true } },
      headers: { 'if-match': got.headers.etag ?? '' },
    });
    assert.equal(patched.status, 200, patched.text);
    assert.deepEqual(patched.json.flags, { beta: true, dark_mode: true });
    assert.equal(
      (
        await admin('PATCH', `/v1/tenants/demo/environments/${stg}`, {
          json: { flags: { beta: false } },
          headers: { 'if-match': got.headers.etag ?? '' },
        })
      ).status,
      412,
    );
    const trail = await ro('GET', `/v1/tenants/demo/environments/${stg}/audit`);
    assert.deepEqual(
      trail.json.items.map((a: { action: string }) => a.action),
      ['environment.update', 'environment.create'],
    );
    assert.equal(
      (await h.as('admin', 'other')('GET', `/v1/tenants/demo/environments/${stg}`)).json.code,
      'TENANT_NOT_FOUND',
    );
  });

  it('creates, PATCHes and soft-deletes (deprecates) a product, and re-enables it by POST', async () => {
    const c = await admin('POST', '/v1/products', {
      json: { code: 'WALLET', category: 'ACCOUNT', metadata: { tier: 1 } },
      headers: key(),
    });
    assert.equal(c.status, 201, c.text);
    assert.equal(
      (await admin('POST', '/v1/products', { json: { code: 'WALLET', category: 'ACCOUNT' }, headers: key() }))
        .json.code,
      'PRODUCT_EXISTS',
    );
    assert.equal(
      (await admin('POST', '/v1/products', { json: { code: 'cashin', category: 'CASH' }, headers: key() }))
        .status,
      400,
    );
    const got = await ro('GET', '/v1/products/WALLET');
    const p = await admin('PATCH', '/v1/products/WALLET', {
      json: { category: 'WALLETS' },
      headers: { 'if-match': got.headers.etag ?? '' },
    });
    assert.equal(p.json.category, 'WALLETS');
    assert.equal(
      (
        await admin('PATCH', '/v1/products/WALLET', {
          json: { category: 'X' },
          headers: { 'if-match': got.headers.etag ?? '' },
        })
      ).status,
      412,
    );
    const d = await admin('DELETE', '/v1/products/WALLET');
    assert.equal(d.status, 200, d.text);
    assert.equal(d.json.status, 'DEPRECATED');
    assert.equal(
      (await ro('GET', '/v1/products/WALLET')).json.status,
      'DEPRECATED',
      'soft delete: still readable',
    );
    assert.deepEqual((await ro('GET', '/v1/products?status=ACTIVE')).json.items, []);
    const again = await admin('POST', '/v1/products', {
      json: { code: 'WALLET', category: 'ACCOUNT' },
      headers: key(),
    });
    assert.equal(again.status, 201);
    assert.equal(again.json.status, 'ACTIVE');
    assert.equal((await admin('DELETE', '/v1/products/NOPE')).json.code, 'PRODUCT_NOT_FOUND');
  });

  it('PATCHes config versions: deactivate, activate (supersedes the active one), supersede; If-Match 428/412; state conflicts', async () => {
    const v1 = await admin('POST', '/v1/configs', {
      json: { scope: 'TENANT', key: 'limits.daily', value: 100 },
      headers: key(),
    });
    const v2 = await admin('POST', '/v1/configs', {
      json: { scope: 'TENANT', key: 'limits.daily', value: 200 },
      headers: key(),
    });
    assert.equal(v2.json.version, 2);
    assert.equal((await ro('GET', `/v1/configs/${v1.json.id}`)).json.status, 'SUPERSEDED');
    const etag = async (id: string) => (await ro('GET', `/v1/configs/${id}`)).headers.etag ?? '';
    assert.equal(
      (await admin('PATCH', `/v1/configs/${v1.json.id}`, { json: { status: 'ACTIVE' } })).status,
      428,
    );
    assert.equal(
      (
        await admin('PATCH', `/v1/configs/${v1.json.id}`, {
          json: { status: 'ACTIVE' },
          headers: { 'if-match': '"stale"' },
        })
      ).status,
      412,
    );
    const act = await admin('PATCH', `/v1/configs/${v1.json.id}`, {
      json: { status: 'ACTIVE' },
      headers: { 'if-match': await etag(v1.json.id) },
    });
    assert.equal(act.status, 200, act.text);
    assert.equal(act.json.status, 'ACTIVE');
    assert.equal(
      (await ro('GET', `/v1/configs/${v2.json.id}`)).json.status,
      'SUPERSEDED',
      'activating a version supersedes the active one',
    );
    let eff = await ro('GET', '/v1/configs/effective?key=limits.daily');
    assert.equal(eff.json.values[0].value, 100);
    const again = await admin('PATCH', `/v1/configs/${v1.json.id}`, {
      json: { status: 'ACTIVE' },
      headers: { 'if-match': await etag(v1.json.id) },
    });
    assert.equal(again.json.code, 'CONFIG_STATE_CONFLICT');
    const off = await admin('PATCH', `/v1/configs/${v1.json.id}`, {
      json: { status: 'INACTIVE' },
      headers: { 'if-match': await etag(v1.json.id) },
    });
    assert.equal(off.json.status, 'INACTIVE');
    eff = await ro('GET', '/v1/configs/effective?key=limits.daily');
    assert.deepEqual(eff.json.values, [], 'no active version: nothing resolves');
    const sup = await admin('PATCH', `/v1/configs/${v1.json.id}`, {
      json: { status: 'SUPERSEDED' },
      headers: { 'if-match': await etag(v1.json.id) },
    });
    assert.equal(sup.json.status, 'SUPERSEDED');
    const actions = (await ro('GET', `/v1/audit?resource=config&resource_id=${v1.json.id}`)).json.items.map(
      (a: { action: string }) => a.action,
    );
    assert.deepEqual(actions, ['config.supersede', 'config.deactivate', 'config.activate', 'config.create']);
  });

  it('dry-runs configuration for a hypothetical context and candidates without saving', async () => {
    await admin('POST', '/v1/configs', {
      json: { scope: 'TENANT', key: 'ui.theme', value: 'light' },
      headers: key(),
    });
    await admin('POST', '/v1/configs', {
      json: { scope: 'ENVIRONMENT', scopeRef: stg, key: 'ui.theme', value: 'dark' },
      headers: key(),
    });
    const base = await ro('POST', '/v1/configs:dry-run', { json: { keys: ['ui.theme'] } });
    assert.equal(base.status, 200, base.text);
    assert.equal(base.json.values[0].value, 'light');
    const inStg = await ro('POST', '/v1/configs:dry-run', { json: { envId: stg, keys: ['ui.theme'] } });
    assert.equal(inStg.json.values[0].value, 'dark');
    assert.equal(inStg.json.values[0].scope, 'ENVIRONMENT');
    const cand = await ro('POST', '/v1/configs:dry-run', {
      json: {
        envId: prd,
        keys: ['ui.theme'],
        candidates: [{ scope: 'ENVIRONMENT', scopeRef: prd, key: 'ui.theme', value: 'contrast' }],
      },
    });
    assert.equal(cand.json.values[0].value, 'contrast');
    assert.equal(cand.json.values[0].config_id, null);
    assert.equal(
      (await ro('GET', `/v1/configs/effective?envId=${prd}&key=ui.theme`)).json.values[0].value,
      'light',
      'the candidate was not saved',
    );
    assert.equal(
      (
        await ro('POST', '/v1/configs:dry-run', {
          json: { candidates: [{ scope: 'TENANT', scopeRef: 'other', key: 'a.b', value: 1 }] },
        })
      ).json.code,
      'CONFIG_INVALID',
    );
  });

  it('adds fee tiers and limit rows to inactive schedules, refuses the wrong kind, and resolves :effective', async () => {
    const fee = await admin('POST', '/v1/schedules', {
      json: { kind: 'FEE', product: 'WALLET', currency: 'KES' },
      headers: key(),
    });
    assert.equal(fee.status, 201, fee.text);
    const added = await admin('POST', `/v1/schedules/${fee.json.id}/fees`, {
      json: {
        items: [
          { min_amount: '0', max_amount: '500', fixed: '5' },
          { min_amount: '500', percent_bps: 100 },
        ],
      },
      headers: key(),
    });
    assert.equal(added.status, 200, added.text);
    assert.equal(added.json.items.length, 2);
    const overlap = await admin('POST', `/v1/schedules/${fee.json.id}/fees`, {
      json: { items: [{ min_amount: '400', max_amount: '600' }] },
      headers: key(),
    });
    assert.equal(overlap.json.code, 'SCHEDULE_OVERLAP');
    assert.equal(
      (
        await admin('POST', `/v1/schedules/${fee.json.id}/limits`, {
          json: { items: [{ action: 'TRANSFER', period: 'day', max_amount: '10' }] },
          headers: key(),
        })
      ).json.code,
      'SCHEDULE_INVALID',
    );
    assert.equal(
      (await admin('POST', `/v1/schedules/${fee.json.id}/fees`, { json: { items: [{ min_amount: '0' }] } }))
        .json.code,
      'IDEMPOTENCY_KEY_REQUIRED',
    );
    assert.equal(
      (await ro('GET', '/v1/schedules:effective?kind=FEE&product=WALLET&currency=KES')).json.code,
      'NO_ACTIVE_SCHEDULE',
    );
    const got = await ro('GET', `/v1/schedules/${fee.json.id}`);
    assert.equal(
      (await admin('PATCH', `/v1/schedules/${fee.json.id}`, { json: { status: 'ACTIVE' } })).status,
      428,
    );
    assert.equal(
      (
        await admin('PATCH', `/v1/schedules/${fee.json.id}`, {
          json: { status: 'ACTIVE' },
          headers: { 'if-match': got.headers.etag ?? '' },
        })
      ).status,
      200,
    );
    const eff = await ro('GET', '/v1/schedules:effective?kind=FEE&product=WALLET&currency=KES');
    assert.equal(eff.status, 200, eff.text);
    assert.equal(eff.json.id, fee.json.id);
    assert.deepEqual(
      eff.json.items.map((i: { fixed: string }) => i.fixed),
      ['5.00', '0.00'],
    );
    assert.equal(
      (
        await admin('POST', `/v1/schedules/${fee.json.id}/fees`, {
          json: { items: [{ min_amount: '9000' }] },
          headers: key(),
        })
      ).json.code,
      'SCHEDULE_NOT_EDITABLE',
    );
    assert.equal(
      (await ro('POST', '/v1/fees:quote', { json: { product: 'WALLET', amount: '1000', currency: 'KES' } }))
        .json.fee,
      '10.00',
    );

    const lim = await admin('POST', '/v1/schedules', {
      json: { kind: 'LIMIT', product: 'WALLET', currency: 'KES' },
      headers: key(),
    });
    const rows = await admin('POST', `/v1/schedules/${lim.json.id}/limits`, {
      json: {
        items: [
          { action: 'TRANSFER', period: 'transaction', max_amount: '5000' },
          { action: 'TRANSFER', period: 'day', max_count: 3 },
        ],
      },
      headers: key(),
    });
    assert.equal(rows.status, 200, rows.text);
    assert.equal(rows.json.items.length, 2);
    assert.equal(
      (
        await admin('POST', `/v1/schedules/${lim.json.id}/limits`, {
          json: { items: [{ action: 'TRANSFER', period: 'week', max_count: 3 }] },
          headers: key(),
        })
      ).status,
      400,
    );
  });

  it('promotes configs and schedules STG → PRD with key and product filters, idempotently, in one audited operation', async () => {
    await admin('POST', '/v1/configs', {
      json: { scope: 'ENVIRONMENT', scopeRef: stg, key: 'ui.lang', value: 'sw' },
      headers: key(),
    });
    for (const product of ['WALLET', 'CASHIN']) {
      const s = await admin('POST', '/v1/schedules', {
        json: {
          kind: 'FEE',
          product,
          currency: 'KES',
          scope: 'ENVIRONMENT',
          scopeRef: stg,
          items: [{ min_amount: '0', fixed: '7' }],
        },
        headers: key(),
      });
      assert.equal(s.status, 201, s.text);
      const got = await ro('GET', `/v1/schedules/${s.json.id}`);
      assert.equal(
        (
          await admin('PATCH', `/v1/schedules/${s.json.id}`, {
            json: { status: 'ACTIVE' },
            headers: { 'if-match': got.headers.etag ?? '' },
          })
        ).status,
        200,
      );
    }
    assert.equal(
      (await ro('POST', '/v1/tenants/demo/environments:promote', { json: {}, headers: key() })).status,
      403,
    );
    const body = { keys: ['ui.theme'], products: ['WALLET'] };
    const idem = key('promote');
    const first = await admin('POST', '/v1/tenants/demo/environments:promote', { json: body, headers: idem });
    assert.equal(first.status, 200, first.text);
    assert.equal(first.json.from, stg);
    assert.equal(first.json.to, prd);
    assert.deepEqual(
      first.json.configs.map((c: { key: string; skipped: boolean }) => [c.key, c.skipped]),
      [['ui.theme', false]],
    );
    assert.deepEqual(
      first.json.schedules.map((s: { product: string; skipped: boolean }) => [s.product, s.skipped]),
      [['WALLET', false]],
    );
    const replay = await admin('POST', '/v1/tenants/demo/environments:promote', {
      json: body,
      headers: idem,
    });
    assert.equal(replay.text, first.text);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    const rerun = await admin('POST', '/v1/tenants/demo/environments:promote', {
      json: body,
      headers: key('promote'),
    });
    assert.ok(
      rerun.json.configs.every((c: { skipped: boolean }) => c.skipped) &&
        rerun.json.schedules.every((s: { skipped: boolean }) => s.skipped),
      're-running copies nothing',
    );

    const eff = await ro('GET', `/v1/configs/effective?envId=${prd}`);
    const byKey = Object.fromEntries(eff.json.values.map((v: { key: string }) => [v.key, v]));
    assert.equal(byKey['ui.theme'].value, 'dark');
    assert.equal(byKey['ui.theme'].scope, 'ENVIRONMENT');
    assert.equal(byKey['ui.lang'], undefined, 'the key filter kept ui.lang in STG');
    const prdSchedules = await ro('GET', `/v1/schedules?scope=ENVIRONMENT&scopeRef=${prd}&active=true`);
    assert.deepEqual(
      prdSchedules.json.items.map((s: { product: string }) => s.product),
      ['WALLET'],
      'the product filter kept CASHIN in STG',
    );
    const copied = await ro('GET', `/v1/schedules/${prdSchedules.json.items[0].id}`);
    assert.equal(copied.json.promoted_from, first.json.schedules[0].source);
    assert.equal(copied.json.items[0].fixed, '7.00');
    const audit = await ro('GET', '/v1/audit?action=environment.promote');
    assert.equal(audit.json.items.length, 2, 'one record per promotion run (the replay is not a run)');
    assert.deepEqual(audit.json.items[1].attrs.keys, ['ui.theme']);
    // configs:promote and schedules:promote are the same operation restricted to one kind
    const onlyConfigs = await admin('POST', '/v1/configs:promote', {
      json: { keys: ['ui.lang'] },
      headers: key(),
    });
    assert.deepEqual(onlyConfigs.json.schedules, []);
    assert.deepEqual(
      onlyConfigs.json.configs.map((c: { key: string; skipped: boolean }) => [c.key, c.skipped]),
      [['ui.lang', false]],
    );
    const onlySchedules = await admin('POST', '/v1/schedules:promote', {
      json: { products: ['CASHIN'] },
      headers: key(),
    });
    assert.deepEqual(onlySchedules.json.configs, []);
    assert.deepEqual(
      onlySchedules.json.schedules.map((s: { product: string }) => s.product),
      ['CASHIN'],
    );
    const wrong = await admin('POST', '/v1/configs:promote', { json: { fromEnvId: prd }, headers: key() });
    assert.equal(wrong.json.code, 'PROMOTION_INVALID');
  });

  it('PATCHes a currency with If-Match and deletes its local metadata only while nothing uses it', async () => {
    assert.equal(
      (await admin('POST', '/v1/currencies', { json: { code: 'MUR', symbol: 'Rs' }, headers: key() })).status,
      201,
    );
    const kes = await admin('POST', '/v1/currencies', {
      json: { code: 'KES', symbol: 'KSh' },
      headers: key(),
    });
    assert.equal(kes.status, 409);
    assert.equal(kes.json.code, 'CURRENCY_EXISTS', "the ledger's currencies are seeded (migration 0971)");
    const got = await ro('GET', '/v1/currencies/MUR');
    assert.equal((await admin('PATCH', '/v1/currencies/MUR', { json: { symbol: 'R' } })).status, 428);
    const p = await admin('PATCH', '/v1/currencies/MUR', {
      json: { symbol: 'R', minor_units: 0 },
      headers: { 'if-match': got.headers.etag ?? '' },
    });
    assert.equal(p.status, 200, p.text);
    assert.equal(p.json.symbol, 'R');
    assert.equal(
      (
        await admin('PATCH', '/v1/currencies/MUR', {
          json: { symbol: 'X' },
          headers: { 'if-match': got.headers.etag ?? '' },
        })
      ).status,
      412,
    );
    assert.equal(
      (await admin('PATCH', '/v1/currencies/MUR', { json: { minor_units: 7 }, headers: { 'if-match': '*' } }))
        .status,
      400,
    );
    const inUse = await admin('DELETE', '/v1/currencies/KES');
    assert.equal(inUse.status, 409);
    assert.equal(inUse.json.code, 'CURRENCY_IN_USE');
    assert.equal((await ro('DELETE', '/v1/currencies/MUR')).status, 403);
    assert.equal((await admin('DELETE', '/v1/currencies/MUR')).status, 204);
    assert.equal((await admin('DELETE', '/v1/currencies/MUR')).json.code, 'CURRENCY_NOT_FOUND');
    assert.equal(
      (await ro('GET', '/v1/currencies/MUR')).json.minor_units,
      2,
      'back to the ISO 4217 reference',
    );
  });

  it("keeps the minor units of a currency a ledger account holds; the ledger accepts exactly the table's currencies", async () => {
    assert.equal(minorUnitsOf('SCR'), undefined, 'not in the table: the ledger refuses it');
    const made = await admin('POST', '/v1/currencies', {
      json: { code: 'SCR', minor_units: 2 },
      headers: key(),
    });
    assert.equal(made.status, 201, made.text);
    assert.equal(minorUnitsOf('SCR'), 2, 'added for the ledger at once');
    const widen = await admin('PATCH', '/v1/currencies/SCR', {
      json: { minor_units: 3 },
      headers: { 'if-match': '*' },
    });
    assert.equal(widen.status, 200, 'no account holds it yet: its minor units may change');
    assert.equal(minorUnitsOf('SCR'), 3);
    await h.tdb.db.tx(async (q) => {
      await ensureTenantLedger(q, 'demo');
      await openAccount(
        q,
        {
          tenantId: 'demo',
          ownerType: 'platform',
          ownerId: 'scr-test',
          productCode: 'SETTLEMENT',
          currency: 'SCR',
          viaApi: false,
        },
        Date.now(),
      );
    });
    const locked = await admin('PATCH', '/v1/currencies/SCR', {
      json: { minor_units: 2, symbol: 'SR' },
      headers: { 'if-match': '*' },
    });
    assert.equal(locked.status, 409);
    assert.equal(locked.json.code, 'CURRENCY_MINOR_UNITS_LOCKED');
    const same = await admin('PATCH', '/v1/currencies/SCR', {
      json: { minor_units: 3, symbol: 'SR' },
      headers: { 'if-match': '*' },
    });
    assert.equal(same.status, 200, 'the same minor units and other fields still change');
    assert.equal((await ro('GET', '/v1/currencies/SCR')).json.minor_units, 3);
    const gone = await admin('DELETE', '/v1/currencies/SCR');
    assert.equal(gone.status, 409);
    assert.equal(gone.json.code, 'CURRENCY_IN_USE');
    await loadLedgerCurrencies(h.tdb.db);
    assert.equal(minorUnitsOf('SCR'), 3, 'a reload reads the same table');
  });

  it('searches idempotency records (Ops only), views and purges them (Ops and Admin), body only for Admin', async () => {
    const made = await admin('POST', '/v1/products', {
      json: { code: 'AIRTIME', category: 'VAS' },
      headers: { 'idempotency-key': 'purge-me-00000001' },
    });
    assert.equal(made.status, 201);
    assert.equal((await ro('GET', '/v1/idempotency')).status, 403);
    assert.equal((await admin('GET', '/v1/idempotency')).status, 403, 'SPEC 4.6: search is ops only');
    const found = await ops('GET', '/v1/idempotency?key=purge-me&method=post&path=/v1/products');
    assert.equal(found.status, 200, found.text);
    assert.deepEqual(
      found.json.items.map((i: { key: string }) => i.key),
      ['purge-me-00000001'],
    );
    assert.equal(found.json.items[0].response_status, 201);
    const asOps = await ops('GET', '/v1/idempotency/purge-me-00000001');
    assert.equal(asOps.json.response_body, undefined, 'metadata only');
    const asAdmin = await admin('GET', '/v1/idempotency/purge-me-00000001');
    assert.equal(JSON.parse(asAdmin.json.response_body).code, 'AIRTIME');
    assert.equal((await ro('DELETE', '/v1/idempotency/purge-me-00000001')).status, 403);
    assert.equal((await ops('DELETE', '/v1/idempotency/purge-me-00000001')).status, 204);
    assert.equal((await ops('GET', '/v1/idempotency/purge-me-00000001')).json.code, 'IDEMPOTENCY_NOT_FOUND');
    assert.equal(
      (await ops('DELETE', '/v1/idempotency/purge-me-00000001')).json.code,
      'IDEMPOTENCY_NOT_FOUND',
    );
    assert.ok((await ro('GET', '/v1/audit?action=idempotency.purge')).json.items.length === 1);
    // the key is free again: the same request runs anew instead of replaying
    const again = await admin('POST', '/v1/products', {
      json: { code: 'AIRTIME', category: 'VAS' },
      headers: { 'idempotency-key': 'purge-me-00000001' },
    });
    assert.equal(again.json.code, 'PRODUCT_EXISTS');
  });

  it('retries a batch of undelivered outbox messages by time window and attempts (Ops), leaving delivered ones', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 4; i++)
      ids.push(
        await enqueue(h.tdb.db, {
          tenantId: 'demo',
          aggregate: 'batch',
          aggregateId: `b-${i}`,
          event: 'batch.made',
          payload: { i },
        }),
      );
    await h.tdb.db.query(`UPDATE outbox SET status = 'DEAD', attempts = 5 WHERE id = ANY($1::uuid[])`, [
      ids.slice(0, 2),
    ]);
    await h.tdb.db.query(`UPDATE outbox SET status = 'PENDING', attempts = 1 WHERE id = $1`, [ids[2]]);
    await h.tdb.db.query(`UPDATE outbox SET status = 'DELIVERED', attempts = 6 WHERE id = $1`, [ids[3]]);
    const from = new Date(Date.now() - 3_600_000).toISOString();
    const to = new Date(Date.now() + 60_000).toISOString();
    assert.equal((await ro('POST', '/v1/outbox:retry-batch', { json: { from, to } })).status, 403);
    const r = await ops('POST', '/v1/outbox:retry-batch', { json: { from, to, minAttempts: 3 } });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual([...r.json.ids].sort(), ids.slice(0, 2).sort());
    const { rows } = await h.tdb.db.query<{ id: string; status: string }>(
      'SELECT id, status FROM outbox WHERE id = ANY($1::uuid[])',
      [ids],
    );
    const st = Object.fromEntries(rows.map((x) => [x.id, x.status]));
    assert.deepEqual(
      ids.map((id) => st[id]),
      ['PENDING', 'PENDING', 'PENDING', 'DELIVERED'],
    );
    const none = await ops('POST', '/v1/outbox:retry-batch', {
      json: { from: to, to: new Date(Date.now() + 120_000).toISOString() },
    });
    assert.equal(none.json.retried, 0);
    assert.equal(
      (await ops('POST', '/v1/outbox:retry-batch', { json: { from: 'yesterday', to } })).status,
      400,
    );
    assert.ok((await ro('GET', '/v1/audit?action=outbox.retry_batch')).json.items.length === 2);
  });

  it("rotates the tenant's signing keys (Admin): the old key stays verifiable in grace, and the rotation is audited", async () => {
    await h.keys.ensureActive('demo');
    const before = (await h.keys.jwks('demo')).keys.map((k) => k.kid);
    assert.equal((await ops('POST', '/v1/admin/rotate-keys', { json: {} })).status, 403);
    assert.equal(
      (await admin('POST', '/v1/admin/rotate-keys', { json: { graceSeconds: 90_000 } })).status,
      400,
      'grace beyond 24 h',
    );
    const r = await admin('POST', '/v1/admin/rotate-keys', { json: { graceSeconds: 600 } });
    assert.equal(r.status, 200, r.text);
    assert.ok(r.json.active && !before.includes(r.json.active));
    assert.equal(r.json.grace, before[0]);
    const jwks = (await h.keys.jwks('demo')).keys.map((k) => k.kid).sort();
    assert.deepEqual(jwks, [r.json.active, before[0]].sort());
    const audit = await ro('GET', '/v1/audit?action=keys.rotate');
    assert.equal(audit.json.items[0].target.id, r.json.active);
    const idem = { 'idempotency-key': 'rotate-once-000001' };
    const a = await admin('POST', '/v1/admin/rotate-keys', { json: {}, headers: idem });
    const b = await admin('POST', '/v1/admin/rotate-keys', { json: {}, headers: idem });
    assert.equal(b.text, a.text, 'a replayed rotation does not rotate again');
    assert.equal((await ro('GET', '/v1/audit?action=keys.rotate')).json.items.length, 2);
  });
});
