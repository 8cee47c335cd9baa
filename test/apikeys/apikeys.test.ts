import assert from 'node:assert/strict';
import { TokenVerifier } from '../../shared/token-keys.ts';
import { randomBytes, X509Certificate } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { ApiKeys } from '../../core/apikeys/store.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { createLogger } from '../../shared/log.ts';
import { AuditWriter } from '../../edge/audit-writer.ts';
import { RiskEngine } from '../../edge/auth/risk.ts';
import { requestAmount } from '../../edge/auth/budget.ts';
import { createDecider } from '../../edge/authz.ts';
import { viewOf } from '../../edge/check.ts';
import { defaultBundleDir, loadTrustedKeys } from '../../policy/runtime/bundle.ts';
import { PolicyStore } from '../../policy/runtime/store.ts';
import { buildRouteTable, type EdgeRoute } from '../../edge/routes.ts';
import { routeDeclarations } from '../../shared/routes/index.ts';
import { EdgeState } from '../../edge/state/store.ts';
import type { CheckResponse } from '../../edge/types.ts';
import { canonicalString, signRequest } from '../../shared/api-key-signing.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { makePki } from '../helpers/pki.ts';
import { makeForge } from '../helpers/pki-forge.ts';
import { envoyRequest, headerOf, startTestEdge, type TestEdge } from '../helpers/edge.ts';

const log = createLogger(process.env.DEBUG_EDGE ? 'warn' : 'silent');
const extraRoutes: EdgeRoute[] = [
  {
    method: 'POST',
    template: '/t/transfers',
    purpose: 'customer.transact',
    resource: 'transaction',
    action: 'transfer.create',
    credential: 'customer',
    money: 'request',
  },
  {
    method: 'GET',
    template: '/t/transactions',
    purpose: 'customer.account.view',
    resource: 'transaction',
    action: 'transaction.read',
    credential: 'customer',
  },
];
const body = (r: CheckResponse) => JSON.parse(r.denied_response?.body ?? '{}');

describe('request signing (SDK) test vector', () => {
  it('matches the documented canonical string and signature', () => {
    const input = {
      method: 'post',
      path: '/v1/transfers?dry=1',
      body: '{"amount":"100.00","currency":"KES"}',
      keyId: 'pk_live_TESTVECTOR0000000000',
      secret: 'sk_test_vector_secret_0123456789',
      date: 'Sun, 22 Nov 2026 10:00:00 GMT',
      nonce: 'n0nce-0123456789abcdef',
    };
    assert.equal(
      canonicalString(input.method, input.path, input.body, input.date, input.nonce),
      'POST\n/v1/transfers?dry=1\n786d885b0c60c5155cc151a080804265479e7382a8559f673fe63245aef06af0\nSun, 22 Nov 2026 10:00:00 GMT\nn0nce-0123456789abcdef',
    );
    assert.deepEqual(signRequest(input), {
      'x-api-key-id': 'pk_live_TESTVECTOR0000000000',
      'x-signature': 'stLD1X2vQiEcIQ3ET57NELl5im3hd4J4NcBhFP1Q20c',
      'x-nonce': 'n0nce-0123456789abcdef',
      date: 'Sun, 22 Nov 2026 10:00:00 GMT',
    });
  });
});

describe('API keys at the edge', () => {
  let t: TestDb;
  let keys: KeyStore;
  let store: ApiKeys;
  let edge: TestEdge;
  let edge2: TestEdge;
  const states: EdgeState[] = [];
  /** The deciders' clock runs this far ahead of the wall clock (key expiry without waiting). */
  const clock = { skewMs: 0 };
  const audits: AuditWriter[] = [];

  const makeEdge = async () => {
    const state = new EdgeState(t.db, new TokenVerifier(t.db), keys.apiKeySecrets, log);
    await state.start();
    const policies = new PolicyStore(await loadTrustedKeys());
    await policies.load(defaultBundleDir);
    const audit = new AuditWriter(t.db, log);
    states.push(state);
    audits.push(audit);
    const decide = createDecider({
      state,
      challenges: keys.challenges,
      policies,
      audit,
      risk: new RiskEngine(),
      log,
      edgeSecret: 's',
      now: () => Date.now() + clock.skewMs,
    });
    // A generous decision budget: these tests assert outcomes, not timing (the 100 ms budget has its own tests).
    return startTestEdge({
      log,
      decide,
      resolve: buildRouteTable([...routeDeclarations, ...extraRoutes]),
      budgetMs: 10_000,
    });
  };
  const newKey = (tenant: string, over: Partial<Parameters<ApiKeys['create']>[2]> = {}) =>
    store.create(tenant, 'admin-1', {
      name: 'k',
      scopes: ['payments:write', 'payments:read'],
      budget: {},
      ipAllowlist: [],
      expiresAt: undefined,
      ...over,
    });
  const signed = (
    k: { key: { id: string }; secret: string },
    method: string,
    path: string,
    payload = '',
    extra: Record<string, string> = {},
    over: Partial<Parameters<typeof signRequest>[0]> = {},
  ) =>
    envoyRequest(method, path, {
      body: payload,
      headers: {
        'content-type': 'application/json',
        ...signRequest({ method, path, body: payload, keyId: k.key.id, secret: k.secret, ...over }),
        ...extra,
      },
      ip: '198.51.100.10',
    });
  /** The API keys the edges' audit records (written out now) name for refusals `code` in `tenants`. */
  const auditedKeys = async (tenants: string[], code: string): Promise<string[]> => {
    for (const a of audits) await a.flush();
    const { rows } = await t.db.query<{ actor: { type: string; id: string } }>(
      `SELECT actor FROM audit_log WHERE tenant_id = ANY($1) AND decision->>'code' = $2`,
      [tenants, code],
    );
    return rows.map((r) => (r.actor.type === 'service' ? r.actor.id : JSON.stringify(r.actor))).sort();
  };
  const transfer = (amount = '100.00', currency = 'KES') =>
    JSON.stringify({ amount, currency, beneficiaryId: 'b1' });

  before(async () => {
    t = await freshDatabase();
    for (const id of ['t1', 't2'])
      await t.db.query(
        `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`,
        [id],
      );
    keys = new KeyStore(t.db, randomBytes(32));
    store = new ApiKeys(t.db, keys);
    edge = await makeEdge();
    edge2 = await makeEdge();
  });
  after(async () => {
    await edge.close();
    await edge2.close();
    for (const a of audits) await a.stop();
    for (const s of states) await s.stop();
    await t.drop();
  });

  it('allows a correctly signed request and tells core who it is', async () => {
    const k = await newKey('t1');
    const res = await edge.check(signed(k, 'POST', '/t/transfers', transfer()));
    assert.equal(res.status.code, 0, res.denied_response?.body);
    assert.equal(headerOf(res, 'x-principal-id'), k.key.id);
    assert.equal(headerOf(res, 'x-tenant-id'), 't1');
    assert.equal(headerOf(res, 'x-scopes'), 'payments:write payments:read');
  });

  it('refuses a request missing any one of the four headers', async () => {
    const k = await newKey('t1');
    for (const name of ['x-signature', 'x-nonce', 'date']) {
      const req = signed(k, 'GET', '/t/transactions');
      const h = req.attributes?.request?.http?.headers as Record<string, string>;
      delete h[name];
      const res = await edge.check(req);
      assert.equal(res.denied_response?.status.code, 401, name);
      assert.equal(body(res).code, 'missing_signature_headers', name);
      assert.match(body(res).message, new RegExp(name));
    }
    const noId = await edge.check(
      envoyRequest('GET', '/t/transactions', {
        headers: {
          'x-api-key-id': '',
          'x-signature': 'x',
          'x-nonce': 'n'.repeat(16),
          date: new Date().toUTCString(),
        },
      }),
    );
    assert.equal(body(noId).code, 'missing_signature_headers');
  });

  it('refuses a signature over another body, another path, or a lower-case method', async () => {
    const k = await newKey('t1');
    const good = signRequest({
      method: 'POST',
      path: '/t/transfers',
      body: transfer('1.00'),
      keyId: k.key.id,
      secret: k.secret,
    });
    const otherBody = await edge.check(
      envoyRequest('POST', '/t/transfers', {
        body: transfer('999.00'),
        headers: { ...good, 'content-type': 'application/json' },
      }),
    );
    assert.equal(body(otherBody).code, 'bad_signature');
    const otherPath = await edge.check(
      envoyRequest('POST', '/t/transfers?x=1', {
        body: transfer('1.00'),
        headers: { ...good, 'content-type': 'application/json' },
      }),
    );
    assert.equal(body(otherPath).code, 'bad_signature');
    // A client that forgot to upper-case the method signs a different string.
    const nonce = randomBytes(16).toString('hex');
    const date = new Date().toUTCString();
    const { createHmac } = await import('node:crypto');
    const lower = canonicalString('post', '/t/transfers', transfer(), date, nonce).replace(/^POST/, 'post');
    const sig = createHmac('sha256', k.secret).update(lower).digest('base64url');
    const res = await edge.check(
      envoyRequest('POST', '/t/transfers', {
        body: transfer(),
        headers: {
          'x-api-key-id': k.key.id,
          'x-signature': sig,
          'x-nonce': nonce,
          date,
          'content-type': 'application/json',
        },
      }),
    );
    assert.equal(body(res).code, 'bad_signature');
  });

  it('refuses a date 11 minutes old or 11 minutes ahead', async () => {
    const k = await newKey('t1');
    for (const shift of [-11, 11]) {
      const res = await edge.check(
        signed(
          k,
          'GET',
          '/t/transactions',
          '',
          {},
          { date: new Date(Date.now() + shift * 60_000).toUTCString() },
        ),
      );
      assert.equal(body(res).code, 'stale_date', String(shift));
      assert.equal(res.denied_response?.status.code, 401);
    }
  });

  it('accepts a nonce once per key, across two edge processes sharing the database', async () => {
    const k = await newKey('t1');
    const req = signed(k, 'GET', '/t/transactions');
    assert.equal((await edge.check(req)).status.code, 0);
    assert.equal(body(await edge.check(req)).code, 'nonce_reused');
    assert.equal(body(await edge2.check(req)).code, 'nonce_reused');
    const fresh = signed(k, 'GET', '/t/transactions');
    assert.equal((await edge2.check(fresh)).status.code, 0);
  });

  it('a key core has not re-sealed for the edge yet fails closed (503), not 403 invalid_key; re-sealed, it passes', async () => {
    const k = await newKey('t2');
    // As a key created before migration 0790 was stored: sealed with the master key, seal = 1.
    await t.db.query('UPDATE api_keys SET secret_enc = $2, seal = 1 WHERE id = $1', [
      k.key.id,
      keys.sealSecret(Buffer.from(k.secret), `apikey:${k.key.id}`),
    ]);
    const during = await edge.check(signed(k, 'GET', '/t/transactions'));
    assert.equal(during.denied_response?.status.code, 503, during.denied_response?.body);
    assert.equal(body(during).code, 'authz_unavailable');
    // Nothing of the key in the answer: not its id, not its secret.
    const answer = JSON.stringify(during.denied_response);
    assert.ok(!answer.includes(k.key.id) && !answer.includes(k.secret), answer);
    assert.equal(await store.resealLegacySecrets(), 1);
    const afterwards = await edge.check(signed(k, 'GET', '/t/transactions'));
    assert.equal(afterwards.status.code, 0, afterwards.denied_response?.body);
  });

  it('refuses unknown and revoked keys (invalid_key), expired keys and sources outside the allowlist', async () => {
    const unknown = await edge.check(
      signed({ key: { id: 'pk_live_UNKNOWNUNKNOWNUNKNOWN00' }, secret: 'x' }, 'GET', '/t/transactions'),
    );
    assert.equal(body(unknown).code, 'invalid_key');
    assert.equal(unknown.denied_response?.status.code, 403);
    const k = await newKey('t1');
    assert.equal((await edge.check(signed(k, 'GET', '/t/transactions'))).status.code, 0);
    await store.revoke('t1', 'admin-1', k.key.id);
    let code = '';
    for (let i = 0; i < 50 && code !== 'invalid_key'; i++) {
      code = body(await edge.check(signed(k, 'GET', '/t/transactions'))).code ?? '';
      if (code !== 'invalid_key') await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(code, 'invalid_key');
    const expiring = await newKey('t1', { expiresAt: new Date(Date.now() + 60_000).toISOString() });
    assert.equal(
      (await edge.check(signed(expiring, 'GET', '/t/transactions'))).status.code,
      0,
      'valid until it expires',
    );
    clock.skewMs = 61_000;
    try {
      assert.equal(body(await edge.check(signed(expiring, 'GET', '/t/transactions'))).code, 'key_expired');
    } finally {
      clock.skewMs = 0;
    }
    const fenced = await newKey('t1', { ipAllowlist: ['203.0.113.0/24'] });
    assert.equal(body(await edge.check(signed(fenced, 'GET', '/t/transactions'))).code, 'ip_not_allowed');
    // Only a caller who can sign learns of the allowlist: a wrong signature from outside it is just that.
    const forged = await edge.check(
      signed({ ...fenced, secret: 'sk_live_guessed' }, 'GET', '/t/transactions'),
    );
    assert.equal(body(forged).code, 'bad_signature', forged.denied_response?.body);
    assert.equal(forged.denied_response?.status.code, 401);
    assert.deepEqual(await auditedKeys(['t1'], 'ip_not_allowed'), [fenced.key.id], 'audited naming the key');
    const inside = await edge.check(
      envoyRequest('GET', '/t/transactions', {
        headers: signRequest({
          method: 'GET',
          path: '/t/transactions',
          keyId: fenced.key.id,
          secret: fenced.secret,
        }),
        ip: '203.0.113.5',
      }),
    );
    assert.equal(inside.status.code, 0);
  });

  it('checks x-api-key-secret when sent (bad_secret), and honours rotation grace', async () => {
    const k = await newKey('t1');
    assert.equal(
      body(await edge.check(signed(k, 'GET', '/t/transactions', '', { 'x-api-key-secret': 'sk_live_wrong' })))
        .code,
      'bad_secret',
    );
    const withSecret = await edge.check(
      signed(k, 'GET', '/t/transactions', '', { 'x-api-key-secret': k.secret }),
    );
    assert.equal(withSecret.status.code, 0);
    assert.ok(
      withSecret.ok_response?.headers_to_remove.includes('x-api-key-secret'),
      'the secret does not travel on to core',
    );
    const rotated = await store.rotate('t1', 'admin-1', k.key.id, 600);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(
      (await edge.check(signed(k, 'GET', '/t/transactions'))).status.code,
      0,
      'old secret inside the grace period',
    );
    assert.equal((await edge.check(signed(rotated, 'GET', '/t/transactions'))).status.code, 0, 'new secret');
    const noGrace = await store.rotate('t1', 'admin-1', k.key.id, 0);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(body(await edge.check(signed(rotated, 'GET', '/t/transactions'))).code, 'bad_signature');
    assert.equal((await edge.check(signed(noGrace, 'GET', '/t/transactions'))).status.code, 0);
  });

  it('never lets a key act on another tenant (audited with the failed check), and scopes gate purposes', async () => {
    const k2 = await newKey('t2');
    const cross = await edge.check(signed(k2, 'GET', '/t/transactions?tenantId=t1'));
    assert.match(body(cross).message, /resource_tenant/);
    // Its audit names the check that failed, traced (after the answer) on the input it decided.
    const id = cross.dynamic_metadata?.fields?.decision_id?.stringValue;
    let failed: unknown;
    for (let i = 0; i < 100 && failed === undefined; i++) {
      for (const a of audits) await a.flush();
      const { rows } = await t.db.query<{ failed: unknown }>(
        `SELECT attrs->'failed_checks' AS failed FROM audit_log WHERE decision->>'decision_id' = $1`,
        [id],
      );
      failed = rows[0]?.failed ?? undefined;
      if (failed === undefined) await new Promise((r) => setTimeout(r, 20));
    }
    assert.deepEqual(failed, [
      { ok: false, check: 'resource_tenant', detail: 'resource tenant t1, request tenant t2' },
    ]);
    const readOnly = await newKey('t1', { scopes: ['payments:read'] });
    assert.match(
      body(await edge.check(signed(readOnly, 'POST', '/t/transfers', transfer()))).message,
      /scope/,
    );
  });

  it('enforces the per-minute budget exactly under concurrency, with Retry-After', async () => {
    const k = await newKey('t1', { budget: { per_minute: 5 } });
    // The budget counts per UTC minute: a burst that straddles a minute's end meets two budgets
    // (10 allowed, seen once in a full run). Start it clear of the boundary.
    const intoMinute = Date.now() % 60_000;
    if (intoMinute > 55_000) await new Promise((r) => setTimeout(r, 60_000 - intoMinute + 50));
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        (i % 2 ? edge : edge2).check(signed(k, 'GET', '/t/transactions'), 15_000),
      ),
    );
    assert.equal(
      results.filter((r) => r.status.code === 0).length,
      5,
      JSON.stringify(results.map((r) => r.denied_response?.body)),
    );
    const refused = results.find((r) => r.denied_response);
    for (const r of results.filter((x) => x.denied_response)) assert.equal(body(r).code, 'BUDGET_EXCEEDED');
    assert.equal(refused?.denied_response?.status.code, 429);
    assert.equal(body(refused as CheckResponse).code, 'BUDGET_EXCEEDED');
    assert.ok(Number(headerOf(refused as CheckResponse, 'retry-after')) >= 1);
  });

  it('enforces the daily amount budget in its currency', async () => {
    const k = await newKey('t1', { budget: { daily_amount: '250.00', currency: 'KES' } });
    assert.equal((await edge.check(signed(k, 'POST', '/t/transfers', transfer('200.00')))).status.code, 0);
    const over = await edge.check(signed(k, 'POST', '/t/transfers', transfer('60.00')));
    assert.equal(body(over).code, 'BUDGET_EXCEEDED');
    assert.equal((await edge.check(signed(k, 'POST', '/t/transfers', transfer('50.00')))).status.code, 0);
    const usd = await edge.check(signed(k, 'POST', '/t/transfers', transfer('1.00', 'USD')));
    assert.equal(usd.denied_response?.status.code, 403);
    const { rows } = await t.db.query<{ amount_micros: string }>(
      `SELECT amount_micros FROM api_key_usage WHERE key_id = $1 AND window_kind = 'day'`,
      [k.key.id],
    );
    assert.equal(rows[0]?.amount_micros, '250000000');
  });

  it('rolls back the amount consumed when the decision deadline passed before the budget committed', async () => {
    const state = new EdgeState(t.db, new TokenVerifier(t.db), keys.apiKeySecrets, log);
    await state.start();
    const policies = new PolicyStore(await loadTrustedKeys());
    await policies.load(defaultBundleDir);
    const audit = new AuditWriter(t.db, log);
    const decide = createDecider({
      state,
      challenges: keys.challenges,
      policies,
      audit,
      risk: new RiskEngine(),
      log,
      edgeSecret: 's',
    });
    const resolve = buildRouteTable([...routeDeclarations, ...extraRoutes]);
    try {
      const k = await newKey('t1', { budget: { daily_amount: '250.00', currency: 'KES' } });
      const late = viewOf(signed(k, 'POST', '/t/transfers', transfer('200.00')));
      await assert.rejects(
        Promise.resolve(decide(late, resolve(late.method, late.path), { expired: true })),
        /decision budget passed/,
      );
      const onTime = viewOf(signed(k, 'POST', '/t/transfers', transfer('100.00')));
      assert.equal(
        (await decide(onTime, resolve(onTime.method, onTime.path), { expired: false })).allow,
        true,
      );
      const { rows } = await t.db.query<{ amount_micros: string }>(
        `SELECT amount_micros FROM api_key_usage WHERE key_id = $1 AND window_kind = 'day'`,
        [k.key.id],
      );
      assert.equal(rows[0]?.amount_micros, '100000000', 'only the answered request counts');
    } finally {
      await audit.stop();
      await state.stop();
    }
  });

  it("applies the tenant's mutual-TLS rule after the signature: a valid certificate, from a CA it lists", async () => {
    const pki = await makePki();
    const foreignPki = await makePki();
    try {
      const trusted = await pki.client('/O=T3/CN=payouts');
      // The same subject under a CA the front door may trust for some other tenant.
      const foreign = await foreignPki.client('/O=T3/CN=payouts');
      const security = (cas: string[]) =>
        JSON.stringify({ require_mtls_for_m2m: true, mtls_trusted_cas: cas });
      await t.db.query(
        `INSERT INTO tenants (id, name, country, base_currency, security) VALUES ('t3', 't3', 'KE', 'KES', $1), ('t4', 't4', 'KE', 'KES', $2)`,
        [security([pki.ca.cert]), security([])],
      );
      const k = await newKey('t3');
      const anyCa = await newKey('t4');
      const own = await newKey('t1');
      /** A signed request of `key` on a connection that presented `cert` (Envoy's URL-encoded PEM). */
      const over = (key: typeof k, cert: string | undefined, extra: Record<string, string> = {}) => {
        const req = signed(key, 'GET', '/t/transactions', '', extra);
        if (cert) (req.attributes?.source as Record<string, unknown>).certificate = encodeURIComponent(cert);
        return req;
      };
      const codeOf = async (req: ReturnType<typeof over>) => {
        const r = await edge.check(req);
        return r.status.code === 0 ? 'allowed' : `${r.denied_response?.status.code} ${body(r).code}`;
      };
      assert.equal(await codeOf(over(k, undefined)), '403 mtls_required', 'no certificate');
      assert.equal(await codeOf(over(k, foreign.cert)), '403 mtls_required', "another tenant's CA");
      assert.equal(await codeOf(over(k, trusted.cert)), 'allowed', 'its own CA');
      // A tenant listing no CA takes any certificate the front door verified, and needs one.
      assert.equal(await codeOf(over(anyCa, foreign.cert)), 'allowed', 'no CA listed');
      assert.equal(await codeOf(over(anyCa, undefined)), '403 mtls_required', 'no CA listed, no certificate');
      // Nobody who cannot sign learns of the setting: a wrong signature or secret is answered as such.
      const forged = { ...k, secret: 'sk_live_guessed' };
      assert.equal(await codeOf(over(forged, undefined)), '401 bad_signature');
      assert.equal(
        await codeOf(over(k, undefined, { 'x-api-key-secret': 'sk_live_guessed' })),
        '403 bad_secret',
      );
      // A tenant without the setting is untouched.
      assert.equal(await codeOf(over(own, undefined)), 'allowed', 'other tenant');
      // The refusals name the key in its tenant's audit chain; the forged request names nobody.
      assert.deepEqual(
        await auditedKeys(['t3', 't4'], 'mtls_required'),
        [k.key.id, k.key.id, anyCa.key.id].sort(),
      );
    } finally {
      await pki.dispose();
      await foreignPki.dispose();
    }
  });

  it('a signed request refused for its source or its missing certificate is used up: replayed from where it would pass, it is refused', async () => {
    const forge = makeForge();
    try {
      const ca = forge.ca({ subject: '/O=T12/CN=T12 CA', days: 2 });
      const cert = forge.client(ca, { subject: '/O=T12/CN=payouts', days: 2 });
      await t.db.query(
        `INSERT INTO tenants (id, name, country, base_currency, security) VALUES ('t12', 't12', 'KE', 'KES', '{"require_mtls_for_m2m": true}')`,
      );
      /** The very request `req` carried (its signature, date and nonce), sent again from `ip`, over `certificate`. */
      const again = (req: ReturnType<typeof signed>, ip: string, certificate?: string) => {
        const copy = envoyRequest('POST', '/t/transfers', {
          headers: { ...req.attributes?.request?.http?.headers },
          body: transfer(),
          ip,
        });
        if (certificate)
          (copy.attributes?.source as Record<string, unknown>).certificate = encodeURIComponent(certificate);
        return copy;
      };
      const outcome = async (req: ReturnType<typeof signed>) => {
        const r = await edge.check(req);
        return r.status.code === 0 ? 'allowed' : `${r.denied_response?.status.code} ${body(r).code}`;
      };
      // The key's holder (or whoever saw the request) was told 403 ip_not_allowed; a transfer
      // that was refused must not go through when the same bytes come again from inside the allowlist.
      const fenced = await newKey('t1', { ipAllowlist: ['203.0.113.0/24'] });
      const outside = signed(fenced, 'POST', '/t/transfers', transfer());
      assert.equal(await outcome(outside), '403 ip_not_allowed');
      assert.equal(
        await outcome(again(outside, '203.0.113.5')),
        '401 nonce_reused',
        'replayed inside the allowlist',
      );
      // The same for a request refused for want of a client certificate, replayed over one.
      const k = await newKey('t12');
      const bare = signed(k, 'POST', '/t/transfers', transfer());
      assert.equal(await outcome(bare), '403 mtls_required');
      assert.equal(
        await outcome(again(bare, '198.51.100.10', cert.cert)),
        '401 nonce_reused',
        'replayed over a certificate',
      );
      // A forged signature still burns nothing: the holder's own request with that nonce passes.
      const nonce = 'n-forged-then-genuine-0001';
      const forged = signed(
        { ...k, secret: 'sk_live_guessed' },
        'POST',
        '/t/transfers',
        transfer(),
        {},
        { nonce },
      );
      assert.equal(await outcome(forged), '401 bad_signature');
      const genuine = signed(k, 'POST', '/t/transfers', transfer(), {}, { nonce });
      assert.equal(await outcome(again(genuine, '198.51.100.10', cert.cert)), 'allowed');
    } finally {
      forge.dispose();
    }
  });

  it("the mutual-TLS rule refuses certificates out of date, CAs out of date, forged issuers and unreadable CA lists; the setting's changes apply at once", async () => {
    const forge = makeForge();
    const day = 24 * 3600_000;
    try {
      const ca = forge.ca({ subject: '/O=T5/CN=T5 CA', days: 1 });
      const longCa = forge.ca({ subject: '/O=T5/CN=T5 long CA', days: 10 });
      // Another tenant's CA (the front door trusts it) named and keyed like T5's, with its own key.
      const clone = forge.ca({ subject: '/O=T5/CN=T5 CA', days: 1, cloneOf: ca.cert });
      const leaf = forge.client(ca, { subject: '/O=T5/CN=payouts', days: 1 });
      const outlivesCa = forge.client(ca, { subject: '/O=T5/CN=payouts', days: 3 });
      const longLeaf = forge.client(longCa, { subject: '/O=T5/CN=payouts', days: 3 });
      const forged = forge.client(clone, { subject: '/O=T5/CN=payouts', days: 1 });
      // Only the signature tells the forged certificate from one T5's CA issued.
      assert.ok(
        new X509Certificate(forged.cert).checkIssued(new X509Certificate(ca.cert)),
        'issuer and key id match',
      );

      const tenants: [string, unknown][] = [
        ['t5', { require_mtls_for_m2m: true, mtls_trusted_cas: [ca.cert, longCa.cert] }],
        ['t6', { require_mtls_for_m2m: true, mtls_trusted_cas: ['not a certificate', ca.cert] }],
        ['t7', { require_mtls_for_m2m: true, mtls_trusted_cas: ca.cert }],
        [
          't8',
          {
            require_mtls_for_m2m: true,
            mtls_trusted_cas: [...Array.from({ length: 20 }, () => longCa.cert), ca.cert],
          },
        ],
        [
          't9',
          {
            require_mtls_for_m2m: true,
            mtls_trusted_cas: [...Array.from({ length: 19 }, () => longCa.cert), ca.cert],
          },
        ],
        ['t10', { require_mtls_for_m2m: true, mtls_trusted_cas: [{ pem: ca.cert }] }],
        ['t11', { require_mtls_for_m2m: true }],
      ];
      for (const [id, security] of tenants)
        await t.db.query(
          `INSERT INTO tenants (id, name, country, base_currency, security) VALUES ($1, $1, 'KE', 'KES', $2)`,
          [id, JSON.stringify(security)],
        );
      const key: Record<string, Awaited<ReturnType<typeof newKey>>> = {};
      for (const [id] of tenants) key[id] = await newKey(id);
      /** The edge's answer to `id`'s key over `cert` (and `headers`), its clock `skewMs` ahead. */
      const outcome = async (
        id: string,
        cert: string | undefined,
        o: { skewMs?: number; headers?: Record<string, string> } = {},
      ) => {
        const date = new Date(Date.now() + (o.skewMs ?? 0)).toUTCString();
        const req = signed(
          key[id] as Awaited<ReturnType<typeof newKey>>,
          'GET',
          '/t/transactions',
          '',
          o.headers,
          { date },
        );
        if (cert) (req.attributes?.source as Record<string, unknown>).certificate = encodeURIComponent(cert);
        clock.skewMs = o.skewMs ?? 0;
        try {
          const r = await edge.check(req);
          return r.status.code === 0
            ? 'allowed'
            : `${r.denied_response?.status.code} ${body(r).code} ${body(r).message}`;
        } finally {
          clock.skewMs = 0;
        }
      };
      const refused = (got: string, why: RegExp, what: string) => {
        assert.match(got, /^403 mtls_required /, what);
        assert.match(got, why, what);
      };
      const untrusted = /not issued by a CA it trusts/;
      const outOfDate = /expired or not yet valid/;

      assert.equal(await outcome('t5', leaf.cert), 'allowed', 'its CA, in date');
      refused(await outcome('t5', forged.cert), untrusted, "the clone's certificate");
      // Two days on: the leaf has expired; the longer one has not, but its CA has.
      refused(await outcome('t5', leaf.cert, { skewMs: 2 * day }), outOfDate, 'expired certificate');
      refused(await outcome('t5', outlivesCa.cert, { skewMs: 2 * day }), untrusted, 'its CA expired');
      assert.equal(await outcome('t5', longLeaf.cert, { skewMs: 2 * day }), 'allowed', 'both in date');
      // An hour back: not yet valid.
      refused(await outcome('t5', leaf.cert, { skewMs: -3600_000 }), outOfDate, 'not yet valid');
      // A Client certificate header is the edge's word to core, never the client's.
      refused(
        await outcome('t5', undefined, {
          headers: { 'x-client-certificate': encodeURIComponent(leaf.cert) },
        }),
        /connect with a client certificate/,
        'a client-sent x-client-certificate',
      );

      // CA lists: an unreadable entry trusts nothing but spoils no other; what is not a list of
      // at most 20 PEM strings trusts no CA at all.
      assert.equal(await outcome('t6', leaf.cert), 'allowed', 'an unreadable entry beside its CA');
      refused(await outcome('t7', leaf.cert), untrusted, 'a string, not a list');
      refused(await outcome('t8', leaf.cert), untrusted, '21 entries');
      assert.equal(await outcome('t9', leaf.cert), 'allowed', '20 entries');
      refused(await outcome('t10', leaf.cert), untrusted, 'a list of objects');
      assert.equal(
        await outcome('t11', forged.cert),
        'allowed',
        'no list: any certificate the front door verified',
      );

      // Turned off and on again (NOTIFY tenants_changed): each change from the next request.
      refused(await outcome('t11', undefined), /connect with a client certificate/, 'on');
      const setTo = async (security: unknown, want: (got: string) => boolean) => {
        await t.db.query('UPDATE tenants SET security = $2 WHERE id = $1', ['t11', JSON.stringify(security)]);
        const until = Date.now() + 5000;
        let got = await outcome('t11', undefined);
        while (!want(got) && Date.now() < until) {
          await new Promise((res) => setTimeout(res, 50));
          got = await outcome('t11', undefined);
        }
        return got;
      };
      assert.equal(await setTo({ require_mtls_for_m2m: false }, (g) => g === 'allowed'), 'allowed', 'off');
      refused(
        await setTo({ require_mtls_for_m2m: true }, (g) => g !== 'allowed'),
        /connect with a client certificate/,
        'on again',
      );
    } finally {
      clock.skewMs = 0;
      forge.dispose();
    }
  });
});

describe('amount counted against an API key budget', () => {
  it('sums the debit legs in the posting currency, and cannot read a leg in another currency', () => {
    const legs = (entries: unknown[]) =>
      requestAmount(Buffer.from(JSON.stringify({ currency: 'KES', entries })));
    assert.deepEqual(
      legs([
        { side: 'debit', amount: '10.00' },
        { side: 'debit', amount: '2.50', currency: 'KES' },
        { side: 'credit', amount: '12.50' },
      ]),
      { micros: 12_500_000n, currency: 'KES' },
    );
    assert.equal(
      legs([
        { side: 'debit', amount: '5000.00', currency: 'USD' },
        { side: 'credit', amount: '5000.00', currency: 'USD' },
      ]),
      'unreadable',
    );
    assert.equal(
      legs([
        { side: 'debit', amount: '10.00' },
        { side: 'credit', amount: '10.00', currency: 'USD' },
      ]),
      'unreadable',
    );
  });
});
