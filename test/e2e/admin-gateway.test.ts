import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { enqueue } from '../../core/outbox/outbox.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, eventually, type Res } from '../helpers/http.ts';
import { signRequest } from '../../shared/api-key-signing.ts';

/**
 * Issue 6 end to end through the dev gateway with nothing mocked: the demo service tokens
 * (Admin, Ops, ReadOnly) checked at the edge (the registry's role_actions) and again in core,
 * and a tenant suspension that the edge applies to the tenant's customers.
 */
describe('administration API through the gateway', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  const tokens: Record<'admin' | 'ops' | 'readOnly', string> = { admin: '', ops: '', readOnly: '' };

  const as =
    (who: keyof typeof tokens) =>
    (
      method: string,
      path: string,
      o: { json?: unknown; headers?: Record<string, string> } = {},
    ): Promise<Res> =>
      call(gw, method, path, {
        ...(o.json !== undefined ? { json: o.json } : {}),
        headers: { authorization: `Bearer ${tokens[who]}`, 'x-request-id': randomUUID(), ...o.headers },
      });

  async function lastCode(phone: string): Promise<string> {
    const lines = (await readFile(join(dataDir, 'dev-sms.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { to: string; code: string });
    const code = lines.filter((l) => l.to === phone).at(-1)?.code;
    assert.equal(typeof code, 'string');
    return code ?? '';
  }

  /** Sign up and log in a customer of the demo tenant; returns its access token. */
  async function customer(phone: string, device: string): Promise<string> {
    assert.equal(
      (await call(gw, 'POST', '/customers/auth/otp/send', { json: { tenantId: 'demo', phone } })).status,
      202,
    );
    const v = await call(gw, 'POST', '/customers/auth/otp/verify', {
      json: { tenantId: 'demo', phone, otp: await lastCode(phone) },
    });
    assert.equal(v.status, 200, v.text);
    assert.equal(
      (
        await call(gw, 'POST', '/customers/auth/pin/set', {
          json: { tenantId: 'demo', phone, pin: '4826', verificationToken: v.json.verificationToken },
        })
      ).status,
      204,
    );
    const login = await call(gw, 'POST', '/customers/auth/login', {
      json: { tenantId: 'demo', phone, pin: '4826' },
      headers: { 'x-device-id': device },
    });
    assert.equal(login.status, 200, login.text);
    return login.json.accessToken;
  }

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-admin-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    stack = await startStack(config, { checkResponses: true, checkTimeoutMs: 3000 });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as {
      serviceTokens: Record<keyof typeof tokens, { token: string }>;
    };
    for (const k of ['admin', 'ops', 'readOnly'] as const) tokens[k] = demo.serviceTokens[k].token;
  });
  after(async () => {
    await stack.stop();
    await tdb.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('ReadOnly reads a list but is refused a mutation at the edge', async () => {
    const ro = as('readOnly');
    const list = await ro('GET', '/v1/countries');
    assert.equal(list.status, 200, list.text);
    assert.ok(list.json.items.some((c: { code: string }) => c.code === 'KE'));
    assert.ok(list.headers.etag);
    const r = await ro('POST', '/v1/products', {
      json: { code: 'RO_TRY', category: 'X' },
      headers: { 'idempotency-key': 'e2e-ro-product-01' },
    });
    assert.equal(r.status, 403, r.text);
    assert.notEqual(
      r.json?.code,
      'FORBIDDEN',
      'the edge refused it: core, which answers FORBIDDEN for a missing role, never saw it',
    );
    const { rows } = await tdb.db.query(`SELECT 1 FROM admin_products WHERE code = 'RO_TRY'`);
    assert.equal(rows.length, 0);
    assert.equal(
      (await ro('GET', '/v1/countries', { headers: { authorization: 'Bearer svc_not-a-token' } })).status,
      401,
    );
  });

  it('core checks the role again when the edge lets a request through', async () => {
    // Core behind the edge trusts identity headers only with the edge's secret; a direct call has none.
    const direct = await call(`http://127.0.0.1:${stack.ports.core}`, 'POST', '/v1/products', {
      json: { code: 'DIRECT', category: 'X' },
      headers: {
        'x-request-id': randomUUID(),
        'idempotency-key': 'e2e-direct-0001',
        'x-tenant-id': 'demo',
        'x-roles': 'admin',
      },
    });
    assert.ok(direct.status === 401 || direct.status === 403, direct.text);
    // ReadOnly reading an Ops-only list: allowed nowhere.
    assert.equal((await as('readOnly')('GET', '/v1/idempotency')).status, 403);
  });

  it('Admin creates and reads back; Ops retries an outbox message but may not create a country', async () => {
    const admin = as('admin');
    const made = await admin('POST', '/v1/products', {
      json: { code: 'CASHIN', category: 'CASH' },
      headers: { 'idempotency-key': 'e2e-admin-product-1' },
    });
    assert.equal(made.status, 201, made.text);
    const got = await admin('GET', '/v1/products/CASHIN');
    assert.equal(got.status, 200);
    assert.equal(got.json.category, 'CASH');
    const flag = await admin('PUT', '/v1/flags/e2e-flag', {
      json: { enabled: true, rollout: 50 },
      headers: { 'idempotency-key': 'e2e-admin-flag-01' },
    });
    assert.equal(flag.status, 200, flag.text);
    assert.equal(
      (await as('readOnly')('GET', '/v1/flags')).json.items.some(
        (f: { key: string }) => f.key === 'e2e-flag',
      ),
      true,
    );

    const ops = as('ops');
    const id = await enqueue(stack.db, {
      tenantId: 'demo',
      aggregate: 'order',
      aggregateId: 'e2e-1',
      event: 'order.failed',
      payload: {},
    });
    await stack.db.query(`UPDATE outbox SET status = 'DEAD', attempts = 8 WHERE id = $1`, [id]);
    const retry = await ops('POST', `/v1/outbox/${id}:retry`);
    assert.equal(retry.status, 200, retry.text);
    assert.equal(retry.json.status, 'PENDING');
    const country = await ops('POST', '/v1/countries', {
      json: { code: 'UG', base_currency: 'UGX', allowed_currencies: ['UGX'] },
      headers: { 'idempotency-key': 'e2e-ops-country-1' },
    });
    assert.equal(country.status, 403, country.text);
    assert.equal((await admin('GET', '/v1/countries/UG')).json.code, 'COUNTRY_NOT_FOUND');
    const audit = await as('readOnly')('GET', '/v1/audit?action=outbox.retry');
    assert.equal(audit.json.items[0]?.actor.type, 'staff');
  });

  it("a webhook secret is shown once: GET /v1/idempotency/{key} never returns it, the creator's replay does", async () => {
    const admin = as('admin');
    const key = { 'idempotency-key': `hook-${randomUUID()}` };
    // A name that never resolves (.invalid): accepted at create, and nothing here sends to it.
    const body = { url: 'https://idempotency-e2e.invalid/hook', events: ['transfer.completed'] };
    const made = await admin('POST', '/v1/webhooks', { json: body, headers: key });
    assert.equal(made.status, 201, made.text);
    const secret: string = made.json.secret;
    assert.match(secret, /^whsec_/);
    const record = await admin('GET', `/v1/idempotency/${key['idempotency-key']}`);
    assert.equal(record.status, 200, record.text);
    assert.ok(!record.text.includes(secret) && !record.text.includes('whsec_'), record.text);
    assert.equal(JSON.parse(record.json.response_body).secret, '[redacted]');
    assert.equal(record.json.principal.startsWith('staff:'), true);
    const listed = await as('ops')('GET', `/v1/idempotency?key=${key['idempotency-key']}`);
    assert.equal(listed.json.items.length, 1);
    assert.ok(!listed.text.includes('whsec_'));
    const { rows } = await tdb.db.query(
      `SELECT 1 FROM idempotency_keys WHERE key = $1 AND (response_body LIKE '%whsec_%' OR position($2::bytea IN response_sealed) > 0)`,
      [key['idempotency-key'], Buffer.from(secret)],
    );
    assert.equal(rows.length, 0, 'not in clear at rest');
    const replay = await admin('POST', '/v1/webhooks', { json: body, headers: key });
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.equal(replay.json.secret, secret, 'a replay by the same caller returns the original response');
  });

  it('two API keys of one tenant never share an Idempotency-Key: the same key and body post twice, each replays its own', async () => {
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as {
      settlementAccounts: Record<string, string>;
    };
    const keys: { id: string; secret: string }[] = [];
    for (const name of ['idem-one', 'idem-two']) {
      const k = await as('admin')('POST', '/api-keys', { json: { name, scopes: ['core:write'] } });
      assert.equal(k.status, 201, k.text);
      keys.push({ id: k.json.id, secret: k.json.secret });
    }
    const signed = (k: { id: string; secret: string }, path: string, json: unknown, idem: string) => {
      const payload = JSON.stringify(json);
      return call(gw, 'POST', path, {
        body: payload,
        headers: {
          'content-type': 'application/json',
          'x-request-id': randomUUID(),
          'idempotency-key': idem,
          ...signRequest({ method: 'POST', path, body: payload, keyId: k.id, secret: k.secret }),
        },
      });
    };
    const [one, two] = keys as [{ id: string; secret: string }, { id: string; secret: string }];
    const account = await signed(
      one,
      '/v1/core/accounts',
      {
        owner_type: 'customer',
        owner_id: `idem-${randomUUID().slice(0, 8)}`,
        product_code: 'WALLET_MAIN',
        currency: 'KES',
      },
      `acct-${randomUUID()}`,
    );
    assert.equal(account.status, 201, account.text);
    const posting = {
      currency: 'KES',
      entries: [
        { account_id: demo.settlementAccounts.KES, side: 'debit', amount: '1.00' },
        { account_id: account.json.id, side: 'credit', amount: '1.00' },
      ],
    };
    const idem = `post-${randomUUID()}`;
    const first = await signed(one, '/v1/core/postings', posting, idem);
    assert.equal(first.status, 201, first.text);
    const second = await signed(two, '/v1/core/postings', posting, idem);
    assert.equal(second.status, 201, second.text);
    assert.equal(second.headers['idempotent-replayed'], undefined, "not the other key's stored response");
    assert.notEqual(second.json.id, first.json.id);
    const again = await signed(one, '/v1/core/postings', posting, idem);
    assert.equal(again.headers['idempotent-replayed'], 'true');
    assert.equal(again.json.id, first.json.id);
    const { rows } = await tdb.db.query<{ principal: string }>(
      'SELECT principal FROM idempotency_keys WHERE key = $1 ORDER BY principal',
      [idem],
    );
    assert.deepEqual(
      rows.map((r) => r.principal),
      [`client:${one.id}`, `client:${two.id}`].sort(),
    );
  });

  it("an API key's allowlist is read as the policy reads ranges: ::/0 holds no IPv4 caller (403 ip_not_allowed)", async () => {
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as {
      settlementAccounts: Record<string, string>;
    };
    const path = `/v1/core/accounts/${demo.settlementAccounts.KES}`;
    const read = async (allowlist: string[]): Promise<Res> => {
      const k = await as('admin')('POST', '/api-keys', {
        json: { name: `allow-${allowlist.join('-')}`, scopes: ['core:read'], ip_allowlist: allowlist },
      });
      assert.equal(k.status, 201, k.text);
      assert.deepEqual(k.json.ip_allowlist, allowlist);
      return call(gw, 'GET', path, {
        headers: {
          'x-request-id': randomUUID(),
          ...signRequest({ method: 'GET', path, keyId: k.json.id, secret: k.json.secret }),
        },
      });
    };
    // This test reaches the gateway from 127.0.0.1 (IPv4 loopback).
    const v6 = await read(['::/0']);
    assert.equal(v6.status, 403, v6.text);
    assert.equal(v6.json.code, 'ip_not_allowed');
    const loopback = await read(['127.0.0.0/8']);
    assert.equal(loopback.status, 200, `the same request from inside the allowlist: ${loopback.text}`);
  });

  it('staff manage a tenant their tenant created (owner tuple) through the gateway, and no other tenant', async () => {
    const admin = as('admin');
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('stranger', 'Stranger', 'KE', 'KES')`,
    );
    const made = await admin('POST', '/v1/tenants', {
      json: { id: 'demo-branch', name: 'Demo branch', country: 'KE', baseCurrency: 'KES' },
      headers: { 'idempotency-key': `tenant-${randomUUID()}` },
    });
    assert.equal(made.status, 201, made.text);
    const got = await eventually(
      () => admin('GET', '/v1/tenants/demo-branch'),
      (r) => r.status === 200,
    );
    assert.equal(got.status, 200, got.text);
    assert.equal(got.json.id, 'demo-branch');
    const suspended = await admin('POST', '/v1/tenants/demo-branch:suspend');
    assert.equal(suspended.status, 200, suspended.text);
    assert.equal(suspended.json.status, 'SUSPENDED');
    assert.equal((await admin('POST', '/v1/tenants/demo-branch:activate')).json.status, 'ACTIVE');
    // Owners get the actions the policy lists for them, not the created tenant's environments.
    const envs = await admin('GET', '/v1/tenants/demo-branch/environments');
    assert.equal(envs.status, 403, envs.text);
    const stranger = await admin('GET', '/v1/tenants/stranger');
    assert.equal(stranger.status, 403, stranger.text);
    assert.equal(stranger.json.code, 'POLICY_DENIED');
  });

  it("a suspended tenant's customers are refused at the edge, and allowed again after :activate", async () => {
    const device = `dev-${randomUUID().slice(0, 8)}`;
    const access = await customer('+254711900001', device);
    const accounts = () =>
      call(gw, 'GET', '/v1/accounts', {
        headers: { authorization: `Bearer ${access}`, 'x-device-id': device },
      });
    assert.equal((await accounts()).status, 200);
    const admin = as('admin');
    const s = await admin('POST', '/v1/tenants/demo:suspend');
    assert.equal(s.status, 200, s.text);
    assert.equal(s.json.status, 'SUSPENDED');
    const refused = await eventually(accounts, (r) => r.status === 403);
    assert.equal(refused.status, 403, refused.text);
    const login = await call(gw, 'POST', '/customers/auth/login', {
      json: { tenantId: 'demo', phone: '+254711900001', pin: '4826' },
      headers: { 'x-device-id': device },
    });
    assert.notEqual(login.status, 200, "a suspended tenant's customer cannot sign in either");
    const a = await admin('POST', '/v1/tenants/demo:activate');
    assert.equal(a.status, 200, a.text);
    assert.equal(a.json.status, 'ACTIVE');
    const back = await eventually(accounts, (r) => r.status === 200);
    assert.equal(back.status, 200, back.text);
  });
});
