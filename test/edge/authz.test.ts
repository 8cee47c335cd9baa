import assert from 'node:assert/strict';
import { TokenVerifier } from '../../shared/token-keys.ts';
import { createHash, generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { SignJWT, calculateJwkThumbprint, type JWK } from 'jose';
import { verifyChain } from '../../shared/audit.ts';
import { origOf, verifyChallenge } from '../../shared/challenge.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { createLogger } from '../../shared/log.ts';
import { AuditWriter, inlineSink } from '../../edge/audit-writer.ts';
import { RiskEngine } from '../../edge/auth/risk.ts';
import { createDecider, failClosedAuditor } from '../../edge/authz.ts';
import { viewOf } from '../../edge/check.ts';
import { defaultBundleDir, loadTrustedKeys, type PolicyRevision } from '../../policy/runtime/bundle.ts';
import { PolicyStore } from '../../policy/runtime/store.ts';
import { buildRouteTable, type EdgeRoute } from '../../edge/routes.ts';
import { routeDeclarations } from '../../shared/routes/index.ts';
import { EdgeState } from '../../edge/state/store.ts';
import type { CheckResponse } from '../../edge/types.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { envoyRequest, headerOf, startTestEdge, type TestEdge } from '../helpers/edge.ts';
import { respellings } from '../helpers/respell.ts';

const log = createLogger('silent');
const edgeSecret = 'test-edge-secret';

/** Routes later features add; declared here so every purpose can be exercised now. */
const extraRoutes: EdgeRoute[] = [
  {
    method: 'GET',
    template: '/t/transactions',
    purpose: 'customer.account.view',
    resource: 'transaction',
    action: 'transaction.read',
    credential: 'customer',
  },
  {
    method: 'POST',
    template: '/t/transfers',
    purpose: 'customer.transact',
    resource: 'transaction',
    action: 'transfer.create',
    credential: 'customer',
  },
  {
    method: 'GET',
    template: '/t/core/accounts/{id}',
    purpose: 'core.banking',
    resource: 'account',
    action: 'account.read',
    credential: 'core-client',
  },
  {
    method: 'POST',
    template: '/t/core/postings',
    purpose: 'core.banking',
    resource: 'posting',
    action: 'posting.create',
    credential: 'core-client',
  },
  {
    method: 'POST',
    template: '/t/simulate',
    purpose: 'operational',
    resource: 'authz',
    action: 'authz.simulate',
    credential: 'staff',
  },
];

const body = (r: CheckResponse) => JSON.parse(r.denied_response?.body ?? '{}');

describe('edge authorization with the policy bundle', () => {
  let t: TestDb;
  let keys: KeyStore;
  let state: EdgeState;
  let audit: AuditWriter;
  let edge: TestEdge;
  let policies: PolicyStore;
  const master = randomBytes(32);

  const customer = async (
    tenant: string,
    opts: { device?: string; ip?: string; tuples?: Record<string, unknown>[] } = {},
  ) => {
    const id = randomUUID();
    const sid = randomUUID();
    await t.db.query(
      `INSERT INTO customers (id, tenant_id, phone_e164, created_at) VALUES ($1, $2, $3, now())`,
      [
        id,
        tenant,
        `+2547${Math.floor(Math.random() * 1e8)
          .toString()
          .padStart(8, '0')}`,
      ],
    );
    await t.db.query(
      `INSERT INTO sessions (id, tenant_id, subject_type, subject_id, jti, aal, device, ip, created_at, last_seen) VALUES ($1, $2, 'customer', $3, 'j', 1, $4, $5, now(), now())`,
      [sid, tenant, id, opts.device ?? null, opts.ip ?? '203.0.113.9'],
    );
    for (const caveat of opts.tuples ?? [{}]) {
      await t.db.query(
        `INSERT INTO relationship_tuples (tenant_id, subject_ns, subject_id, relation, object_ns, object_id, caveat) VALUES ($1, 'customer', $2, 'member', 'tenant', $1, $3)`,
        [tenant, id, JSON.stringify(caveat)],
      );
    }
    return { id, sid };
  };
  const token = (
    tenant: string,
    c: { id: string; sid: string },
    aal = 1,
    extra: Record<string, unknown> = {},
    ks = keys,
  ) =>
    ks.sign(
      tenant,
      {
        sub: c.id,
        sid: c.sid,
        aal,
        amr: aal > 1 ? ['pin', 'otp'] : ['pin'],
        jti: randomUUID(),
        aud: 'payments-api',
        ...extra,
      },
      { expiresInS: 600, typ: 'at+jwt' },
    );
  const bearer = (tok: string) => ({ authorization: `Bearer ${tok}` });

  type Recorded = {
    decision: Record<string, unknown>;
    attrs: Record<string, unknown>;
    input: Record<string, unknown> | null;
  };
  /** The audit rows of these Checks with their recorded inputs, once written (a denial's after its answer). */
  const recorded = async (checks: CheckResponse[]) => {
    const ids = checks.map((r) => r.dynamic_metadata?.fields?.decision_id?.stringValue);
    let rows: Recorded[] = [];
    for (let i = 0; i < 100 && !(rows.length === ids.length && rows.every((r) => r.input)); i++) {
      await audit.flush();
      rows = (
        await t.db.query<Recorded>(
          `SELECT a.decision, a.attrs, i.input FROM audit_log a LEFT JOIN decision_inputs i ON i.audit_id = a.id
           WHERE a.action = 'authz.decision' AND a.decision->>'decision_id' = ANY($1) ORDER BY a.id`,
          [ids],
        )
      ).rows;
      if (rows.length < ids.length || !rows.every((r) => r.input))
        await new Promise((r) => setTimeout(r, 20));
    }
    return rows;
  };

  before(async () => {
    t = await freshDatabase();
    for (const id of ['t1', 't2'])
      await t.db.query(
        `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`,
        [id],
      );
    keys = new KeyStore(t.db, master);
    state = new EdgeState(t.db, new TokenVerifier(t.db), keys.apiKeySecrets, log);
    await state.start();
    policies = new PolicyStore(await loadTrustedKeys());
    await policies.load(defaultBundleDir);
    // Every decision's input is recorded (issue 22 item 1): what replay keeps is asserted below.
    const sink = inlineSink(t.db, { key: randomBytes(32), retentionHours: 24, maxBytes: 1 << 30 });
    audit = new AuditWriter(t.db, log, undefined, undefined, sink);
    audit.recordInputs({ sample: 1, retentionDays: () => undefined });
    const decide = createDecider({
      state,
      challenges: keys.challenges,
      policies,
      audit,
      risk: new RiskEngine(),
      log,
      edgeSecret,
    });
    // Outcomes, not timing: a generous budget (the 100 ms budget has its own tests in check.test.ts).
    edge = await startTestEdge({
      log,
      decide,
      resolve: buildRouteTable([...routeDeclarations, ...extraRoutes]),
      budgetMs: 2000,
    });
  });
  after(async () => {
    await edge.close();
    await audit.stop();
    await state.stop();
    await t.drop();
  });

  it('allows a customer read and sets the identity headers, overwriting spoofed ones', async () => {
    const c = await customer('t1');
    const res = await edge.check(
      envoyRequest('GET', '/t/transactions?limit=5', {
        headers: {
          ...bearer(await token('t1', c)),
          'x-tenant-id': 't2',
          'x-purpose': 'fraud.review',
          'x-aal': '3',
          'x-edge-auth': 'forged',
        },
      }),
    );
    assert.equal(res.status.code, 0, res.denied_response?.body);
    assert.equal(headerOf(res, 'x-tenant-id'), 't1');
    assert.equal(headerOf(res, 'x-principal-id'), c.id);
    assert.equal(headerOf(res, 'x-session-id'), c.sid);
    assert.equal(headerOf(res, 'x-aal'), '1');
    assert.equal(headerOf(res, 'x-purpose'), 'customer.account.view');
    assert.equal(headerOf(res, 'x-edge-auth'), edgeSecret);
    const masking = JSON.parse(headerOf(res, 'x-masking') ?? '{}');
    assert.equal(masking.transaction.phone, 'keep_first4_last2');
  });

  it('401 with WWW-Authenticate without a token, with an expired, future-dated or foreign-key token', async () => {
    const c = await customer('t1');
    const none = await edge.check(envoyRequest('GET', '/t/transactions'));
    assert.equal(none.denied_response?.status.code, 401);
    assert.match(headerOf(none, 'www-authenticate') ?? '', /^Bearer realm="payments"/);
    const past = new KeyStore(t.db, master, { now: () => Date.now() - 3_600_000 });
    const expired = await edge.check(
      envoyRequest('GET', '/t/transactions', { headers: bearer(await token('t1', c, 1, {}, past)) }),
    );
    assert.equal(expired.denied_response?.status.code, 401);
    assert.match(headerOf(expired, 'www-authenticate') ?? '', /invalid_token/);
    const future = new KeyStore(t.db, master, { now: () => Date.now() + 3_600_000 });
    const ahead = await edge.check(
      envoyRequest('GET', '/t/transactions', { headers: bearer(await token('t1', c, 1, {}, future)) }),
    );
    assert.equal(ahead.denied_response?.status.code, 401);
    const { privateKey } = generateKeyPairSync('ed25519');
    const forged = await new SignJWT({ sub: c.id, sid: c.sid, aal: 2, tid: 't1', aud: 'payments-api' })
      .setProtectedHeader({
        alg: 'EdDSA',
        kid: (await keys.verificationKeys('t1'))[0]?.kid ?? 'x',
        typ: 'at+jwt',
      })
      .setIssuedAt()
      .setExpirationTime('5m')
      .setIssuer('urn:payments:tenant:t1')
      .sign(privateKey);
    assert.equal(
      (await edge.check(envoyRequest('GET', '/t/transactions', { headers: bearer(forged) }))).denied_response
        ?.status.code,
      401,
    );
  });

  it('refuses a token signed by a retired key', async () => {
    const c = await customer('t2');
    const old = await token('t2', c);
    await keys.rotate('t2', 0);
    const res = await edge.check(envoyRequest('GET', '/t/transactions', { headers: bearer(old) }));
    assert.equal(res.denied_response?.status.code, 401);
  });

  it("denies a cross-tenant resource and another tenant's session", async () => {
    const c = await customer('t1');
    const tok = await token('t1', c);
    const cross = await edge.check(
      envoyRequest('GET', '/t/transactions?tenantId=t2', { headers: bearer(tok) }),
    );
    assert.equal(cross.denied_response?.status.code, 403);
    assert.match(body(cross).message, /resource_tenant/);
    const other = await customer('t2');
    const wrong = await edge.check(
      envoyRequest('GET', '/t/transactions', { headers: bearer(await token('t1', other)) }),
    );
    assert.equal(wrong.denied_response?.status.code, 401, 'a t2 session does not exist in t1');
  });

  it('refuses a revoked session on the next request after the notification', async () => {
    const c = await customer('t1');
    const tok = await token('t1', c);
    assert.equal(
      (await edge.check(envoyRequest('GET', '/t/transactions', { headers: bearer(tok) }))).status.code,
      0,
    );
    await t.db.tx(async (q) => {
      await q.query('UPDATE sessions SET revoked_at = now() WHERE id = $1', [c.sid]);
      await q.query(`SELECT pg_notify('sessions_changed', $1)`, [
        JSON.stringify({ tenantId: 't1', sessionId: c.sid }),
      ]);
    });
    let status = 0;
    for (let i = 0; i < 50 && status !== 401; i++) {
      await new Promise((r) => setTimeout(r, 20));
      status =
        (await edge.check(envoyRequest('GET', '/t/transactions', { headers: bearer(tok) }))).denied_response
          ?.status.code ?? 0;
    }
    assert.equal(status, 401);
  });

  it('a request-bound step-up binds the query too and is refused once used, except for a retry with the key that used it', async () => {
    const c = await customer('t1');
    const payload = '{"amount":"10.00","currency":"KES"}';
    const jti = randomUUID();
    const tok = await token('t1', c, 2, { orig: origOf('POST', '/t/transfers', payload), jti });
    const post = (path: string, key: string) =>
      edge.check(
        envoyRequest('POST', path, {
          headers: { ...bearer(tok), 'content-type': 'application/json', 'idempotency-key': key },
          body: payload,
        }),
      );
    assert.equal((await post('/t/transfers', 'k-first-0001')).status.code, 0, 'bound and unused');
    assert.equal(
      body(await post('/t/transfers?x=1', 'k-first-0001')).code,
      'MFA_REQUIRED',
      'another request target',
    );
    await t.db.query(
      `INSERT INTO stepup_uses (tenant_id, grant_jti, session_id, customer_id, orig, action, idempotency_key, used_at, expires_at)
       VALUES ('t1', $1, $2, $3, 'o', 'transfer.create', 'k-first-0001', now(), now() + interval '10 minutes')`,
      [jti, c.sid, c.id],
    );
    // The use reaches the edge by notification (stepup_used); core refuses the replay meanwhile.
    let again = await post('/t/transfers', 'k-second-0002');
    for (let i = 0; i < 50 && again.status.code === 0; i++) {
      await new Promise((r) => setTimeout(r, 20));
      again = await post('/t/transfers', 'k-second-0002');
    }
    assert.equal(body(again).code, 'MFA_REQUIRED');
    assert.equal(
      (await verifyChallenge(keys.challenges, body(again).challenge, { tenantId: 't1', sub: c.id })).orig,
      origOf('POST', '/t/transfers', payload),
    );
    assert.equal(
      (await post('/t/transfers', 'k-first-0001')).status.code,
      0,
      'the retry core answers from its stored response',
    );
  });

  it('ending another session needs a bound step-up; ending the current one does not', async () => {
    const c = await customer('t1');
    const other = randomUUID();
    const del = async (id: string, tok: string) =>
      edge.check(envoyRequest('DELETE', `/customers/sessions/${id}`, { headers: bearer(tok) }));
    assert.equal((await del(c.sid, await token('t1', c))).status.code, 0);
    assert.equal(body(await del(other, await token('t1', c))).code, 'MFA_REQUIRED');
    assert.equal(
      body(await del(other, await token('t1', c, 2, { orig: 'another-request' }))).code,
      'MFA_REQUIRED',
    );
    assert.equal(
      (
        await del(
          other,
          await token('t1', c, 2, { orig: origOf('DELETE', `/customers/sessions/${other}`, '') }),
        )
      ).status.code,
      0,
    );
  });

  it('refuses a token stepped up with a device, and an intent naming it, once the device is removed (after the notification)', async () => {
    const c = await customer('t1');
    const device = randomUUID();
    await t.db.query(
      `INSERT INTO customer_devices (id, tenant_id, customer_id, public_key, created_at, usable_from, notified_at) VALUES ($1, 't1', $2, $3, now(), now(), now())`,
      [device, c.id, randomBytes(32)],
    );
    const tok = await token('t1', c, 2, { dvc: device });
    const read = () => edge.check(envoyRequest('GET', '/t/transactions', { headers: bearer(tok) }));
    assert.equal((await read()).status.code, 0);
    const naming = async () =>
      edge.check(
        envoyRequest('GET', '/t/transactions', {
          headers: { ...bearer(await token('t1', c)), 'x-intent-device-id': device },
        }),
      );
    assert.equal((await naming()).status.code, 0);
    await t.db.query('UPDATE customer_devices SET revoked_at = now() WHERE id = $1', [device]);
    let refused = await read();
    for (let i = 0; i < 50 && refused.status.code === 0; i++) {
      await new Promise((r) => setTimeout(r, 20));
      refused = await read();
    }
    assert.equal(refused.denied_response?.status.code, 401);
    assert.equal(body(refused).code, 'device_revoked');
    assert.equal((await naming()).denied_response?.status.code, 403);
  });

  it('ignores an expired tuple and honours ip_ranges caveats', async () => {
    const expired = await customer('t1', { tuples: [{ expires_at: '2020-01-01T00:00:00Z' }] });
    const r1 = await edge.check(
      envoyRequest('GET', '/t/transactions', { headers: bearer(await token('t1', expired)) }),
    );
    assert.match(body(r1).message, /tenant_member/);
    const ranged = await customer('t1', { tuples: [{ ip_ranges: ['198.51.100.0/24'] }] });
    const tok = await token('t1', ranged);
    assert.equal(
      (await edge.check(envoyRequest('GET', '/t/transactions', { headers: bearer(tok), ip: '198.51.100.7' })))
        .status.code,
      0,
    );
    const outside = await edge.check(
      envoyRequest('GET', '/t/transactions', { headers: bearer(tok), ip: '203.0.113.9' }),
    );
    assert.equal(outside.denied_response?.status.code, 403);
  });

  it('answers a transfer at AAL 1 with MFA_REQUIRED and a challenge bound to that request', async () => {
    const c = await customer('t1');
    const payload = JSON.stringify({ amount: '10.00', currency: 'KES', beneficiaryId: 'b1' });
    const res = await edge.check(
      envoyRequest('POST', '/t/transfers', {
        headers: { ...bearer(await token('t1', c)), 'content-type': 'application/json' },
        body: payload,
      }),
    );
    assert.equal(res.denied_response?.status.code, 403);
    const b = body(res);
    assert.equal(b.code, 'MFA_REQUIRED');
    assert.deepEqual(b.methods, ['otp', 'device']);
    const claims = await verifyChallenge(keys.challenges, b.challenge, {
      tenantId: 't1',
      sub: c.id,
      orig: origOf('POST', '/t/transfers', payload),
    });
    assert.equal(claims.sub, c.id);
    await assert.rejects(
      verifyChallenge(keys.challenges, b.challenge, {
        tenantId: 't1',
        sub: c.id,
        orig: origOf('POST', '/t/transfers', payload.replace('10.00', '99.00')),
      }),
    );
    // An AAL 2 token stepped up for another request does not carry this one (SPEC 4.3 rule 3)...
    const elsewhere = await edge.check(
      envoyRequest('POST', '/t/transfers', {
        headers: {
          ...bearer(await token('t1', c, 2, { orig: 'another-request' })),
          'content-type': 'application/json',
        },
        body: payload,
      }),
    );
    assert.equal(body(elsewhere).code, 'MFA_REQUIRED');
    // ...the one stepped up for this request does.
    const ok = await edge.check(
      envoyRequest('POST', '/t/transfers', {
        headers: {
          ...bearer(await token('t1', c, 2, { orig: origOf('POST', '/t/transfers', payload) })),
          'content-type': 'application/json',
        },
        body: payload,
      }),
    );
    assert.equal(ok.status.code, 0, ok.denied_response?.body);
  });

  it('decides a non-JSON body on a JSON route on its bytes: it names no tenant, and only a step-up for those bytes carries it', async () => {
    const c = await customer('t1');
    const json = { 'content-type': 'application/json' };
    const raw = 'amount=10.00&tenantId=t2';
    const aal1 = await edge.check(
      envoyRequest('POST', '/t/transfers', {
        headers: { ...bearer(await token('t1', c)), ...json },
        body: raw,
      }),
    );
    assert.equal(body(aal1).code, 'MFA_REQUIRED');
    const stepped = await edge.check(
      envoyRequest('POST', '/t/transfers', {
        headers: {
          ...bearer(await token('t1', c, 2, { orig: origOf('POST', '/t/transfers', raw) })),
          ...json,
        },
        body: raw,
      }),
    );
    assert.equal(stepped.status.code, 0, 'allowed to reach core, which answers 400 for the body');
    // A truncated JSON body names no tenant: the request stays in the token's tenant.
    const truncated = await edge.check(
      envoyRequest('GET', '/t/transactions', {
        headers: { ...bearer(await token('t1', c)), ...json },
        body: '{"tenantId":"t2"',
      }),
    );
    assert.equal(truncated.status.code, 0);
    const named = await edge.check(
      envoyRequest('GET', '/t/transactions', {
        headers: { ...bearer(await token('t1', c)), ...json },
        body: '{"tenantId":"t2"}',
      }),
    );
    assert.equal(body(named).code, 'POLICY_DENIED');
  });

  it('refuses a body over 8192 bytes or a partial one with 413, whatever the credentials', async () => {
    const c = await customer('t1');
    const big = JSON.stringify({ amount: '10.00', note: 'x'.repeat(8192) });
    const over = await edge.check(
      envoyRequest('POST', '/t/transfers', {
        headers: {
          ...bearer(await token('t1', c, 2, { orig: origOf('POST', '/t/transfers', big) })),
          'content-type': 'application/json',
        },
        body: big,
      }),
    );
    assert.equal(over.denied_response?.status.code, 413);
    assert.equal(body(over).code, 'PAYLOAD_TOO_LARGE');
    const payload = JSON.stringify({ amount: '10.00' });
    const partial = await edge.check(
      envoyRequest('POST', '/t/transfers', {
        headers: {
          ...bearer(await token('t1', c, 2, { orig: origOf('POST', '/t/transfers', payload) })),
          'content-type': 'application/json',
          'x-envoy-auth-partial-body': 'true',
        },
        body: payload,
      }),
    );
    assert.equal(body(partial).code, 'PAYLOAD_TOO_LARGE');
    const exact = 'a'.repeat(8192);
    assert.equal(
      body(
        await edge.check(
          envoyRequest('POST', '/t/transfers', { headers: bearer(await token('t1', c)), body: exact }),
        ),
      ).code,
      'MFA_REQUIRED',
      '8192 bytes is within the limit',
    );
  });

  it('decides a body naming a tenant id PostgreSQL cannot even hold (NUL, lone surrogate) as an unknown tenant, and audits it', async () => {
    for (const raw of ['{"tenantId":"a\\u0000"}', '{"tenantId":"\\ud800"}']) {
      const res = await edge.check(
        envoyRequest('POST', '/customers/auth/otp/send', {
          headers: { 'content-type': 'application/json' },
          body: raw,
        }),
      );
      assert.equal(body(res).code, 'POLICY_DENIED', `${raw}: ${res.denied_response?.body}`);
    }
    await audit.flush();
    assert.equal(audit.pending(), 0, 'the audit queue is not stuck');
  });

  it('refuses a path the edge and core would read differently (backslashes, dot segments) with 400', async () => {
    const c = await customer('t1');
    for (const p of [
      '/v1/docs/x\\..\\..\\..\\t\\transactions',
      '/v1/docs/../../t/transactions',
      '/v1/docs/%2e%2e/t/transactions',
    ]) {
      const res = await edge.check(envoyRequest('GET', p, { headers: bearer(await token('t1', c)) }));
      assert.equal(res.denied_response?.status.code, 400, p);
      assert.equal(body(res).code, 'MALFORMED_REQUEST');
    }
  });

  it("refuses a request naming two tenants (query and body), and reads a JSON body whatever the media type's case", async () => {
    const json = { 'content-type': 'application/json' };
    const both = await edge.check(
      envoyRequest('POST', '/customers/auth/otp/send?tenantId=t2', {
        headers: json,
        body: '{"tenantId":"t1","phone":"+254700000009"}',
      }),
    );
    assert.equal(body(both).code, 'POLICY_DENIED', both.denied_response?.body);
    const c = await customer('t1');
    const upper = await edge.check(
      envoyRequest('GET', '/t/transactions', {
        headers: { ...bearer(await token('t1', c)), 'content-type': 'Application/JSON; charset=utf-8' },
        body: '{"tenantId":"t2"}',
      }),
    );
    assert.equal(body(upper).code, 'POLICY_DENIED', 'the body names t2: cross-tenant');
  });

  it('treats a new device as high risk: step-up even for a read', async () => {
    const c = await customer('t1', { device: 'phone-1' });
    const tok = await token('t1', c);
    assert.equal(
      (
        await edge.check(
          envoyRequest('GET', '/t/transactions', { headers: { ...bearer(tok), 'x-device-id': 'phone-1' } }),
        )
      ).status.code,
      0,
    );
    const res = await edge.check(
      envoyRequest('GET', '/t/transactions', { headers: { ...bearer(tok), 'x-device-id': 'phone-2' } }),
    );
    assert.equal(body(res).code, 'MFA_REQUIRED');
    const none = await edge.check(envoyRequest('GET', '/t/transactions', { headers: bearer(tok) }));
    assert.equal(body(none).code, 'MFA_REQUIRED', 'leaving X-Device-Id out is no way around it');
  });

  it('checks core client scopes; core:read cannot write', async () => {
    await t.db.query(
      `INSERT INTO oauth_clients (tenant_id, client_id, secret_hash, scopes) VALUES ('t1', 'client-r', '\\x00', '{core:read}'), ('t1', 'client-w', '\\x00', '{core:write}')`,
    );
    const read = await keys.sign(
      't1',
      { sub: 'client-r', aud: 'core', scope: 'core:read' },
      { expiresInS: 300, typ: 'at+jwt' },
    );
    const write = await keys.sign(
      't1',
      { sub: 'client-w', aud: 'core', scope: 'core:write' },
      { expiresInS: 300, typ: 'at+jwt' },
    );
    assert.equal(
      (await edge.check(envoyRequest('GET', '/t/core/accounts/a1', { headers: bearer(read) }))).status.code,
      0,
    );
    const denied = await edge.check(envoyRequest('POST', '/t/core/postings', { headers: bearer(read) }));
    assert.match(body(denied).message, /scope/);
    const bare = await edge.check(
      envoyRequest('POST', '/t/core/postings', { headers: { authorization: write } }),
    );
    assert.equal(bare.status.code, 0, 'the bare JWT form of SPEC 5.1 is accepted');
    assert.equal(headerOf(bare, 'x-scopes'), 'core:write');
    // Closing is a declared core route whose action the registry grants to core:write (issue 21).
    for (const path of ['/v1/core/accounts/a1/close', '/v1/core/overdraft-lines/o1/close']) {
      assert.equal(
        (await edge.check(envoyRequest('POST', path, { headers: bearer(write) }))).status.code,
        0,
        path,
      );
      assert.match(
        body(await edge.check(envoyRequest('POST', path, { headers: bearer(read) }))).message,
        /scope/,
      );
    }
    const customerToken = await token('t1', await customer('t1'));
    assert.equal(
      (await edge.check(envoyRequest('GET', '/t/core/accounts/a1', { headers: bearer(customerToken) })))
        .denied_response?.status.code,
      401,
    );
  });

  it('refuses the tokens of a revoked OAuth client at once, and of a client that does not exist', async () => {
    await t.db.query(
      `INSERT INTO oauth_clients (tenant_id, client_id, secret_hash, scopes) VALUES ('t1', 'client-gone', '\\x00', '{core:read}')`,
    );
    const live = await keys.sign(
      't1',
      { sub: 'client-gone', aud: 'core', scope: 'core:read' },
      { expiresInS: 300, typ: 'at+jwt' },
    );
    assert.equal(
      (await edge.check(envoyRequest('GET', '/t/core/accounts/a1', { headers: bearer(live) }))).status.code,
      0,
    );
    await t.db.query(`UPDATE oauth_clients SET revoked_at = now() WHERE client_id = 'client-gone'`);
    // The table's trigger announces it (NOTIFY oauth_clients_changed): the cached answer is dropped.
    let status = 0;
    for (let i = 0; i < 50 && status !== 401; i++) {
      await new Promise((r) => setTimeout(r, 20));
      status =
        (await edge.check(envoyRequest('GET', '/t/core/accounts/a1', { headers: bearer(live) })))
          .denied_response?.status.code ?? 0;
    }
    assert.equal(status, 401);
    const unknown = await keys.sign(
      't1',
      { sub: 'client-never', aud: 'core', scope: 'core:read' },
      { expiresInS: 300, typ: 'at+jwt' },
    );
    assert.equal(
      (await edge.check(envoyRequest('GET', '/t/core/accounts/a1', { headers: bearer(unknown) })))
        .denied_response?.status.code,
      401,
    );
  });

  it('lets only ops service tokens simulate, and audits the refusal with the roles check that failed', async () => {
    const mk = async (roles: string[]) => {
      const tok = `svc_${randomBytes(24).toString('base64url')}`;
      await t.db.query(
        `INSERT INTO service_tokens (id, tenant_id, name, roles, token_hash) VALUES ($1, 't1', $2, $3, $4)`,
        [randomUUID(), `tok-${randomUUID()}`, roles, createHash('sha256').update(tok).digest()],
      );
      return tok;
    };
    assert.equal(
      (await edge.check(envoyRequest('POST', '/t/simulate', { headers: bearer(await mk(['ops'])) }))).status
        .code,
      0,
    );
    const ro = await edge.check(
      envoyRequest('POST', '/t/simulate', { headers: bearer(await mk(['readonly'])) }),
    );
    assert.match(body(ro).message, /roles/);
    // The service's denial is audited with the check that failed (traced on the decided input).
    const [row] = await recorded([ro]);
    assert.deepEqual(row?.attrs.failed_checks, [{ ok: false, check: 'roles', detail: ['ops', 'admin'] }]);
    assert.equal(
      (await edge.check(envoyRequest('POST', '/t/simulate', { headers: bearer('svc_unknown') })))
        .denied_response?.status.code,
      401,
    );
  });

  it('refuses a suspended tenant once the change is announced', async () => {
    await t.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('t3', 't3', 'KE', 'KES')`,
    );
    const c = await customer('t3');
    const tok = await token('t3', c);
    assert.equal(
      (await edge.check(envoyRequest('GET', '/t/transactions', { headers: bearer(tok) }))).status.code,
      0,
    );
    await t.db.query(`UPDATE tenants SET status = 'SUSPENDED' WHERE id = 't3'`);
    let msg = '';
    let refused: CheckResponse | undefined;
    for (let i = 0; i < 50 && !/tenant_active/.test(msg); i++) {
      await new Promise((r) => setTimeout(r, 20));
      refused = await edge.check(envoyRequest('GET', '/t/transactions', { headers: bearer(tok) }));
      msg = body(refused).message ?? '';
    }
    assert.match(msg, /tenant_active/);
    // Its audit names the failed check, traced on the input the Check decided.
    const [row] = refused ? await recorded([refused]) : [];
    const failed = row?.attrs.failed_checks as { check: string; ok: boolean }[] | undefined;
    assert.ok(
      failed?.some((c) => c.check === 'tenant_active' && !c.ok),
      JSON.stringify(row?.attrs),
    );
    assert.equal((row?.input?.tenant as { status?: unknown }).status, 'SUSPENDED');
  });

  it('verifies DPoP proofs when the tenant requires them', async () => {
    await t.db.query(
      `INSERT INTO tenants (id, name, country, base_currency, security) VALUES ('t4', 't4', 'KE', 'KES', '{"require_dpop": true}')`,
    );
    const c = await customer('t4');
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    const jwk = publicKey.export({ format: 'jwk' }) as JWK;
    const jkt = await calculateJwkThumbprint(jwk);
    const tok = await token('t4', c, 1, { cnf: { jkt } });
    const proof = (htu: string, jti = randomUUID()) =>
      new SignJWT({ htm: 'GET', htu, jti, ath: createHash('sha256').update(tok).digest('base64url') })
        .setProtectedHeader({ alg: 'EdDSA', typ: 'dpop+jwt', jwk })
        .setIssuedAt()
        .sign(privateKey);
    const htu = 'https://api.example/t/transactions';
    const p1 = await proof(htu);
    const ok = await edge.check(
      envoyRequest('GET', '/t/transactions', { headers: { authorization: `DPoP ${tok}`, dpop: p1 } }),
    );
    assert.equal(ok.status.code, 0, ok.denied_response?.body);
    const replay = await edge.check(
      envoyRequest('GET', '/t/transactions', { headers: { authorization: `DPoP ${tok}`, dpop: p1 } }),
    );
    assert.equal(body(replay).reason, 'invalid_dpop_proof');
    const wrongHtu = await edge.check(
      envoyRequest('GET', '/t/transactions', {
        headers: { authorization: `DPoP ${tok}`, dpop: await proof('https://evil.example/t/transactions') },
      }),
    );
    assert.equal(wrongHtu.denied_response?.status.code, 401);
    // A fresh proof spelled a second way (shared/jws.ts) is no proof.
    for (const [name, other] of respellings(await proof(htu))) {
      const respelled = await edge.check(
        envoyRequest('GET', '/t/transactions', { headers: { authorization: `DPoP ${tok}`, dpop: other } }),
      );
      assert.equal(body(respelled).reason, 'invalid_dpop_proof', name);
    }
    const missing = await edge.check(
      envoyRequest('GET', '/t/transactions', { headers: { authorization: `DPoP ${tok}` } }),
    );
    assert.equal(missing.denied_response?.status.code, 401);
  });

  it('audits a policy denial with the checks that failed and their details (the traced entry point), an allow without; both inputs recorded', async () => {
    const c = await customer('t1');
    const tok = await token('t1', c);
    const denied = await edge.check(
      envoyRequest('GET', '/t/transactions?tenantId=t2', { headers: bearer(tok) }),
    );
    const allowed = await edge.check(envoyRequest('GET', '/t/transactions', { headers: bearer(tok) }));
    // The trace of a denial is made once the answer has gone: wait for both records.
    const rows = await recorded([denied, allowed]);
    const deny = rows.find((r) => r.decision.allow === false);
    const allow = rows.find((r) => r.decision.allow === true);
    assert.deepEqual(deny?.attrs.failed_checks, [
      { check: 'resource_tenant', ok: false, detail: 'resource tenant t2, request tenant t1' },
    ]);
    assert.ok(allow, 'the allow is audited');
    assert.equal(allow.attrs.failed_checks, undefined);
    // Both inputs are recorded for replay as the policy saw them, scrubbed (issue 22 item 1).
    for (const r of rows) {
      assert.match(String((r.input?.subject as { id?: unknown }).id), /^p_/, 'the subject is pseudonymised');
      assert.equal((r.input?.tenant as { id?: unknown }).id, 't1');
      assert.equal((r.input?.resource as { tenant_id?: unknown }).tenant_id, r.decision.allow ? 't1' : 't2');
    }
  });

  it('traces a denial on the ranges the policy decided on, and records the ranges as stored', async () => {
    // A range whose prefix is not all digits the WASM reads as the prefix its previous evaluation
    // left (shared/ip-ranges.ts unreadableRange): after a /0 tenant's Check the stored text would
    // let the caller in. Handed over as no range, it refuses them; the trace must say so.
    const withRanges = (id: string, ranges: string[]) =>
      t.db.query(
        `INSERT INTO tenants (id, name, country, base_currency, security) VALUES ($1, $1, 'KE', 'KES', $2)`,
        [id, JSON.stringify({ allowed_ip_ranges: ranges })],
      );
    await withRanges('t-ranges-open', ['0.0.0.0/0']);
    await withRanges('t-ranges-bad', ['10.0.0.0/8x']);
    const open = await customer('t-ranges-open');
    const bad = await customer('t-ranges-bad');
    const openCheck = await edge.check(
      envoyRequest('GET', '/t/transactions', { headers: bearer(await token('t-ranges-open', open)) }),
    );
    assert.equal(openCheck.status.code, 0, openCheck.denied_response?.body);
    const denied = await edge.check(
      envoyRequest('GET', '/t/transactions', { headers: bearer(await token('t-ranges-bad', bad)) }),
    );
    assert.equal(denied.denied_response?.status.code, 403, denied.denied_response?.body);
    const [row] = await recorded([denied]);
    assert.deepEqual(row?.attrs.failed_checks, [
      { ok: false, check: 'tenant_ip_ranges', detail: '203.0.113.9' },
    ]);
    // Replay hands the recorded input through inputForPolicy again: it keeps the ranges as stored.
    const security = (row?.input?.tenant as { security?: { allowed_ip_ranges?: unknown } }).security;
    assert.deepEqual(security?.allowed_ip_ranges, ['10.0.0.0/8x']);
  });

  it('answers and audits a denial whose trace cannot be made, without failed checks', async () => {
    const rev = policies.current as PolicyRevision;
    const { evaluate, evaluateJson } = rev;
    const unavailable = () => {
      throw new Error('trace unavailable');
    };
    rev.evaluate = unavailable;
    rev.evaluateJson = unavailable;
    try {
      const tok = await token('t1', await customer('t1'));
      const denied = await edge.check(
        envoyRequest('GET', '/t/transactions?tenantId=t2', { headers: bearer(tok) }),
      );
      assert.equal(denied.denied_response?.status.code, 403);
      const [row] = await recorded([denied]);
      assert.equal(row?.decision.allow, false);
      assert.equal(row?.attrs.failed_checks, undefined);
    } finally {
      rev.evaluate = evaluate;
      rev.evaluateJson = evaluateJson;
    }
  });

  it('audits every decision, allow and deny, into the hash chain with policy and registry versions', async () => {
    await edge.check(envoyRequest('GET', '/v1/health'));
    await edge.check(envoyRequest('GET', '/v1/nowhere'));
    await audit.flush();
    const { rows } = await t.db.query<{
      decision: Record<string, unknown>;
      attrs: Record<string, unknown>;
      tenant_id: string;
    }>(`SELECT decision, attrs, tenant_id FROM audit_log WHERE action = 'authz.decision' ORDER BY id`);
    assert.ok(rows.length >= 10);
    assert.ok(rows.some((r) => r.decision.allow === true));
    assert.ok(rows.some((r) => r.decision.allow === false));
    const last = rows.at(-1);
    assert.equal(last?.decision.policy_version, policies.current?.policyVersion);
    assert.equal(last?.attrs.registry_version, policies.current?.registryVersion);
    for (const tenant of new Set(rows.map((r) => r.tenant_id)))
      assert.equal((await verifyChain(t.db, tenant)).ok, true);
  });
});

describe('edge authorization fails closed', () => {
  it('denies everything when the audit writer is behind its bound', async () => {
    const t = await freshDatabase();
    const keys = new KeyStore(t.db, randomBytes(32));
    const state = new EdgeState(t.db, new TokenVerifier(t.db), keys.apiKeySecrets, log);
    await state.start();
    const policies = new PolicyStore(await loadTrustedKeys());
    await policies.load(defaultBundleDir);
    const audit = new AuditWriter(t.db, log, 0);
    const edge = await startTestEdge({
      log,
      decide: createDecider({
        state,
        challenges: keys.challenges,
        policies,
        audit,
        risk: new RiskEngine(),
        log,
        edgeSecret,
      }),
      budgetMs: 2000,
    });
    try {
      const res = await edge.check(envoyRequest('GET', '/v1/health'));
      assert.equal(body(res).code, 'authz_unavailable');
    } finally {
      await edge.close();
      await state.stop();
      await t.drop();
    }
  });

  it('keeps fail-closed denials past its bound, and counts those past the reserve into one record', async () => {
    const t = await freshDatabase();
    const policies = new PolicyStore(await loadTrustedKeys());
    await policies.load(defaultBundleDir);
    const audit = new AuditWriter(t.db, log, 2, 3);
    const report = failClosedAuditor({ audit, policies });
    try {
      const view = viewOf(envoyRequest('GET', '/v1/transactions?tenantId=t9'));
      const resolved = buildRouteTable(routeDeclarations)(view.method, view.path);
      for (let i = 0; i < 2; i++) report(view, resolved, 'decision audit is behind; refusing to decide');
      assert.equal(audit.overloaded(), true);
      for (let i = 0; i < 7; i++) report(view, resolved, 'decision audit is behind; refusing to decide');
      assert.equal(audit.pending(), 5, 'bound 2 plus reserve 3 queued; the other four counted');
      await audit.flush();
      await audit.flush();
      const { rows } = await t.db.query<{
        action: string;
        decision: Record<string, unknown>;
        attrs: Record<string, unknown>;
      }>(`SELECT action, decision, attrs FROM audit_log WHERE tenant_id = '_platform' ORDER BY id`);
      assert.deepEqual(
        rows.map((r) => r.action),
        [
          'authz.decision',
          'authz.decision',
          'authz.decision',
          'authz.decision',
          'authz.decision',
          'authz.unrecorded',
        ],
      );
      assert.equal(rows[0]?.attrs.named_tenant, 't9');
      assert.equal(rows[0]?.decision.code, 'authz_unavailable');
      assert.equal(rows[5]?.attrs.count, 4);
      assert.equal((await verifyChain(t.db, '_platform')).ok, true);
    } finally {
      await t.drop();
    }
  });

  it('denies everything without a policy bundle', async () => {
    const t = await freshDatabase();
    const keys = new KeyStore(t.db, randomBytes(32));
    const state = new EdgeState(t.db, new TokenVerifier(t.db), keys.apiKeySecrets, log);
    await state.start();
    const policies = new PolicyStore(await loadTrustedKeys());
    const audit = new AuditWriter(t.db, log);
    const edge = await startTestEdge({
      log,
      decide: createDecider({
        state,
        challenges: keys.challenges,
        policies,
        audit,
        risk: new RiskEngine(),
        log,
        edgeSecret,
      }),
      failClosed: failClosedAuditor({ audit, policies }),
      budgetMs: 2000,
    });
    try {
      assert.equal(body(await edge.check(envoyRequest('GET', '/v1/health'))).code, 'authz_unavailable');
      await audit.flush();
      const { rows } = await t.db.query<{
        tenant_id: string;
        decision: Record<string, unknown>;
        attrs: Record<string, unknown>;
      }>(`SELECT tenant_id, decision, attrs FROM audit_log WHERE action = 'authz.decision'`);
      assert.equal(rows.length, 1, 'the fail-closed deny is audited like any decision');
      assert.equal(rows[0]?.tenant_id, '_platform');
      assert.equal(rows[0]?.decision.allow, false);
      assert.equal(rows[0]?.decision.code, 'authz_unavailable');
      assert.equal(rows[0]?.decision.purpose, 'operational');
      assert.equal(rows[0]?.attrs.reason, 'no policy bundle loaded');
      assert.equal((await verifyChain(t.db, '_platform')).ok, true);
    } finally {
      await edge.close();
      await state.stop();
      await t.drop();
    }
  });

  it('serves from cache only up to the staleness bound once the database is gone', async () => {
    const t = await freshDatabase();
    const keys = new KeyStore(t.db, randomBytes(32));
    const clock = { t: Date.now() };
    const state = new EdgeState(t.db, new TokenVerifier(t.db), keys.apiKeySecrets, log, {
      maxStalenessMs: 1500,
      now: () => clock.t,
    });
    await state.start();
    const policies = new PolicyStore(await loadTrustedKeys());
    await policies.load(defaultBundleDir);
    const edge = await startTestEdge({
      log,
      decide: createDecider({
        state,
        challenges: keys.challenges,
        policies,
        audit: new AuditWriter(t.db, log),
        risk: new RiskEngine(),
        log,
        edgeSecret,
      }),
      budgetMs: 2000,
    });
    try {
      await t.db.query(
        `INSERT INTO tenants (id, name, country, base_currency) VALUES ('t1', 't1', 'KE', 'KES')`,
      );
      const probe = () =>
        edge.check(
          envoyRequest('POST', '/customers/auth/login', {
            headers: { 'content-type': 'application/json' },
            body: '{"tenantId":"t1"}',
          }),
        );
      assert.equal((await probe()).status.code, 0);
      await t.drop();
      assert.equal((await probe()).status.code, 0, 'served from the cache within the bound');
      // The state's clock passes the bound with no heartbeat answered since (the database is gone).
      clock.t += 1600;
      assert.equal(body(await probe()).code, 'authz_unavailable');
    } finally {
      await edge.close();
      await state.stop();
    }
  });
});
