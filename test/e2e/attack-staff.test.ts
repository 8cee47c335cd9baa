/**
 * Attacks on staff identity through the dev gateway (issues 14, 16, 17): each case is a hole
 * found by trying it from outside, kept so it stays closed.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import type { KeyStore } from '../../core/keys/keys.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { dpopCall, dpopKey } from '../helpers/dpop.ts';
import { callRetrying } from '../helpers/gateway.ts';
import type { Res } from '../helpers/http.ts';
import { addStaff, signIn, stackKeys } from '../staff/fixtures.ts';
import { federatedSignIn, providerSettings, startTestIdp, type TestIdp } from '../staff/idp.ts';

describe('attacks on staff identity', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let keys: KeyStore;
  let idp: TestIdp | undefined;

  const bearer = (token: string, method: string, path: string, json?: unknown): Promise<Res> =>
    callRetrying(gw, method, path, {
      headers: {
        authorization: `Bearer ${token}`,
        'x-request-id': randomUUID(),
        ...(json === undefined ? {} : { 'idempotency-key': randomUUID() }),
      },
      ...(json === undefined ? {} : { json }),
    });

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-attack-staff-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    // The test identity provider listens on loopback: the SSRF guard allows it in this test only.
    stack = await startStack(config, { checkTimeoutMs: 3000, webhookAllowPrivateTargets: true });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    keys = await stackKeys(tdb.db, dataDir);
  });
  after(async () => {
    await idp?.close();
    await stack?.stop();
    await tdb?.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  /** A staff member whose refresh bound the session to a DPoP key: the access token carries cnf.jkt. */
  async function boundStaffToken(email: string) {
    const id = await addStaff(tdb.db, 'demo', email, ['admin']);
    const first = await signIn(tdb.db, keys, 'demo', id);
    const key = await dpopKey();
    const pop = dpopCall(key);
    const r = await pop(gw, 'POST', '/auth/token', {
      json: { tenantId: 'demo', refreshToken: first.refreshToken },
    });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.tokenType, 'DPoP');
    return { pop, token: r.json.accessToken as string };
  }

  it('a DPoP-bound staff access token is refused as a plain bearer on staff routes at the edge (downgrade)', async () => {
    const { pop, token } = await boundStaffToken('bound-edge@demo.example');
    const withProof = await pop(gw, 'GET', '/v1/countries', { headers: { authorization: `DPoP ${token}` } });
    assert.equal(withProof.status, 200, withProof.text);
    const stolen = await bearer(token, 'GET', '/v1/countries');
    assert.equal(stolen.status, 401, stolen.text);
    const schemeOnly = await callRetrying(gw, 'GET', '/v1/countries', {
      headers: { authorization: `DPoP ${token}` },
    });
    assert.equal(schemeOnly.status, 401, schemeOnly.text);
  });

  it("a DPoP-bound staff access token is refused as a plain bearer on the signed-in person's routes in core", async () => {
    const { pop, token } = await boundStaffToken('bound-core@demo.example');
    const withProof = await pop(gw, 'GET', '/auth/passkeys', { headers: { authorization: `DPoP ${token}` } });
    assert.equal(withProof.status, 200, withProof.text);
    const stolen = await bearer(token, 'GET', '/auth/passkeys');
    assert.equal(stolen.status, 401, stolen.text);
    const logout = await bearer(token, 'POST', '/auth/logout', {});
    assert.equal(logout.status, 401, logout.text);
  });

  it('an Admin at AAL 1 (a stolen federated session) cannot replace the identity provider or map IdP groups to roles without a step-up', async () => {
    const id = await addStaff(tdb.db, 'demo', 'aal1-admin@demo.example', ['admin']);
    const low = (await signIn(tdb.db, keys, 'demo', id)).accessToken;
    const idp = await bearer(low, 'PUT', '/v1/identity-provider', {
      issuer: 'https://idp.attacker.example',
      clientId: 'x',
      clientSecret: 'y',
      redirectUri: `${gw}/auth/callback`,
    });
    assert.equal(idp.status, 403, idp.text);
    assert.equal(idp.json.code, 'MFA_REQUIRED');
    const map = await bearer(low, 'PUT', '/v1/staff/group-mappings', {
      items: [{ idp_group: 'everyone', role: 'admin' }],
    });
    assert.equal(map.status, 403, map.text);
    assert.equal(map.json.code, 'MFA_REQUIRED');
    assert.equal(
      (
        await tdb.db.query(
          `SELECT 1 FROM staff_group_mappings WHERE tenant_id = 'demo' AND idp_group = 'everyone'`,
        )
      ).rows.length,
      0,
    );
  });

  it('an account of the provider cannot sign in as a member provisioned for another subject by claiming their userName', async () => {
    const provider = await startTestIdp(`${gw}/auth/callback`);
    idp = provider;
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as {
      serviceTokens: { admin: { token: string } };
    };
    const put = await callRetrying(gw, 'PUT', '/v1/identity-provider', {
      json: providerSettings(provider, gw),
      headers: {
        authorization: `Bearer ${demo.serviceTokens.admin.token}`,
        'x-request-id': randomUUID(),
        'idempotency-key': randomUUID(),
      },
    });
    assert.equal(put.status, 200, put.text);
    const signInAs = (account: TestIdp['nextAccount']): Promise<Res> =>
      federatedSignIn(gw, provider, account);
    const boss = await addStaff(tdb.db, 'demo', 'boss@demo.example', ['admin'], 'idp-sub-boss');
    const own = await signInAs({ sub: 'idp-sub-boss', preferred_username: 'boss@demo.example' });
    assert.equal(own.status, 200, own.text);
    const sessions = async () =>
      (await tdb.db.query(`SELECT 1 FROM sessions WHERE subject_id = $1`, [boss])).rows.length;
    const before = await sessions();
    const byName = await signInAs({ sub: 'idp-sub-mallory', preferred_username: 'boss@demo.example' });
    assert.equal(byName.status, 403, byName.text);
    const byEmail = await signInAs({ sub: 'idp-sub-mallory', email: 'BOSS@demo.example' });
    assert.equal(byEmail.status, 403, byEmail.text);
    assert.equal(await sessions(), before, 'no session was started for the member');
  });
});
