import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startAdmin, type AdminHarness } from './harness.ts';
import { call } from '../helpers/http.ts';
import { viaEdge } from '../helpers/edge-auth.ts';
import { bucketOf } from '../../core/admin/flags/routes.ts';

describe('administration API: conventions and bad input (issue 6)', () => {
  let h: AdminHarness;
  let admin: ReturnType<AdminHarness['as']>;
  let ro: ReturnType<AdminHarness['as']>;
  before(async () => {
    h = await startAdmin();
    admin = h.as('admin');
    ro = h.as('readonly');
  });
  after(async () => h.close());

  it('requires X-Request-Id and answers Problem+JSON', async () => {
    const r = await call(h.origin, 'GET', '/v1/countries', {
      headers: viaEdge({ 'x-tenant-id': 'demo', 'x-roles': 'admin' }),
    });
    assert.equal(r.status, 400);
    assert.match(r.headers['content-type'] ?? '', /application\/problem\+json/);
    assert.equal(r.json.code, 'MISSING_REQUEST_ID');
    for (const f of ['type', 'title', 'status', 'detail', 'instance']) assert.ok(f in r.json, f);
  });

  it('refuses lower-case and unknown country codes, non-ISO currencies and a base outside the allowed list', async () => {
    const key = (k: string) => ({ 'idempotency-key': `country-${k}-0001` });
    assert.equal((await admin('GET', '/v1/countries/ke')).status, 400);
    let r = await admin('POST', '/v1/countries', { json: { code: 'ug' }, headers: key('lower') });
    assert.equal(r.json.code, 'COUNTRY_INVALID');
    r = await admin('POST', '/v1/countries', { json: { code: 'XX' }, headers: key('xx') });
    assert.equal(r.status, 400);
    assert.equal(r.json.code, 'COUNTRY_INVALID');
    r = await admin('POST', '/v1/countries', {
      json: { code: 'UG', base_currency: 'UGS', allowed_currencies: ['UGS'] },
      headers: key('ugs'),
    });
    assert.equal(r.json.code, 'CURRENCY_INVALID');
    r = await admin('POST', '/v1/countries', {
      json: { code: 'UG', base_currency: 'UGX', allowed_currencies: ['USD'] },
      headers: key('base'),
    });
    assert.equal(r.json.code, 'BASE_CURRENCY_NOT_ALLOWED');
    r = await admin('POST', '/v1/currencies', { json: { code: 'ABC' }, headers: key('abc') });
    assert.equal(r.json.code, 'CURRENCY_INVALID');
    assert.equal((await admin('GET', '/v1/countries/FR')).json.code, 'COUNTRY_NOT_FOUND');
    const v = await ro('POST', '/v1/validate/country', {
      json: { code: 'KE', base_currency: 'KES', allowed_currencies: ['USD'], timezone: 'Mars/Base' },
    });
    assert.equal(v.status, 200);
    assert.deepEqual(v.json.problems.map((p: { code: string }) => p.code).sort(), [
      'BASE_CURRENCY_NOT_ALLOWED',
      'COUNTRY_INVALID',
    ]);
  });

  it('replays a create with the same Idempotency-Key, 409s the same key with another body and a new key for the same country', async () => {
    const body = { code: 'UG', base_currency: 'UGX', allowed_currencies: ['UGX', 'USD'] };
    const first = await admin('POST', '/v1/countries', {
      json: body,
      headers: { 'idempotency-key': 'create-ug-000001' },
    });
    assert.equal(first.status, 201, first.text);
    assert.equal(first.json.region, 'Africa');
    const again = await admin('POST', '/v1/countries', {
      json: body,
      headers: { 'idempotency-key': 'create-ug-000001' },
    });
    assert.equal(again.status, 201);
    assert.equal(again.text, first.text);
    assert.equal(again.headers['idempotent-replayed'], 'true');
    const other = await admin('POST', '/v1/countries', {
      json: { ...body, allowed_currencies: ['UGX'] },
      headers: { 'idempotency-key': 'create-ug-000001' },
    });
    assert.equal(other.status, 409);
    assert.equal(other.json.code, 'IDEMPOTENCY_CONFLICT');
    const dup = await admin('POST', '/v1/countries', {
      json: body,
      headers: { 'idempotency-key': 'create-ug-000002' },
    });
    assert.equal(dup.status, 409);
    assert.equal(dup.json.code, 'COUNTRY_EXISTS');
    assert.equal(
      (await admin('POST', '/v1/countries', { json: body })).json.code,
      'IDEMPOTENCY_KEY_REQUIRED',
    );
  });

  it('requires If-Match on PATCH (428) and refuses a stale ETag (412)', async () => {
    const got = await ro('GET', '/v1/countries/UG');
    assert.equal(got.status, 200);
    const etag = got.headers.etag;
    assert.ok(etag);
    assert.equal((await ro('GET', '/v1/countries/UG', { headers: { 'if-none-match': etag } })).status, 304);
    // RFC 9110 13.1.2: a list of tags, a weak copy of the tag, or `*` all name the current one.
    for (const given of [`"other", ${etag}`, `W/${etag}`, '*'])
      assert.equal(
        (await ro('GET', '/v1/countries/UG', { headers: { 'if-none-match': given } })).status,
        304,
        given,
      );
    for (const given of ['"other"', 'W/"other"', ''])
      assert.equal(
        (await ro('GET', '/v1/countries/UG', { headers: { 'if-none-match': given } })).status,
        200,
        given,
      );
    assert.equal(
      (await admin('PATCH', '/v1/countries/UG', { json: { metadata: { note: 'a' } } })).status,
      428,
    );
    const ok = await admin('PATCH', '/v1/countries/UG', {
      json: { metadata: { note: 'a' } },
      headers: { 'if-match': etag },
    });
    assert.equal(ok.status, 200, ok.text);
    const stale = await admin('PATCH', '/v1/countries/UG', {
      json: { metadata: { note: 'b' } },
      headers: { 'if-match': etag },
    });
    assert.equal(stale.status, 412);
    assert.equal(stale.json.code, 'PRECONDITION_FAILED');
  });

  it('lets ReadOnly read but not change anything; a country in use cannot be deleted', async () => {
    assert.equal((await ro('GET', '/v1/schedules')).status, 200);
    const r = await ro('POST', '/v1/products', {
      json: { code: 'CASHIN', category: 'CASH' },
      headers: { 'idempotency-key': 'ro-product-0001' },
    });
    assert.equal(r.status, 403);
    assert.equal(r.json.code, 'FORBIDDEN');
    assert.equal((await ro('DELETE', '/v1/countries/UG')).status, 403);
    assert.equal((await admin('DELETE', '/v1/countries/KE')).json.code, 'COUNTRY_IN_USE');
  });

  it('refuses overlapping fee tiers and a tier with more decimals than the currency; validate lists every issue', async () => {
    const base = { kind: 'FEE', product: 'PAYMENT', currency: 'KES' };
    let r = await admin('POST', '/v1/schedules', {
      json: { ...base, items: [{ min_amount: '0', max_amount: '100' }, { min_amount: '50' }] },
      headers: { 'idempotency-key': 'sched-overlap-01' },
    });
    assert.equal(r.status, 400);
    assert.equal(r.json.code, 'SCHEDULE_OVERLAP');
    r = await admin('POST', '/v1/schedules', {
      json: { ...base, items: [{ min_amount: '0', fixed: '1.005' }] },
      headers: { 'idempotency-key': 'sched-precis-01' },
    });
    assert.equal(r.json.code, 'SCHEDULE_PRECISION');
    const v = await ro('POST', '/v1/schedules:validate', {
      json: {
        kind: 'FEE',
        currency: 'UGX',
        items: [
          { min_amount: '0', max_amount: '100', fixed: '0.5' },
          { min_amount: '90', max_amount: '200' },
        ],
      },
    });
    assert.equal(v.json.valid, false);
    assert.deepEqual(v.json.issues.map((i: { code: string }) => i.code).sort(), [
      'SCHEDULE_GAP',
      'SCHEDULE_OVERLAP',
      'SCHEDULE_PRECISION',
    ]);
  });

  it('creates a schedule inactive, activates it with If-Match, refuses to delete it while active, and quotes from it', async () => {
    const c = await admin('POST', '/v1/schedules', {
      json: {
        kind: 'FEE',
        product: 'PAYMENT',
        currency: 'KES',
        items: [{ min_amount: '0', percent_bps: 50 }],
      },
      headers: { 'idempotency-key': 'sched-payment-01' },
    });
    assert.equal(c.status, 201, c.text);
    assert.equal(c.json.status, 'INACTIVE');
    assert.equal(
      (await ro('POST', '/v1/fees:quote', { json: { product: 'PAYMENT', amount: '1000', currency: 'KES' } }))
        .json.code,
      'NO_ACTIVE_SCHEDULE',
    );
    const got = await ro('GET', `/v1/schedules/${c.json.id}`);
    const act = await admin('PATCH', `/v1/schedules/${c.json.id}`, {
      json: { status: 'ACTIVE' },
      headers: { 'if-match': got.headers.etag ?? '' },
    });
    assert.equal(act.status, 200, act.text);
    assert.equal((await admin('DELETE', `/v1/schedules/${c.json.id}`)).json.code, 'SCHEDULE_ACTIVE');
    const q = await ro('POST', '/v1/fees:quote', {
      json: { product: 'PAYMENT', amount: '1001', currency: 'KES' },
    });
    assert.equal(q.status, 200, q.text);
    assert.equal(q.json.fee, '5.01'); // 0.5 % of 1001 = 5.005 → 5.01
    const t = await ro('POST', '/v1/fees:quote', {
      json: { product: 'TRANSFER', amount: '5000', currency: 'KES' },
    });
    assert.equal(t.json.fee, '50.00');
    const l = await ro('POST', '/v1/limits:check', {
      json: { product: 'TRANSFER', action: 'TRANSFER', currency: 'KES', amount: '200000' },
    });
    assert.equal(l.json.within_transaction_limit, false);
  });

  it("does not show one tenant's webhooks to another tenant's admin, and refuses a non-http(s) URL", async () => {
    const bad = await admin('POST', '/v1/webhooks', {
      json: { url: 'ftp://example.com/hook', events: ['tenant.suspended'] },
      headers: { 'idempotency-key': 'hook-ftp-000001' },
    });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.code, 'WEBHOOK_INVALID');
    const made = await admin('POST', '/v1/webhooks', {
      json: { url: 'https://example.com/hook', events: ['tenant.suspended'] },
      headers: { 'idempotency-key': 'hook-ok-0000001' },
    });
    assert.equal(made.status, 201, made.text);
    assert.match(made.json.secret, /^whsec_/);
    const mine = await ro('GET', `/v1/webhooks/${made.json.id}`);
    assert.equal(mine.status, 200);
    assert.equal(mine.json.secret, undefined, 'the secret is shown only at creation');
    const otherAdmin = h.as('admin', 'other');
    assert.equal((await otherAdmin('GET', `/v1/webhooks/${made.json.id}`)).json.code, 'WEBHOOK_NOT_FOUND');
    assert.deepEqual((await otherAdmin('GET', '/v1/webhooks')).json.items, []);
  });

  it("lets only platform admins (the operator tenant's Admins) create tenants", async () => {
    const otherAdmin = h.as('admin', 'other');
    const refused = await otherAdmin('POST', '/v1/tenants', {
      json: { id: 'from-other', name: 'x', country: 'KE', baseCurrency: 'KES' },
      headers: { 'idempotency-key': 'tenant-from-other-1' },
    });
    assert.equal(refused.status, 403, refused.text);
    assert.match(refused.json.detail, /platform administrators/);
    const made = await admin('POST', '/v1/tenants', {
      json: { id: 'from-operator', name: 'x', country: 'KE', baseCurrency: 'KES' },
      headers: { 'idempotency-key': 'tenant-from-oper-1' },
    });
    assert.equal(made.status, 201, made.text);
  });

  it('refuses a rollout outside 0–100 and resolves a rollout deterministically within one point on 10,000 users', async () => {
    for (const rollout of [-1, 100.5, 250]) {
      const r = await admin('PUT', '/v1/flags/new-home', {
        json: { enabled: true, rollout },
        headers: { 'idempotency-key': `flag-bad-${String(rollout).replace('.', '_')}-x` },
      });
      assert.equal(r.status, 400, `rollout ${rollout}`);
    }
    const put = await admin('PUT', '/v1/flags/new-home', {
      json: { enabled: true, rollout: 37, scopes: [{ scope: 'COUNTRY', ref: 'KE' }] },
      headers: { 'idempotency-key': 'flag-new-home-01' },
    });
    assert.equal(put.status, 200, put.text);
    let on = 0;
    for (let i = 0; i < 10_000; i++) if (bucketOf('new-home', `user-${i}`) < 3700) on++;
    assert.ok(Math.abs(on / 100 - 37) <= 1, `share ${on / 100} %`);
    const a = await ro('GET', '/v1/flags/effective?userId=user-42');
    const b = await ro('GET', '/v1/flags/effective?userId=user-42');
    assert.deepEqual(a.json.flags, b.json.flags);
    assert.equal(
      (await ro('GET', '/v1/flags/effective?userId=user-42&country=UG')).json.flags['new-home'].value,
      false,
    );
  });

  it('resolves configuration by scope and says which scope won; PUT of a country config bumps its version', async () => {
    const put = await admin('PUT', '/v1/countries/KE/config', {
      json: { values: { 'kyc.max_wallet': 100000, 'sms.sender': 'DEMO' } },
      headers: { 'idempotency-key': 'ke-config-00001' },
    });
    assert.equal(put.status, 200, put.text);
    assert.equal(put.json.version, 1);
    const t = await admin('POST', '/v1/configs', {
      json: { scope: 'TENANT', key: 'kyc.max_wallet', value: 50000 },
      headers: { 'idempotency-key': 'cfg-tenant-0001' },
    });
    assert.equal(t.status, 201, t.text);
    const eff = await ro('GET', '/v1/configs/effective');
    const byKey = Object.fromEntries(eff.json.values.map((v: { key: string }) => [v.key, v]));
    assert.equal(byKey['kyc.max_wallet'].scope, 'TENANT');
    assert.equal(byKey['sms.sender'].scope, 'COUNTRY');
    assert.equal(
      (
        await admin('PUT', '/v1/countries/KE/config', {
          json: { values: { 'sms.sender': 'X' } },
          headers: { 'idempotency-key': 'ke-config-00002' },
        })
      ).json.version,
      2,
    );
    const bad = await admin('POST', '/v1/configs', {
      json: { scope: 'GLOBAL', scopeRef: 'x', key: 'a.b', value: 1 },
      headers: { 'idempotency-key': 'cfg-bad-000001' },
    });
    assert.equal(bad.json.code, 'CONFIG_INVALID');
    const audit = await ro('GET', '/v1/audit?resource=country&resource_id=KE');
    assert.ok(audit.json.items.some((a: { action: string }) => a.action === 'country.config_replace'));
    assert.equal((await h.as('ops')('GET', '/v1/audit:verify')).json.ok, true);
  });

  it('suspends and activates a tenant with the colon routes', async () => {
    const s = await admin('POST', '/v1/tenants/demo:suspend');
    assert.equal(s.status, 200, s.text);
    assert.equal(s.json.status, 'SUSPENDED');
    assert.equal((await admin('POST', '/v1/tenants/demo:activate')).json.status, 'ACTIVE');
    assert.equal((await admin('POST', '/v1/tenants/other:suspend')).json.code, 'TENANT_NOT_FOUND');
  });

  // Small contract fixes (issue 15 item 8).
  it('lists IANA canonical time zones and still accepts their aliases on input', async () => {
    const items: string[] = (await ro('GET', '/v1/reference/timezones')).json.items;
    for (const z of ['America/Argentina/Buenos_Aires', 'Asia/Kolkata', 'Europe/Kyiv', 'Africa/Nairobi'])
      assert.ok(items.includes(z), z);
    for (const z of ['America/Buenos_Aires', 'Asia/Calcutta', 'Europe/Kiev'])
      assert.ok(!items.includes(z), `${z} is an alias`);
    assert.equal(new Set(items).size, items.length, 'no duplicates');
    assert.deepEqual([...items].sort(), items);
    const r = await admin('POST', '/v1/countries', {
      json: { code: 'IN', timezones: ['Asia/Calcutta'] },
      headers: { 'idempotency-key': 'country-in-alias-01' },
    });
    assert.equal(r.status, 201, r.text);
    const bad = await admin('POST', '/v1/countries', {
      json: { code: 'UA', timezones: ['Europe/Atlantis'] },
      headers: { 'idempotency-key': 'country-ua-bad-001' },
    });
    assert.equal(bad.json.code, 'COUNTRY_INVALID');
  });

  it("checks limits in the tenant's base currency when none is named", async () => {
    const named = await ro('POST', '/v1/limits:check', {
      json: { product: 'TRANSFER', action: 'TRANSFER', currency: 'KES', amount: '200000' },
    });
    const unnamed = await ro('POST', '/v1/limits:check', {
      json: { product: 'TRANSFER', action: 'TRANSFER', amount: '200000' },
    });
    assert.equal(unnamed.status, 200, unnamed.text);
    assert.deepEqual(unnamed.json, named.json);
  });

  it('takes `{}` as the body of :suspend and :activate, and still refuses a body that says something', async () => {
    const s = await admin('POST', '/v1/tenants/demo:suspend', { json: {} });
    assert.equal(s.status, 200, s.text);
    assert.equal((await admin('POST', '/v1/tenants/demo:activate', { json: {} })).json.status, 'ACTIVE');
    const r = await admin('POST', '/v1/tenants/demo:suspend', { json: { reason: 'x' } });
    assert.equal(r.status, 415);
  });

  it('names the environment envId in schedules as in configs and flags, reading the former `env` for a release', async () => {
    const envs = await admin('POST', '/v1/tenants/demo/environments', {
      json: { name: 'uat', envType: 'STG' },
      headers: { 'idempotency-key': 'env-uat-000000001' },
    });
    assert.equal(envs.status, 201, envs.text);
    const body = { product: 'TRANSFER', amount: '5000', currency: 'KES' };
    const plain = await ro('POST', '/v1/fees:quote', { json: body });
    const byId = await ro('POST', '/v1/fees:quote', { json: { ...body, envId: envs.json.id } });
    const byOld = await ro('POST', '/v1/fees:quote', { json: { ...body, env: envs.json.id } });
    assert.equal(byId.status, 200, byId.text);
    assert.deepEqual(byOld.json, byId.json);
    assert.deepEqual(byId.json, plain.json, 'no environment schedule: the tenant one applies');
    const both = await ro('POST', '/v1/fees:quote', { json: { ...body, envId: envs.json.id, env: 'other' } });
    assert.equal(both.status, 400);
    const eff = await ro(
      'GET',
      `/v1/schedules:effective?kind=FEE&product=TRANSFER&currency=KES&envId=${envs.json.id}`,
    );
    assert.equal(eff.status, 200, eff.text);
  });

  it('reports the customer authentication interface as version 1.0.0', async () => {
    const doc = (await call(h.origin, 'GET', '/v1/openapi.json')).json;
    const tag = doc.tags.find((t: { name: string }) => t.name === 'customer-auth');
    assert.equal(tag['x-interface-version'], '1.0.0');
    assert.ok(doc.paths['/auth/stepup/complete']?.post, 'SPEC 4.2 names /auth/stepup/complete');
  });

  // Routes no test called before (issue 21 item 6).
  it("maps a country's currencies: the base only from the allowed list, the allowed list always with the base; audited", async () => {
    const key = (k: string) => ({ 'idempotency-key': `country-cur-${k}-0001` });
    assert.equal(
      (
        await admin('POST', '/v1/countries', {
          json: { code: 'TZ', base_currency: 'TZS', allowed_currencies: ['TZS', 'USD'] },
          headers: key('tz'),
        })
      ).status,
      201,
    );
    assert.deepEqual((await ro('GET', '/v1/countries/TZ/currencies')).json, {
      code: 'TZ',
      base: 'TZS',
      allowed: ['TZS', 'USD'],
    });
    const base = await admin('PUT', '/v1/countries/TZ/currencies/base', {
      json: { currency: 'USD' },
      headers: key('base'),
    });
    assert.equal(base.status, 200, base.text);
    assert.deepEqual(base.json, { code: 'TZ', base: 'USD', allowed: ['TZS', 'USD'] });
    assert.equal(
      (
        await admin('PUT', '/v1/countries/TZ/currencies/base', {
          json: { currency: 'KES' },
          headers: key('base-kes'),
        })
      ).json.code,
      'BASE_CURRENCY_NOT_ALLOWED',
    );
    assert.equal(
      (
        await admin('PUT', '/v1/countries/TZ/currencies/allowed', {
          json: { currencies: ['TZS'] },
          headers: key('drop-base'),
        })
      ).json.code,
      'BASE_CURRENCY_NOT_ALLOWED',
    );
    assert.equal(
      (
        await admin('PUT', '/v1/countries/TZ/currencies/allowed', {
          json: { currencies: ['USD', 'XYZ'] },
          headers: key('xyz'),
        })
      ).json.code,
      'CURRENCY_INVALID',
    );
    const allowed = await admin('PUT', '/v1/countries/TZ/currencies/allowed', {
      json: { currencies: ['USD', 'KES'] },
      headers: key('allowed'),
    });
    assert.equal(allowed.status, 200, allowed.text);
    assert.deepEqual((await ro('GET', '/v1/countries/TZ/currencies')).json, {
      code: 'TZ',
      base: 'USD',
      allowed: ['USD', 'KES'],
    });
    assert.equal(
      (await ro('PUT', '/v1/countries/TZ/currencies/base', { json: { currency: 'KES' }, headers: key('ro') }))
        .status,
      403,
    );
    assert.equal((await ro('GET', '/v1/countries/FR/currencies')).json.code, 'COUNTRY_NOT_FOUND');
    const audit = await ro('GET', '/v1/audit?resource=country&resource_id=TZ');
    const actions = audit.json.items.map((a: { action: string }) => a.action);
    assert.ok(
      actions.includes('country.currency_base_set') && actions.includes('country.currency_allowed_set'),
      actions.join(),
    );
  });

  it('serves reference data: countries (all, or one by code), regions, locale hints (all, or one country)', async () => {
    const all = await ro('GET', '/v1/countries:reference');
    assert.equal(all.status, 200, all.text);
    assert.ok(all.json.items.length >= 240, 'every ISO 3166 country');
    const ke = await ro('GET', '/v1/countries:reference?code=KE');
    assert.deepEqual(
      ke.json.items.map((c: { code: string }) => c.code),
      ['KE'],
    );
    assert.equal((await ro('GET', '/v1/countries:reference?code=ke')).status, 400);
    const regions = await ro('GET', '/v1/reference/regions');
    assert.equal(regions.status, 200, regions.text);
    const african = Object.values(regions.json.regions.Africa as Record<string, string[]>).flat();
    assert.ok(african.includes('KE') && african.includes('NG') && !african.includes('FR'));
    const locales = await ro('GET', '/v1/reference/locales?country=KE');
    assert.equal(locales.status, 200, locales.text);
    assert.equal(locales.json.items.length, 1);
    assert.ok(
      locales.json.items[0].locales.some((l: string) => l.endsWith('-KE')),
      JSON.stringify(locales.json.items[0]),
    );
    assert.equal((await ro('GET', '/v1/reference/locales')).json.items.length, all.json.items.length);
  });

  it("reads one audit record of the caller's tenant by id; another tenant's id is 404", async () => {
    const page = await ro('GET', '/v1/audit?resource=country&resource_id=TZ');
    const first = page.json.items[0] as { id: string | number; action: string };
    assert.ok(first, page.text);
    const one = await ro('GET', `/v1/audit/${first.id}`);
    assert.equal(one.status, 200, one.text);
    assert.deepEqual(one.json, first);
    const foreign = await h.as('admin', 'other')('GET', `/v1/audit/${first.id}`);
    assert.equal(foreign.status, 404);
    assert.equal(foreign.json.code, 'AUDIT_NOT_FOUND');
    assert.equal((await ro('GET', '/v1/audit/not-a-number')).status, 400);
  });
});

describe('administration API: rate limit on mutations', () => {
  it('answers 429 with Retry-After past the per-source limit', async () => {
    const h = await startAdmin({ perSourcePerMinute: 2, seed: false });
    try {
      const admin = h.as('admin');
      const codes = [];
      for (let i = 0; i < 3; i++)
        codes.push(
          (
            await admin('POST', '/v1/products', {
              json: { code: `P${i}X`, category: 'X' },
              headers: { 'idempotency-key': `rate-limit-${i}-0001` },
            })
          ).status,
        );
      assert.deepEqual(codes.slice(0, 2), [201, 201]);
      const r = await admin('POST', '/v1/products', {
        json: { code: 'PZZ', category: 'X' },
        headers: { 'idempotency-key': 'rate-limit-9-0001' },
      });
      assert.equal(r.status, 429);
      assert.ok(Number(r.headers['retry-after']) >= 1);
    } finally {
      await h.close();
    }
  });
});
