/**
 * Issue 14 items 1–2 through the dev gateway against a real OpenID Connect provider
 * (oidc-provider on 127.0.0.1, port 0; the stack's SSRF guard allows loopback in this test only):
 * the tenant's provider configured through the admin API (secret sealed, never returned),
 * authorization code + PKCE + state + nonce, the member matched and their groups mapped to
 * roles, AAL from the provider's amr/acr, and every bad input of issue 14's federation list.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { callRetrying } from '../helpers/gateway.ts';
import type { Res } from '../helpers/http.ts';
import { addStaff } from '../staff/fixtures.ts';
import { startTestIdp, type TestIdp } from '../staff/idp.ts';

describe('federated staff sign-in', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let idp: TestIdp;
  let serviceAdmin: string;

  const admin = (method: string, path: string, json?: unknown): Promise<Res> =>
    callRetrying(gw, method, path, {
      ...(json !== undefined ? { json } : {}),
      headers: {
        authorization: `Bearer ${serviceAdmin}`,
        'x-request-id': randomUUID(),
        'idempotency-key': `idp-${randomUUID()}`,
      },
    });
  const begin = async (): Promise<string> => {
    const r = await callRetrying(gw, 'POST', '/auth/login', {
      json: { tenantId: 'demo', method: 'federation' },
    });
    assert.equal(r.status, 200, r.text);
    return r.json.authorizationUrl as string;
  };
  const callback = (query: Record<string, string>): Promise<Res> =>
    callRetrying(gw, 'GET', `/auth/callback?${new URLSearchParams(query)}`);
  const signIn = async (): Promise<Res> => callback(await idp.authorize(await begin()));
  const sessionsOf = async (userId: string): Promise<number> =>
    Number(
      (
        await tdb.db.query<{ n: string }>(
          `SELECT count(*) AS n FROM sessions WHERE subject_type = 'user' AND subject_id = $1`,
          [userId],
        )
      ).rows[0]?.n,
    );

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-staff-fed-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    stack = await startStack(config, { checkTimeoutMs: 3000, webhookAllowPrivateTargets: true });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    idp = await startTestIdp(`${gw}/auth/callback`);
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as {
      serviceTokens: { admin: { token: string } };
    };
    serviceAdmin = demo.serviceTokens.admin.token;
    await tdb.db.query(
      `INSERT INTO staff_group_mappings (tenant_id, idp_group, role) VALUES ('demo', 'payments-admins', 'admin'), ('demo', 'payments-ops', 'ops')`,
    );
  });
  after(async () => {
    await idp?.close();
    await stack?.stop();
    await tdb?.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('an Admin configures the provider: discovery fetched, the secret sealed and never returned, audited', async () => {
    const before = await callRetrying(gw, 'POST', '/auth/login', {
      json: { tenantId: 'demo', method: 'federation' },
    });
    assert.equal(before.status, 404, 'no provider yet');
    const put = await admin('PUT', '/v1/identity-provider', {
      issuer: idp.issuer,
      clientId: idp.clientId,
      clientSecret: idp.clientSecret,
      redirectUri: `${gw}/auth/callback`,
    });
    assert.equal(put.status, 200, put.text);
    assert.equal(put.json.hasClientSecret, true);
    assert.ok(!put.text.includes(idp.clientSecret));
    const get = await admin('GET', '/v1/identity-provider');
    assert.equal(get.status, 200, get.text);
    assert.equal(get.json.issuer, idp.issuer);
    assert.deepEqual(get.json.scopes, ['openid', 'profile', 'email']);
    assert.ok(!get.text.includes(idp.clientSecret));
    const stored = await tdb.db.query<{ client_secret_enc: Buffer }>(
      `SELECT client_secret_enc FROM staff_identity_providers WHERE tenant_id = 'demo'`,
    );
    assert.ok(
      !stored.rows[0]?.client_secret_enc.toString('latin1').includes(idp.clientSecret),
      'sealed at rest',
    );
    const audit = await tdb.db.query<{ attrs: unknown }>(
      `SELECT attrs FROM audit_log WHERE tenant_id = 'demo' AND action = 'identity_provider.put'`,
    );
    assert.equal(audit.rows.length, 1);
    assert.ok(!JSON.stringify(audit.rows[0]?.attrs).includes(idp.clientSecret));
  });

  it('a provider at a cloud metadata address is refused, whatever the private-target setting', async () => {
    const r = await admin('PUT', '/v1/identity-provider', {
      issuer: 'http://169.254.169.254/latest',
      clientId: 'x',
      clientSecret: 'y',
      redirectUri: `${gw}/auth/callback`,
    });
    assert.equal(r.status, 422, r.text);
    assert.equal(r.json.code, 'IDP_INVALID');
    assert.equal(
      (await admin('GET', '/v1/identity-provider')).json.issuer,
      idp.issuer,
      'the configuration is unchanged',
    );
  });

  it('signs a provisioned member in by sub → externalId, maps groups to roles, AAL 1 without MFA; the token works at the edge', async () => {
    const id = await addStaff(tdb.db, 'demo', 'grace@demo.example', ['readonly'], 'idp-sub-grace');
    idp.nextAccount = {
      sub: 'idp-sub-grace',
      preferred_username: 'someone-else',
      groups: ['payments-admins', 'unknown-group'],
      amr: ['pwd'],
    };
    const r = await signIn();
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.aal, 1);
    const roles = await tdb.db.query<{ role: string }>(
      'SELECT role FROM staff_user_roles WHERE user_id = $1',
      [id],
    );
    assert.deepEqual(
      roles.rows.map((x) => x.role),
      ['admin'],
      "the provider's groups replace the roles",
    );
    const use = await callRetrying(gw, 'PUT', '/v1/flags/fed_flag', {
      json: { enabled: true },
      headers: {
        authorization: `Bearer ${r.json.accessToken}`,
        'x-request-id': randomUUID(),
        'idempotency-key': 'fed-flag-00001',
      },
    });
    assert.ok(use.status === 200 || use.status === 201, use.text);
    const refreshed = await callRetrying(gw, 'POST', '/auth/token', {
      json: { tenantId: 'demo', refreshToken: r.json.refreshToken },
    });
    assert.equal(refreshed.status, 200, refreshed.text);
  });

  it('AAL 2 when the provider asserts MFA (amr or acr); matches by preferred_username when sub is unknown', async () => {
    await addStaff(tdb.db, 'demo', 'hopper@demo.example', ['ops']);
    idp.nextAccount = {
      sub: 'idp-sub-hopper',
      preferred_username: 'Hopper@demo.example',
      amr: ['pwd', 'otp'],
    };
    const r = await signIn();
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.aal, 2);
    idp.nextAccount = { sub: 'idp-sub-hopper', preferred_username: 'hopper@demo.example', acr: 'mfa' };
    assert.equal((await signIn()).json.aal, 2);
  });

  it('refuses an account that is not an active staff member of the tenant', async () => {
    idp.nextAccount = { sub: 'idp-sub-stranger', preferred_username: 'stranger@demo.example' };
    const r = await signIn();
    assert.equal(r.status, 403, r.text);
    assert.equal(r.json.code, 'STAFF_NOT_PROVISIONED');
    const id = await addStaff(tdb.db, 'demo', 'left@demo.example', ['admin']);
    await tdb.db.query('UPDATE staff_users SET active = false WHERE id = $1', [id]);
    idp.nextAccount = { sub: 'idp-sub-left', preferred_username: 'left@demo.example' };
    assert.equal((await signIn()).status, 403);
    assert.equal(await sessionsOf(id), 0);
  });

  for (const tamper of [
    'bad_signature',
    'garbled_signature',
    'padded_signature',
    'spare_bits_signature',
    'wrong_audience',
    'wrong_nonce',
    'expired',
  ] as const) {
    it(`refuses an ID token with ${tamper.replaceAll('_', ' ')}`, async () => {
      const id = await addStaff(tdb.db, 'demo', `${tamper}@demo.example`, ['admin']);
      idp.nextAccount = { sub: `idp-sub-${tamper}`, preferred_username: `${tamper}@demo.example` };
      const query = await idp.authorize(await begin());
      idp.tamper = tamper;
      const r = await callback(query);
      assert.equal(r.status, 401, r.text);
      assert.equal(r.json.code, 'FEDERATION_FAILED');
      assert.equal(await sessionsOf(id), 0);
    });
  }

  it('a provider that does not answer the token request is 502 IDP_UNREACHABLE, not a refused sign-in', async () => {
    const id = await addStaff(tdb.db, 'demo', 'down@demo.example', ['ops']);
    idp.nextAccount = { sub: 'idp-sub-down', preferred_username: 'down@demo.example' };
    const refusals = async () =>
      (
        await tdb.db.query(
          `SELECT 1 FROM audit_log WHERE tenant_id = 'demo' AND action = 'auth.staff_login' AND attrs->>'outcome' LIKE 'id_token_or_code_refused%'`,
        )
      ).rows.length;
    const before = await refusals();
    const query = await idp.authorize(await begin());
    idp.tamper = 'unavailable';
    const r = await callback(query);
    assert.equal(r.status, 502, r.text);
    assert.equal(r.json.code, 'IDP_UNREACHABLE');
    assert.equal(await sessionsOf(id), 0);
    assert.equal(await refusals(), before, 'no record says the code or ID token was refused');
    // The person starts again and signs in.
    assert.equal((await signIn()).status, 200);
  });

  it('a state is single use: the same callback again is refused', async () => {
    await addStaff(tdb.db, 'demo', 'replay@demo.example', ['ops']);
    idp.nextAccount = { sub: 'idp-sub-replay', preferred_username: 'replay@demo.example' };
    const query = await idp.authorize(await begin());
    assert.equal((await callback(query)).status, 200);
    const again = await callback(query);
    assert.equal(again.status, 401, again.text);
    assert.equal(again.json.code, 'FEDERATION_FAILED');
    assert.equal((await callback({ code: 'x', state: 'never-issued' })).status, 401);
    assert.equal((await callback({})).status, 401);
  });

  it('PKCE: a code obtained for another sign-in, or an authorization request without a code challenge, is refused', async () => {
    const id = await addStaff(tdb.db, 'demo', 'pkce@demo.example', ['ops']);
    idp.nextAccount = { sub: 'idp-sub-pkce', preferred_username: 'pkce@demo.example' };
    const a = await idp.authorize(await begin());
    const b = await idp.authorize(await begin());
    const swapped = await callback({ ...b, code: a.code ?? '' });
    assert.equal(swapped.status, 401, swapped.text);
    const withoutChallenge = new URL(await begin());
    withoutChallenge.searchParams.delete('code_challenge');
    withoutChallenge.searchParams.delete('code_challenge_method');
    const refused = await idp.authorize(withoutChallenge.href);
    assert.equal(refused.error, 'invalid_request', 'the provider requires PKCE');
    assert.equal((await callback(refused)).status, 401);
    assert.equal(await sessionsOf(id), 0);
  });
});
