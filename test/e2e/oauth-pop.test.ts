import assert from 'node:assert/strict';
import {
  createHash,
  generateKeyPairSync,
  randomUUID,
  webcrypto,
  X509Certificate,
  type KeyObject,
} from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SignJWT, UnsecuredJWT, type JWK } from 'jose';
import * as client from 'openid-client';
import { Agent } from 'undici';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { buildCore } from '../../core/app.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { readBuildInfo } from '../../core/platform/build-info.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { freePort } from '../../shared/net.ts';
import { loadOrCreateMasterKey } from '../../shared/sealing.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { dpopKey, proof } from '../helpers/dpop.ts';
import { testEdgeSecrets } from '../helpers/edge-auth.ts';
import { call, eventually, serve, type Res } from '../helpers/http.ts';
import { makePki, type Issued, type Pki } from '../helpers/pki.ts';
import { respellings } from '../helpers/respell.ts';

/**
 * Issue 17 items 1, 2, 5, 6 through the gateway: OAuth client registration, the token endpoint
 * with private_key_jwt (openid-client v6 configured by discovery, with DPoP), mutual TLS with
 * certificate-bound tokens on the gateway's TLS listener (a CA made here with openssl), RFC 8414
 * metadata, and every bad assertion, proof and certificate the issue lists; a replayed
 * assertion is refused by a second core on the same database too.
 */
describe('OAuth clients: private_key_jwt, mTLS, DPoP, discovery', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let pki: Pki;
  let issuer: string;
  let gwTls: string;
  let admin: string;
  let ops: string;
  let account: string;
  let second: { origin: string; close(): Promise<void> };
  let acme: Issued;
  let other: Issued;
  let selfSigned: Issued;

  const payloadOf = (jwt: string) =>
    JSON.parse(Buffer.from(jwt.split('.')[1] ?? '', 'base64url').toString('utf8'));
  // Idle connections are closed well before the gateway's keep-alive ends (5 s): key generation
  // between two calls on a loaded machine must not meet a connection the server just closed.
  const plain = new Agent({ keepAliveTimeout: 1000, keepAliveMaxTimeout: 1000 });
  const asAdmin = (token = admin) => ({ authorization: `Bearer ${token}` });
  const register = (body: Record<string, unknown>, token = admin) =>
    call(issuer, 'POST', '/v1/oauth-clients', { json: body, headers: asAdmin(token), dispatcher: plain });
  const form = (fields: Record<string, string>) => ({
    body: new URLSearchParams(fields).toString(),
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
  });
  const tokenAt = (
    origin: string,
    fields: Record<string, string>,
    extra: Record<string, string> = {},
    dispatcher?: Agent,
  ): Promise<Res> => {
    const f = form(fields);
    return call(origin, 'POST', '/oauth2/token', {
      body: f.body,
      headers: { ...f.headers, ...extra },
      dispatcher: dispatcher ?? plain,
    });
  };
  const tlsAgent = (cert?: Issued) =>
    new Agent({
      connect: {
        ca: pki.ca.cert,
        ...(cert ? { key: cert.key, cert: cert.cert } : {}),
        servername: '127.0.0.1',
      },
    });
  const x5t = (pem: string) => createHash('sha256').update(new X509Certificate(pem).raw).digest('base64url');
  /** A `self_signed_tls_client_auth` client of `selfSigned`, reading only. */
  const registerSelfSigned = (name: string) =>
    register({
      name,
      scopes: ['core:read'],
      token_endpoint_auth_method: 'self_signed_tls_client_auth',
      tls_client_certificate_thumbprint: x5t(selfSigned.cert),
    });

  async function keyClient(
    alg: 'ES256' | 'EdDSA' | 'PS256',
  ): Promise<{ id: string; key: KeyObject; jwk: JWK }> {
    const pair =
      alg === 'ES256'
        ? generateKeyPairSync('ec', { namedCurve: 'P-256' })
        : alg === 'EdDSA'
          ? generateKeyPairSync('ed25519')
          : generateKeyPairSync('rsa', { modulusLength: 2048 });
    const jwk = { ...(pair.publicKey.export({ format: 'jwk' }) as JWK), kid: randomUUID() };
    const r = await register({
      name: `${alg} client`,
      scopes: ['core:read'],
      token_endpoint_auth_method: 'private_key_jwt',
      jwks: { keys: [jwk] },
    });
    assert.equal(r.status, 201, r.text);
    return { id: r.json.client_id, key: pair.privateKey, jwk };
  }

  function assertion(
    c: { id: string; key: KeyObject; jwk: JWK },
    alg: string,
    o: { aud?: string; expS?: number; jti?: string; iss?: string } = {},
  ): Promise<string> {
    const now = Math.floor(Date.now() / 1000);
    return new SignJWT({ jti: o.jti ?? randomUUID() })
      .setProtectedHeader({ alg, kid: c.jwk.kid as string })
      .setIssuer(o.iss ?? c.id)
      .setSubject(c.id)
      .setAudience(o.aud ?? `${issuer}/oauth2/token`)
      .setIssuedAt(now)
      .setExpirationTime(o.expS ?? now + 60)
      .sign(c.key);
  }
  const assertionFields = (a: string, extra: Record<string, string> = {}) => ({
    grant_type: 'client_credentials',
    client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
    client_assertion: a,
    ...extra,
  });

  before(async () => {
    pki = await makePki();
    acme = await pki.client('/O=Acme/CN=payouts');
    other = await pki.client('/O=Other/CN=payouts');
    selfSigned = await pki.selfSigned('/CN=self-signed payouts');
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-oauth-'));
    const port = await freePort();
    issuer = `http://127.0.0.1:${port}`;
    const config = loadConfig({
      GATEWAY_PORT: String(port),
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
      ISSUER_URL: issuer,
    });
    stack = await startStack(config, {
      checkTimeoutMs: 3000,
      gatewayTls: {
        key: pki.server.key,
        cert: pki.server.cert,
        clientCa: `${pki.ca.cert}\n${selfSigned.cert}`,
      },
    });
    gwTls = `https://127.0.0.1:${stack.ports.gatewayTls}`;
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8'));
    admin = demo.serviceTokens.admin.token;
    ops = demo.serviceTokens.ops.token;
    account = demo.settlementAccounts.KES;
    await tdb.db.query(
      `UPDATE tenants SET security = security || jsonb_build_object('mtls_trusted_cas', jsonb_build_array($1::text)) WHERE id = 'demo'`,
      [pki.ca.cert],
    );
    // A second core on the same database (as behind a load balancer): one-time values are shared.
    const keys = new KeyStore(tdb.db, await loadOrCreateMasterKey(undefined, join(dataDir, 'master.key')), {
      issuerUrl: issuer,
    });
    second = await serve(
      buildCore({
        db: tdb.db,
        log: createLogger('silent'),
        metrics: createMetrics(),
        build: readBuildInfo(),
        keys,
        edgeSecrets: testEdgeSecrets,
      }).server,
    );
  });
  after(async () => {
    await plain.close();
    await second.close();
    await stack.stop();
    await tdb.drop();
    await rm(dataDir, { recursive: true, force: true });
    await pki.dispose();
  });

  it('publishes RFC 8414 metadata for ISSUER_URL', async () => {
    const r = await call(issuer, 'GET', '/.well-known/oauth-authorization-server');
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.issuer, issuer);
    assert.equal(r.json.token_endpoint, `${issuer}/oauth2/token`);
    assert.equal(r.json.jwks_uri, `${issuer}/.well-known/jwks.json`);
    assert.deepEqual(r.json.grant_types_supported, ['client_credentials']);
    for (const m of [
      'private_key_jwt',
      'tls_client_auth',
      'self_signed_tls_client_auth',
      'client_secret_basic',
    ])
      assert.ok(r.json.token_endpoint_auth_methods_supported.includes(m), m);
    assert.deepEqual(r.json.token_endpoint_auth_signing_alg_values_supported, ['EdDSA', 'ES256', 'PS256']);
    assert.deepEqual(r.json.dpop_signing_alg_values_supported, ['EdDSA', 'ES256', 'PS256']);
    assert.equal(r.json.tls_client_certificate_bound_access_tokens, true);
    assert.equal(r.json.mtls_endpoint_aliases.token_endpoint, `${issuer}/oauth2/token`);
  });

  it('registers clients: a secret once, keys and certificates; audited; refuses bad registrations', async () => {
    const secret = await register({
      name: 'legacy',
      scopes: ['core:read'],
      token_endpoint_auth_method: 'client_secret_basic',
    });
    assert.equal(secret.status, 201, secret.text);
    assert.equal(secret.headers['cache-control'], 'no-store');
    assert.match(secret.json.client_secret, /^[A-Za-z0-9_-]{43}$/);
    const got = await call(issuer, 'GET', `/v1/oauth-clients/${secret.json.client_id}`, {
      headers: asAdmin(ops),
    });
    assert.equal(got.status, 200, got.text);
    assert.equal(got.json.client_secret, undefined, 'the secret is shown once');
    const list = await call(issuer, 'GET', '/v1/oauth-clients', { headers: asAdmin() });
    assert.ok(list.json.items.some((c: { client_id: string }) => c.client_id === secret.json.client_id));
    const { rows } = await tdb.db.query(
      `SELECT actor FROM audit_log WHERE action = 'oauth_client.create' AND target->>'id' = $1`,
      [secret.json.client_id],
    );
    assert.equal(rows.length, 1);
    assert.match(JSON.stringify(rows[0]), /service-token:/);
    // rotate: the new secret works, the old one no longer
    const rotated = await call(issuer, 'POST', `/v1/oauth-clients/${secret.json.client_id}/rotate`, {
      json: {},
      headers: asAdmin(),
    });
    assert.equal(rotated.status, 200, rotated.text);
    const basic = (s: string) => ({
      authorization: `Basic ${Buffer.from(`${secret.json.client_id}:${s}`).toString('base64')}`,
    });
    assert.equal(
      (await tokenAt(issuer, { grant_type: 'client_credentials' }, basic(secret.json.client_secret))).status,
      401,
    );
    assert.equal(
      (await tokenAt(issuer, { grant_type: 'client_credentials' }, basic(rotated.json.client_secret))).status,
      200,
    );

    const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const bad: [string, Record<string, unknown>, number][] = [
      [
        'a private key',
        {
          token_endpoint_auth_method: 'private_key_jwt',
          jwks: { keys: [privateKey.export({ format: 'jwk' })] },
        },
        400,
      ],
      [
        'a symmetric key',
        { token_endpoint_auth_method: 'private_key_jwt', jwks: { keys: [{ kty: 'oct', k: 'c2VjcmV0' }] } },
        400,
      ],
      ['no jwks', { token_endpoint_auth_method: 'private_key_jwt' }, 400],
      [
        'jwks for mTLS',
        {
          token_endpoint_auth_method: 'tls_client_auth',
          jwks: { keys: [{ kty: 'OKP', crv: 'Ed25519', x: 'x' }] },
        },
        400,
      ],
      ['no thumbprint', { token_endpoint_auth_method: 'self_signed_tls_client_auth' }, 400],
      ['an unknown method', { token_endpoint_auth_method: 'none' }, 400],
      ['an unknown scope', { token_endpoint_auth_method: 'client_secret_post', scopes: ['admin'] }, 400],
    ];
    for (const [name, body, status] of bad) {
      const r = await register({ name: 'bad', scopes: ['core:read'], ...body });
      assert.equal(r.status, status, `${name}: ${r.text}`);
    }
    assert.equal(
      (
        await register(
          { name: 'x', scopes: ['core:read'], token_endpoint_auth_method: 'client_secret_post' },
          ops,
        )
      ).status,
      403,
      'ops may read, not register',
    );
    await tdb.db.query(
      `UPDATE tenants SET security = security || '{"oauth_client_secrets_forbidden": true}' WHERE id = 'demo'`,
    );
    try {
      const forbidden = await register({
        name: 'x',
        scopes: ['core:read'],
        token_endpoint_auth_method: 'client_secret_post',
      });
      assert.equal(forbidden.status, 422, forbidden.text);
      assert.equal(forbidden.json.code, 'OAUTH_METHOD_FORBIDDEN');
      assert.equal(
        (await tokenAt(issuer, { grant_type: 'client_credentials' }, basic(rotated.json.client_secret))).json
          .error,
        'invalid_client',
        'nor may an existing one use its secret',
      );
    } finally {
      await tdb.db.query(
        `UPDATE tenants SET security = security - 'oauth_client_secrets_forbidden' WHERE id = 'demo'`,
      );
    }
    assert.equal(
      (await call(issuer, 'DELETE', `/v1/oauth-clients/${secret.json.client_id}`, { headers: asAdmin() }))
        .status,
      204,
    );
    assert.equal(
      (await tokenAt(issuer, { grant_type: 'client_credentials' }, basic(rotated.json.client_secret))).json
        .error,
      'invalid_client',
      'a revoked client gets no token',
    );
  });

  it('openid-client (discovery, private_key_jwt, DPoP) gets a bound token and calls core through the gateway', async () => {
    const keys = await webcrypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, true, [
      'sign',
      'verify',
    ]);
    const jwk = { ...(await webcrypto.subtle.exportKey('jwk', keys.publicKey)), kid: 'k1' } as JWK;
    const r = await register({
      name: 'openid-client',
      scopes: ['core:read'],
      token_endpoint_auth_method: 'private_key_jwt',
      jwks: { keys: [jwk] },
    });
    assert.equal(r.status, 201, r.text);
    const config = await client.discovery(
      new URL(issuer),
      r.json.client_id,
      undefined,
      client.PrivateKeyJwt({ key: keys.privateKey, kid: 'k1' }),
      {
        algorithm: 'oauth2',
        execute: [client.allowInsecureRequests],
      },
    );
    const dpopKeys = await client.randomDPoPKeyPair('ES256');
    const DPoP = client.getDPoPHandle(config, dpopKeys);
    const tokens = await client.clientCredentialsGrant(config, { scope: 'core:read' }, { DPoP });
    assert.equal(tokens.token_type, 'dpop');
    const claims = payloadOf(tokens.access_token);
    assert.equal(claims.iss, issuer, 'client-credentials tokens carry ISSUER_URL');
    assert.equal(typeof claims.cnf.jkt, 'string');
    const res = await client.fetchProtectedResource(
      config,
      tokens.access_token,
      new URL(`${issuer}/v1/core/accounts/${account}`),
      'GET',
      undefined,
      undefined,
      { DPoP },
    );
    assert.equal(res.status, 200, await res.clone().text());
    assert.equal(((await res.json()) as { id: string }).id, account);
    // The same token without its proof, or as a Bearer token, is refused with a DPoP challenge.
    for (const authorization of [`DPoP ${tokens.access_token}`, `Bearer ${tokens.access_token}`]) {
      const bare = await call(issuer, 'GET', `/v1/core/accounts/${account}`, { headers: { authorization } });
      assert.equal(bare.status, 401, bare.text);
      assert.match(bare.headers['www-authenticate'] ?? '', /^DPoP .*error="invalid_dpop_proof"/);
    }
  });

  it('accepts EdDSA, ES256 and PS256 assertions, and refuses every bad one with invalid_client', async () => {
    for (const alg of ['EdDSA', 'ES256', 'PS256'] as const) {
      const c = await keyClient(alg);
      const ok = await tokenAt(issuer, assertionFields(await assertion(c, alg)));
      assert.equal(ok.status, 200, `${alg}: ${ok.text}`);
      assert.equal(ok.json.token_type, 'Bearer');
    }
    const c = await keyClient('ES256');
    const stranger = { ...c, key: generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey };
    const now = Math.floor(Date.now() / 1000);
    const hs256 = await new SignJWT({ jti: randomUUID() })
      .setProtectedHeader({ alg: 'HS256' })
      .setIssuer(c.id)
      .setSubject(c.id)
      .setAudience(`${issuer}/oauth2/token`)
      .setExpirationTime(now + 60)
      .sign(Buffer.alloc(32, 1));
    const none = new UnsecuredJWT({ jti: randomUUID() })
      .setIssuer(c.id)
      .setSubject(c.id)
      .setAudience(`${issuer}/oauth2/token`)
      .setExpirationTime(now + 60)
      .encode();
    const cases: [string, string, Record<string, string>?][] = [
      ['an unregistered key', await assertion(stranger, 'ES256')],
      ['alg none', none],
      ['HS256', hs256],
      ['a wrong aud', await assertion(c, 'ES256', { aud: `${issuer}/v1/core/postings` })],
      ['expired', await assertion(c, 'ES256', { expS: now - 120 })],
      ['exp too far ahead', await assertion(c, 'ES256', { expS: now + 3600 })],
      ['iss not the client', await assertion(c, 'ES256', { iss: 'cc_demo_someoneelse' })],
      ['a client of another tenant', await assertion(c, 'ES256'), { tenant_id: 'other' }],
      // A valid assertion spelled a second way (shared/jws.ts), each with a fresh jti.
      ...respellings(await assertion(c, 'ES256')).map(([n, a]): [string, string] => [`${n} (assertion)`, a]),
    ];
    for (const [name, a, extra] of cases) {
      const r = await tokenAt(issuer, assertionFields(a, extra ?? {}));
      assert.equal(r.status, 401, `${name}: ${r.text}`);
      assert.equal(r.json.error, 'invalid_client', name);
      assert.equal(typeof r.json.error_description, 'string', name);
    }
    assert.equal(
      (await tokenAt(issuer, assertionFields(await assertion(c, 'ES256', { aud: issuer })))).status,
      200,
      'the issuer is an accepted aud',
    );
  });

  it('uses an assertion jti once, across both cores', async () => {
    const c = await keyClient('EdDSA');
    const a = await assertion(c, 'EdDSA');
    assert.equal((await tokenAt(issuer, assertionFields(a))).status, 200);
    const again = await tokenAt(issuer, assertionFields(a));
    assert.equal(again.json.error, 'invalid_client', again.text);
    const b = await assertion(c, 'EdDSA');
    assert.equal((await tokenAt(second.origin, assertionFields(b))).status, 200, 'the second core issues');
    const onFirst = await tokenAt(issuer, assertionFields(b));
    assert.equal(onFirst.json.error, 'invalid_client', 'and the first refuses the same assertion');
  });

  it('refuses DPoP proofs at the token endpoint with a wrong htm/htu, a stale iat or a replayed jti (400, RFC 9449)', async () => {
    const c = await keyClient('ES256');
    const key = await dpopKey();
    const url = `${issuer}/oauth2/token`;
    const replayed = await proof(key, 'POST', url);
    const cases: [string, string][] = [
      ['wrong htm', await proof(key, 'GET', url)],
      ['wrong htu', await proof(key, 'POST', `${issuer}/oauth2/other`)],
      ['stale iat', await proof(key, 'POST', url, { iatS: Math.floor(Date.now() / 1000) - 300 })],
      ...respellings(await proof(key, 'POST', url)),
    ];
    for (const [name, p] of cases) {
      const r = await tokenAt(issuer, assertionFields(await assertion(c, 'ES256')), { dpop: p });
      assert.equal(r.status, 400, `${name}: ${r.text}`);
      assert.equal(r.json.error, 'invalid_dpop_proof', name);
    }
    assert.equal(
      (await tokenAt(issuer, assertionFields(await assertion(c, 'ES256')), { dpop: replayed })).status,
      200,
    );
    const again = await tokenAt(issuer, assertionFields(await assertion(c, 'ES256')), { dpop: replayed });
    assert.equal(again.json.error, 'invalid_dpop_proof');
  });

  it('mTLS: tls_client_auth under a trusted CA binds the token to the certificate; refused without it or with another', async () => {
    const reg = await register({
      name: 'payouts',
      scopes: ['core:read'],
      token_endpoint_auth_method: 'tls_client_auth',
      tls_client_auth_subject_dn: 'CN=payouts,O=Acme',
    });
    assert.equal(reg.status, 201, reg.text);
    const id = reg.json.client_id as string;
    const withAcme = tlsAgent(acme);
    const withOther = tlsAgent(other);
    try {
      const t = await tokenAt(gwTls, { grant_type: 'client_credentials', client_id: id }, {}, withAcme);
      assert.equal(t.status, 200, t.text);
      assert.equal(payloadOf(t.json.access_token).cnf['x5t#S256'], x5t(acme.cert));
      const path = `/v1/core/accounts/${account}`;
      const auth = { authorization: `Bearer ${t.json.access_token}` };
      assert.equal((await call(gwTls, 'GET', path, { headers: auth, dispatcher: withAcme })).status, 200);
      const plain = await call(issuer, 'GET', path, { headers: auth });
      assert.equal(plain.status, 401, 'without a certificate');
      assert.match(plain.json.message, /bound to a client certificate/);
      const forged = await call(issuer, 'GET', path, {
        headers: {
          ...auth,
          'x-forwarded-client-cert': encodeURIComponent(acme.cert),
          'x-client-certificate': encodeURIComponent(acme.cert),
        },
      });
      assert.equal(forged.status, 401, 'a client-sent certificate header is not a certificate');
      const another = await call(gwTls, 'GET', path, { headers: auth, dispatcher: withOther });
      assert.equal(another.status, 401, 'with another certificate');
      assert.match(another.json.message, /another client certificate/);
      // Authentication itself: another subject, no certificate, a forged header.
      assert.equal(
        (await tokenAt(gwTls, { grant_type: 'client_credentials', client_id: id }, {}, withOther)).json.error,
        'invalid_client',
      );
      assert.equal(
        (await tokenAt(issuer, { grant_type: 'client_credentials', client_id: id })).json.error,
        'invalid_client',
      );
      assert.equal(
        (
          await tokenAt(
            issuer,
            { grant_type: 'client_credentials', client_id: id },
            { 'x-client-certificate': encodeURIComponent(acme.cert) },
          )
        ).json.error,
        'invalid_client',
      );
    } finally {
      await withAcme.close();
      await withOther.close();
    }
  });

  it('mTLS: self_signed_tls_client_auth by thumbprint; the TLS listener refuses a connection without a certificate', async () => {
    const reg = await registerSelfSigned('self');
    assert.equal(reg.status, 201, reg.text);
    const agent = tlsAgent(selfSigned);
    const none = tlsAgent();
    try {
      const t = await tokenAt(
        gwTls,
        { grant_type: 'client_credentials', client_id: reg.json.client_id },
        {},
        agent,
      );
      assert.equal(t.status, 200, t.text);
      await assert.rejects(
        call(gwTls, 'GET', '/v1/health', { dispatcher: none }),
        'no client certificate, no TLS connection',
      );
    } finally {
      await agent.close();
      await none.close();
    }
  });

  it('require_mtls_for_m2m with mtls_trusted_cas: a self-signed client gets no token its every call would be refused', async () => {
    const reg = await registerSelfSigned('self-m2m');
    assert.equal(reg.status, 201, reg.text);
    const fields = { grant_type: 'client_credentials', client_id: reg.json.client_id as string };
    const agent = tlsAgent(selfSigned);
    // The demo tenant lists pki's CA (before); the self-signed certificate is not from it.
    await tdb.db.query(
      `UPDATE tenants SET security = security || '{"require_mtls_for_m2m": true}'::jsonb WHERE id = 'demo'`,
    );
    try {
      const t = await tokenAt(gwTls, fields, {}, agent);
      if (t.status === 200) {
        // What became of such a token: refused on use (once the edge has heard of the setting).
        const auth = { authorization: `Bearer ${t.json.access_token}` };
        const used = await eventually(
          () => call(gwTls, 'GET', `/v1/core/accounts/${account}`, { headers: auth, dispatcher: agent }),
          (r) => r.status !== 200,
        );
        assert.fail(
          `a token was issued (${t.text}); over its own certificate it got ${used.status} ${used.text}`,
        );
      }
      // Every call of such a tenant's machines needs a certificate from a CA it lists (README,
      // SPEC 2.10 require_mtls_for_m2m): the edge and core refuse this one's token on each call,
      // so the token endpoint refuses it too rather than hand out a token that cannot be used.
      assert.equal(t.status, 400, t.text);
      assert.equal(t.json.error, 'unauthorized_client', t.text);
      assert.match(t.json.error_description, /not issued by a CA it trusts/);
    } finally {
      await agent.close();
      await tdb.db.query(`UPDATE tenants SET security = security - 'require_mtls_for_m2m' WHERE id = 'demo'`);
    }
  });
});
