/**
 * SPEC 2.10 `require_mtls_for_m2m` for OAuth clients, through the gateway (its mutual-TLS
 * listener under a CA made here with openssl), the edge and core: such a tenant's clients get a
 * token only over a client certificate, bound to it (`cnf.x5t#S256`); an unbound token issued
 * before the setting was turned on stops at the edge and in core reached directly (403
 * `mtls_required`, as for API keys); a tenant without the setting, and people's tokens, are
 * untouched.
 */
import assert from 'node:assert/strict';
import { createHash, generateKeyPairSync, randomUUID, X509Certificate } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { SignJWT, type JWK } from 'jose';
import type { Agent } from 'undici';
import { verifyChain } from '../../shared/audit.ts';
import { dpopCall, dpopKey } from '../helpers/dpop.ts';
import type { TestDb } from '../helpers/db.ts';
import type { E2eStack } from '../helpers/e2e-stack.ts';
import { startMtlsStack, type MtlsStack } from '../helpers/mtls-stack.ts';
import { callRetrying } from '../helpers/gateway.ts';
import { eventually, type Res } from '../helpers/http.ts';
import type { Issued, Pki } from '../helpers/pki.ts';
import { tenantWithAdmin as createTenant } from '../helpers/tenants.ts';

type Client = { clientId: string; clientSecret: string };
type DemoFile = {
  serviceTokens: Record<'admin', { token: string }>;
  coreClient: Client;
  customer: { tenantId: string; phone: string; pin: string };
};

describe('require_mtls_for_m2m: OAuth clients need mutual TLS to get and use tokens', () => {
  /** The front door also trusts another tenant's CA (envoy.yaml: every CA some tenant trusts). */
  let m: MtlsStack;
  let e2e: E2eStack;
  let tdb: TestDb;
  let gw: string;
  let core: string;
  let gwTls: string;
  let demo: DemoFile;
  let pki: Pki;
  let acme: Issued;
  let withAcme: Agent;
  let withOther: Agent;
  let foreign: Issued;
  let withForeign: Agent;
  const x5t = (pem: string) => createHash('sha256').update(new X509Certificate(pem).raw).digest('base64url');
  const claimsOf = (jwt: string) =>
    JSON.parse(Buffer.from(jwt.split('.')[1] ?? '', 'base64url').toString('utf8'));
  const refused = (r: Res, status: number, code: string, what: string) => {
    assert.equal(r.status, status, `${what}: ${r.status} ${r.text}`);
    assert.equal(r.json?.code, code, `${what}: ${r.text}`);
  };

  /** The token endpoint's RFC 6749 refusal of a client its tenant's mutual-TLS rule keeps out. */
  const noToken = (r: Res, what: string) => {
    refused(r, 400, 'UNAUTHORIZED_CLIENT', what);
    assert.equal(r.json.error, 'unauthorized_client');
    assert.match(r.json.error_description, /mutual TLS/);
    assert.equal(r.json.access_token, undefined);
  };
  /** The tenant's refused token requests, `count` of them, audited. */
  const refusalsAudited = async (tenantId: string, count: number) => {
    const { rows } = await tdb.db.query<{ attrs: { refused?: string } }>(
      `SELECT attrs FROM audit_log WHERE tenant_id = $1 AND action = 'oauth.token.issue' AND decision->>'allow' = 'false'`,
      [tenantId],
    );
    assert.equal(rows.length, count, 'each refusal is audited');
    return rows;
  };

  /** The first row `sql` selects, polled for 5 s (the edge writes its records in batches). */
  const eventuallyRow = async (sql: string): Promise<{ actor: unknown } | undefined> => {
    const until = Date.now() + 5000;
    for (;;) {
      const { rows } = await tdb.db.query<{ actor: unknown }>(sql);
      if (rows[0] || Date.now() > until) return rows[0];
      await new Promise((res) => setTimeout(res, 100));
    }
  };

  /** A request with `token` at `origin` (the gateway by default), on `dispatcher`'s connection. */
  const as = (
    token: string,
    method: string,
    path: string,
    o: { origin?: string; dispatcher?: Agent; json?: unknown } = {},
  ) =>
    callRetrying(o.origin ?? gw, method, path, {
      headers: {
        authorization: `Bearer ${token}`,
        'x-request-id': randomUUID(),
        'idempotency-key': `k-${randomUUID()}`,
      },
      ...(o.json !== undefined ? { json: o.json } : {}),
      ...(o.dispatcher ? { dispatcher: o.dispatcher } : {}),
    });
  const tokenAt = (origin: string, c: Client, dispatcher?: Agent) =>
    callRetrying(origin, 'POST', '/oauth2/token', {
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: c.clientId,
        client_secret: c.clientSecret,
        scope: 'core:read',
      }).toString(),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      ...(dispatcher ? { dispatcher } : {}),
    });
  /** A read any live client may make: 404 for an account nobody has (the edge and core let it through). */
  const probe = () => `/v1/core/accounts/${randomUUID()}`;

  /** A new tenant, its Admin's service token and a secret client that Admin registered. */
  async function tenantWithClient(id: string): Promise<{ admin: string; client: Client }> {
    const admin = await createTenant(gw, demo.serviceTokens.admin.token, tdb.db, id);
    const r = await as(admin, 'POST', '/v1/oauth-clients', {
      json: { name: 'payouts', scopes: ['core:read'], token_endpoint_auth_method: 'client_secret_post' },
    });
    assert.equal(r.status, 201, r.text);
    return { admin, client: { clientId: r.json.client_id, clientSecret: r.json.client_secret } };
  }

  /**
   * The tenant's Admin turns require_mtls_for_m2m on or off through the settings API (GET, PUT
   * If-Match). The Admin's service token is a machine credential of the tenant, under the same
   * rule once it is on: it calls over the mTLS listener with a certificate the tenant trusts.
   */
  async function requireMtls(
    admin: string,
    tenantId: string,
    on: boolean,
    also: Record<string, unknown> = {},
  ): Promise<void> {
    const path = `/v1/tenants/${tenantId}/security`;
    const read = await as(admin, 'GET', path, { origin: gwTls, dispatcher: withAcme });
    assert.equal(read.status, 200, read.text);
    const put = await callRetrying(gwTls, 'PUT', path, {
      dispatcher: withAcme,
      json: { ...read.json, require_mtls_for_m2m: on, ...also },
      headers: {
        authorization: `Bearer ${admin}`,
        'x-request-id': randomUUID(),
        'idempotency-key': `k-${randomUUID()}`,
        'if-match': read.headers.etag ?? '',
      },
    });
    assert.equal(put.status, 200, put.text);
    // Turned off, the Admin's plain calls pass again once the edge has heard of it (NOTIFY).
    if (!on)
      await eventually(
        () => as(admin, 'GET', path),
        (r) => r.status === 200,
      );
  }

  /** A token of `c` over plain HTTP (no certificate): unbound. */
  async function unboundToken(c: Client): Promise<string> {
    const t = await tokenAt(gw, c);
    assert.equal(t.status, 200, t.text);
    assert.equal(claimsOf(t.json.access_token).cnf, undefined);
    return t.json.access_token;
  }

  /**
   * `token` refused 403 mtls_required by the edge without a certificate (once the settings'
   * NOTIFY has dropped the edge's cached tenant), at the edge on `conn` (a connection with a
   * certificate that is not the token's), and in core reached directly.
   */
  async function refusedEverywhere(token: string, conn: Agent, what: string): Promise<void> {
    // Core reads the setting at once, the edge once the NOTIFY arrives: wait for the edge's own refusal.
    const bare = await eventually(
      () => as(token, 'GET', probe()),
      (r) => r.json?.reason === 'mtls_required',
    );
    refused(bare, 403, 'mtls_required', 'at the edge without a certificate');
    const tls = await as(token, 'GET', probe(), { origin: gwTls, dispatcher: conn });
    refused(tls, 403, 'mtls_required', `at the edge ${what}`);
    // The edge's own refusal (its body names the reason), not core's behind it.
    for (const r of [bare, tls])
      assert.equal(r.json.reason, 'mtls_required', `refused by the edge: ${r.text}`);
    refused(await as(token, 'GET', probe(), { origin: core }), 403, 'mtls_required', 'core reached directly');
  }

  before(async () => {
    m = await startMtlsStack('mtlscli');
    ({ e2e, gwTls, pki } = m);
    ({ tdb, gw, core } = e2e);
    demo = e2e.demo as DemoFile;
    acme = await pki.client('/O=Acme/CN=payouts');
    // The same subject as Acme's, under a CA only some other tenant trusts.
    foreign = await m.foreignPki.client('/O=Acme/CN=payouts');
    withAcme = m.agent(acme);
    withOther = m.agent(await pki.client('/O=Other/CN=payouts'));
    withForeign = m.agent(foreign);
  });
  after(async () => {
    await m?.stop();
  });

  it('issues a token only to a client that connected with a certificate, bound to it; refusals audited', async () => {
    const off = await tenantWithClient('mtlscli-off');
    const { admin, client } = await tenantWithClient('mtlscli-on');
    await requireMtls(admin, 'mtlscli-on', true);
    for (const origin of [gw, core]) noToken(await tokenAt(origin, client), `no certificate at ${origin}`);
    const rows = await refusalsAudited('mtlscli-on', 2);
    for (const row of rows) assert.match(row.attrs.refused ?? '', /mutual TLS/);
    assert.ok(!JSON.stringify(rows).includes(client.clientSecret), 'no secret in the record');

    const t = await tokenAt(gwTls, client, withAcme);
    assert.equal(t.status, 200, t.text);
    assert.equal(t.json.token_type, 'Bearer');
    const token = t.json.access_token as string;
    assert.equal(claimsOf(token).cnf?.['x5t#S256'], x5t(acme.cert), 'bound to the certificate');
    assert.equal((await as(token, 'GET', probe(), { origin: gwTls, dispatcher: withAcme })).status, 404);
    await refusedEverywhere(token, withOther, 'with another certificate');

    // The tenant without the setting: unbound tokens over plain HTTP, as before.
    const plain = await unboundToken(off.client);
    for (const origin of [gw, core])
      assert.equal((await as(plain, 'GET', probe(), { origin })).status, 404, `setting off, at ${origin}`);
  });

  it('an unbound token issued before the setting was turned on stops at the edge and in core at once', async () => {
    const off = await tenantWithClient('mtlscli-off2');
    const { admin, client } = await tenantWithClient('mtlscli-late');
    const early = await unboundToken(client);
    const offToken = await unboundToken(off.client);
    const bound = await tokenAt(gwTls, client, withAcme);
    assert.equal(bound.status, 200, bound.text);
    for (const origin of [gw, core])
      assert.equal((await as(early, 'GET', probe(), { origin })).status, 404, `before, at ${origin}`);

    await requireMtls(admin, 'mtlscli-late', true);
    await refusedEverywhere(early, withAcme, 'with a certificate (the token is bound to none)');
    assert.equal(
      (await as(bound.json.access_token, 'GET', probe(), { origin: gwTls, dispatcher: withAcme })).status,
      404,
      'a certificate-bound token with its certificate still works',
    );
    for (const origin of [gw, core])
      assert.equal(
        (await as(offToken, 'GET', probe(), { origin })).status,
        404,
        `other tenant, at ${origin}`,
      );

    await requireMtls(admin, 'mtlscli-late', false);
    const again = await eventually(
      () => as(early, 'GET', probe()),
      (r) => r.status === 404,
    );
    assert.equal(again.status, 404, `turned off again: ${again.text}`);
  });

  it("people's tokens are not machine calls: a customer of such a tenant signs in and acts without a certificate", async () => {
    const platform = demo.serviceTokens.admin.token;
    await requireMtls(platform, 'demo', true);
    try {
      refused(await tokenAt(gw, demo.coreClient), 400, 'UNAUTHORIZED_CLIENT', "the demo tenant's client");
      const c = demo.customer;
      const login = await callRetrying(gw, 'POST', '/customers/auth/login', {
        json: { tenantId: c.tenantId, phone: c.phone, pin: c.pin },
      });
      assert.equal(login.status, 200, login.text);
      const sessions = await as(login.json.accessToken, 'GET', '/customers/sessions');
      assert.equal(sessions.status, 200, sessions.text);
    } finally {
      await requireMtls(platform, 'demo', false);
    }
  });
  it("a tenant naming the CAs it trusts gives no token over a certificate another tenant's CA issued, whatever the client's method", async () => {
    const { admin, client } = await tenantWithClient('mtlscli-cas');
    const pair = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const jwk = { ...(pair.publicKey.export({ format: 'jwk' }) as JWK), kid: randomUUID() };
    const reg = await as(admin, 'POST', '/v1/oauth-clients', {
      json: {
        name: 'signer',
        scopes: ['core:read'],
        token_endpoint_auth_method: 'private_key_jwt',
        jwks: { keys: [jwk] },
      },
    });
    assert.equal(reg.status, 201, reg.text);
    const signer = reg.json.client_id as string;
    /** A private_key_jwt token request on `dispatcher`'s connection to the mTLS listener. */
    const signedAt = async (dispatcher: Agent) => {
      const now = Math.floor(Date.now() / 1000);
      const assertion = await new SignJWT({ jti: randomUUID() })
        .setProtectedHeader({ alg: 'ES256', kid: jwk.kid })
        .setIssuer(signer)
        .setSubject(signer)
        .setAudience(`${gwTls}/oauth2/token`)
        .setIssuedAt(now)
        .setExpirationTime(now + 60)
        .sign(pair.privateKey);
      return callRetrying(gwTls, 'POST', '/oauth2/token', {
        body: new URLSearchParams({
          grant_type: 'client_credentials',
          client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
          client_assertion: assertion,
          scope: 'core:read',
        }).toString(),
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        dispatcher,
      });
    };
    await requireMtls(admin, 'mtlscli-cas', true, { mtls_trusted_cas: [pki.ca.cert] });
    // The settings change is audited naming the CA by its fingerprint, not with its PEM text.
    const put = await tdb.db.query<{ attrs: { values: { mtls_trusted_cas?: string[] } } }>(
      `SELECT attrs FROM audit_log WHERE tenant_id = 'mtlscli-cas' AND action = 'tenant.security.put' ORDER BY id DESC LIMIT 1`,
    );
    assert.deepEqual(put.rows[0]?.attrs.values.mtls_trusted_cas, [
      `sha256:${new X509Certificate(pki.ca.cert).fingerprint256}`,
    ]);
    assert.ok(!JSON.stringify(put.rows).includes('CERTIFICATE'));
    // The record is hashed as stored: the tenant's audit chain still verifies.
    const chain = await verifyChain(tdb.db, 'mtlscli-cas');
    assert.ok(chain.ok && chain.count > 0, JSON.stringify(chain));

    // The front door accepts the foreign certificate (some tenant trusts its CA); this tenant does not.
    const answers = {
      secret: await tokenAt(gwTls, client, withForeign),
      private_key_jwt: await signedAt(withForeign),
    };
    for (const [method, r] of Object.entries(answers))
      noToken(r, `${method} client over another tenant's CA's certificate`);
    const rows = await refusalsAudited('mtlscli-cas', 2);
    const der = new X509Certificate(foreign.cert).raw.toString('base64');
    const record = JSON.stringify(rows);
    for (const material of [der.slice(0, 40), der.slice(-40), 'CERTIFICATE', client.clientSecret])
      assert.ok(!record.includes(material), `no certificate or secret in the record: ${record}`);

    // The tenant's own CA: bound tokens, by either method.
    for (const r of [await tokenAt(gwTls, client, withAcme), await signedAt(withAcme)]) {
      assert.equal(r.status, 200, r.text);
      assert.equal(claimsOf(r.json.access_token).cnf?.['x5t#S256'], x5t(acme.cert));
    }
  });

  it('a bound token stops once its tenant no longer lists the CA of its certificate', async () => {
    const { admin, client } = await tenantWithClient('mtlscli-drop');
    await requireMtls(admin, 'mtlscli-drop', true, { mtls_trusted_cas: [pki.ca.cert] });
    const t = await tokenAt(gwTls, client, withAcme);
    assert.equal(t.status, 200, t.text);
    const use = () => as(t.json.access_token, 'GET', probe(), { origin: gwTls, dispatcher: withAcme });
    assert.equal((await use()).status, 404, 'its CA listed');
    await requireMtls(admin, 'mtlscli-drop', true, { mtls_trusted_cas: [m.foreignPki.ca.cert] });
    // Core reads the settings afresh and refuses at once; the edge once its cached tenant hears of
    // the change (NOTIFY): wait for the edge's own refusal (its body names the reason).
    const r = await eventually(use, (res) => res.status === 403 && res.json?.reason === 'mtls_required');
    refused(r, 403, 'mtls_required', 'its CA no longer listed');
    assert.equal(r.json.reason, 'mtls_required', `refused by the edge: ${r.text}`);
  });

  it('a certificate is public: copied into headers it gets no bound token used and no token issued, at the gateway or core', async () => {
    const { admin, client } = await tenantWithClient('mtlscli-spoof');
    await requireMtls(admin, 'mtlscli-spoof', true);
    const t = await tokenAt(gwTls, client, withAcme);
    assert.equal(t.status, 200, t.text);
    const token = t.json.access_token as string;
    const pem = encodeURIComponent(acme.cert);
    const spoofed = {
      'x-client-certificate': pem,
      'x-forwarded-client-cert': `Hash=${createHash('sha256').update(new X509Certificate(acme.cert).raw).digest('hex')};Cert="${pem}"`,
    };
    const use = (origin: string, extra: Record<string, string> = {}, dispatcher?: Agent) =>
      callRetrying(origin, 'GET', probe(), {
        headers: { authorization: `Bearer ${token}`, 'x-request-id': randomUUID(), ...spoofed, ...extra },
        ...(dispatcher ? { dispatcher } : {}),
      });
    refused(await use(gw), 403, 'mtls_required', 'plain listener');
    refused(await use(gwTls, {}, withOther), 403, 'mtls_required', 'mTLS listener, another certificate');
    refused(await use(core), 403, 'mtls_required', 'core without the edge secret');
    refused(await use(core, { 'x-edge-auth': 'guessed' }), 403, 'mtls_required', 'core, a guessed secret');
    for (const origin of [gw, core]) {
      const r = await callRetrying(origin, 'POST', '/oauth2/token', {
        body: new URLSearchParams({
          grant_type: 'client_credentials',
          client_id: client.clientId,
          client_secret: client.clientSecret,
        }).toString(),
        headers: { 'content-type': 'application/x-www-form-urlencoded', ...spoofed },
      });
      refused(r, 400, 'UNAUTHORIZED_CLIENT', `token request with copied headers at ${origin}`);
    }
    // The refusals' records (the edge's decisions, the token endpoint's) hold no certificate.
    const der = new X509Certificate(acme.cert).raw.toString('base64');
    const { rows } = await tdb.db.query<{
      tenant_id: string;
      actor: unknown;
      attrs: unknown;
      decision: unknown;
    }>(
      `SELECT tenant_id, actor, attrs, decision FROM audit_log
        WHERE tenant_id IN ('mtlscli-spoof', '_platform') AND (decision->>'code' = 'mtls_required' OR action = 'oauth.token.issue')`,
    );
    const record = JSON.stringify(rows);
    for (const material of [
      der.slice(0, 40),
      der.slice(-40),
      encodeURIComponent(der.slice(0, 40)),
      'CERTIFICATE',
    ])
      assert.ok(!record.includes(material), `no certificate in the records: ${record}`);
  });

  it('a DPoP-bound token (no certificate) issued before the setting was turned on stops too', async () => {
    const { admin, client } = await tenantWithClient('mtlscli-dpop');
    const key = await dpopKey();
    const dpop = dpopCall(key);
    const t = await dpop(gw, 'POST', '/oauth2/token', {
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: client.clientId,
        client_secret: client.clientSecret,
      }).toString(),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    assert.equal(t.status, 200, t.text);
    assert.deepEqual(claimsOf(t.json.access_token).cnf, { jkt: key.jkt });
    const use = (origin: string) =>
      dpop(origin, 'GET', probe(), {
        headers: { authorization: `DPoP ${t.json.access_token}`, 'x-request-id': randomUUID() },
      });
    assert.equal((await use(gw)).status, 404, 'before, with its proof');
    await requireMtls(admin, 'mtlscli-dpop', true);
    refused(
      await eventually(
        () => use(gw),
        (r) => r.status === 403,
      ),
      403,
      'mtls_required',
      'at the edge, with its proof',
    );
    refused(await use(core), 403, 'mtls_required', 'core reached directly, with its proof');
  });
  it("a client naming another tenant gets neither a token of it nor that tenant's rule waived", async () => {
    const off = await tenantWithClient('mtlscli-x-off');
    const on = await tenantWithClient('mtlscli-x-on');
    await requireMtls(on.admin, 'mtlscli-x-on', true);
    const ask = (c: Client, tenantId: string) =>
      callRetrying(gw, 'POST', '/oauth2/token', {
        body: new URLSearchParams({
          grant_type: 'client_credentials',
          client_id: c.clientId,
          client_secret: c.clientSecret,
          tenant_id: tenantId,
        }).toString(),
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
      });
    // The mTLS tenant's client naming the other tenant, and the other tenant's client naming it.
    refused(await ask(on.client, 'mtlscli-x-off'), 401, 'INVALID_CLIENT', 'naming a tenant without the rule');
    refused(await ask(off.client, 'mtlscli-x-on'), 401, 'INVALID_CLIENT', 'naming the tenant with the rule');
    // An account of the mTLS tenant, opened by a writing client of it over its certificate.
    const reg = await as(on.admin, 'POST', '/v1/oauth-clients', {
      origin: gwTls,
      dispatcher: withAcme,
      json: {
        name: 'opener',
        scopes: ['core:read', 'core:write'],
        token_endpoint_auth_method: 'client_secret_post',
      },
    });
    assert.equal(reg.status, 201, reg.text);
    const w = await callRetrying(gwTls, 'POST', '/oauth2/token', {
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: reg.json.client_id,
        client_secret: reg.json.client_secret,
        scope: 'core:read core:write',
      }).toString(),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      dispatcher: withAcme,
    });
    assert.equal(w.status, 200, w.text);
    const opened = await as(w.json.access_token, 'POST', '/v1/core/accounts', {
      origin: gwTls,
      dispatcher: withAcme,
      json: {
        owner_type: 'customer',
        owner_id: `x-${randomUUID()}`,
        product_code: 'WALLET_MAIN',
        currency: 'KES',
      },
    });
    assert.equal(opened.status, 201, opened.text);
    const account = `/v1/core/accounts/${opened.json.id}`;

    // The other tenant's unbound token, naming the mTLS tenant, with and without the same certificate.
    const token = await unboundToken(off.client);
    const naming = { 'x-tenant-id': 'mtlscli-x-on' };
    for (const [origin, dispatcher] of [
      [gw, undefined],
      [gwTls, withAcme],
      [core, undefined],
    ] as const) {
      const r = await callRetrying(origin, 'GET', account, {
        headers: { authorization: `Bearer ${token}`, 'x-request-id': randomUUID(), ...naming },
        ...(dispatcher ? { dispatcher } : {}),
      });
      refused(r, 404, 'ACCOUNT_NOT_FOUND', `the other tenant's token at ${origin}: its own tenant only`);
    }
    const own = await as(w.json.access_token, 'GET', account, { origin: gwTls, dispatcher: withAcme });
    assert.equal(own.status, 200, own.text);
  });
  it("the edge's refusal of a verified client token without its certificate is recorded in that tenant's audit, naming the client", async () => {
    const { admin, client } = await tenantWithClient('mtlscli-aud');
    await requireMtls(admin, 'mtlscli-aud', true);
    const t = await tokenAt(gwTls, client, withAcme);
    assert.equal(t.status, 200, t.text);
    const r = await as(t.json.access_token, 'GET', probe());
    refused(r, 403, 'mtls_required', 'without its certificate');
    const row = await eventuallyRow(
      `SELECT actor FROM audit_log WHERE tenant_id = 'mtlscli-aud' AND action = 'authz.decision' AND decision->>'code' = 'mtls_required'`,
    );
    assert.deepEqual(row?.actor, { type: 'service', id: client.clientId });
  });
});
