import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import type { KeyStore } from '../../core/keys/keys.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { dpopCall, dpopKey, proof } from '../helpers/dpop.ts';
import { call } from '../helpers/http.ts';
import { addStaff, signIn, stackKeys } from '../staff/fixtures.ts';

/**
 * Attacks on proof of possession through the gateway (issue 17): a bound token must never work
 * as a plain bearer token, whoever it was issued to.
 */
describe('attack: proof of possession', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let keys: KeyStore;

  const payload = (jwt: string) =>
    JSON.parse(Buffer.from(jwt.split('.')[1] ?? '', 'base64url').toString('utf8'));

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-attack-pop-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    stack = await startStack(config, { checkTimeoutMs: 3000 });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    keys = await stackKeys(tdb.db, dataDir);
  });
  after(async () => {
    await stack?.stop();
    await tdb?.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('a staff access token bound by a DPoP refresh is refused as a Bearer token and without its proof', async () => {
    const id = await addStaff(tdb.db, 'demo', 'pop@demo.example', ['ops']);
    const first = await signIn(tdb.db, keys, 'demo', id);
    const key = await dpopKey('ES256');
    const bound = await dpopCall(key)(gw, 'POST', '/auth/token', {
      json: { tenantId: 'demo', refreshToken: first.refreshToken },
    });
    assert.equal(bound.status, 200, bound.text);
    assert.equal(bound.json.tokenType, 'DPoP');
    const token = bound.json.accessToken as string;
    assert.deepEqual(payload(token).cnf, { jkt: key.jkt });
    const ok = await dpopCall(key)(gw, 'GET', '/v1/countries', {
      headers: { authorization: `DPoP ${token}` },
    });
    assert.equal(ok.status, 200, `with its proof: ${ok.text}`);
    for (const authorization of [`Bearer ${token}`, `DPoP ${token}`]) {
      const stolen = await call(gw, 'GET', '/v1/countries', { headers: { authorization } });
      assert.equal(stolen.status, 401, `${authorization.split(' ')[0]} without a proof: ${stolen.text}`);
      assert.equal(stolen.json.code, 'invalid_dpop_proof', 'the edge');
    }
    const other = await dpopKey();
    const wrongKey = await call(gw, 'GET', '/v1/countries', {
      headers: {
        authorization: `DPoP ${token}`,
        dpop: await proof(other, 'GET', `${gw}/v1/countries`, { accessToken: token }),
      },
    });
    assert.equal(wrongKey.status, 401, wrongKey.text);
  });

  it('a DPoP-bound staff token is refused without its proof on the staff routes core checks itself (sessions, passkeys, sign-out)', async () => {
    const id = await addStaff(tdb.db, 'demo', 'pop2@demo.example', ['ops']);
    const first = await signIn(tdb.db, keys, 'demo', id);
    const key = await dpopKey('EdDSA');
    const send = dpopCall(key);
    const bound = await send(gw, 'POST', '/auth/token', {
      json: { tenantId: 'demo', refreshToken: first.refreshToken },
    });
    assert.equal(bound.status, 200, bound.text);
    const token = bound.json.accessToken as string;
    for (const path of ['/auth/sessions', '/auth/passkeys']) {
      for (const authorization of [`Bearer ${token}`, `DPoP ${token}`]) {
        const stolen = await call(gw, 'GET', path, { headers: { authorization } });
        assert.equal(
          stolen.status,
          401,
          `${path} ${authorization.split(' ')[0]} without a proof: ${stolen.text}`,
        );
        // Core checks these itself, and answers the edge's code for the same refusal.
        assert.equal(stolen.json.code, 'invalid_dpop_proof', `${path}: ${stolen.text}`);
      }
      const other = await call(gw, 'GET', path, {
        headers: {
          authorization: `DPoP ${token}`,
          dpop: await proof(await dpopKey(), 'GET', `${gw}${path}`, { accessToken: token }),
        },
      });
      assert.equal(other.status, 401, `${path} with another key's proof: ${other.text}`);
      assert.equal(other.json.code, 'invalid_dpop_proof', `${path}: ${other.text}`);
      const ok = await send(gw, 'GET', path, { headers: { authorization: `DPoP ${token}` } });
      assert.equal(ok.status, 200, `${path} with its proof: ${ok.text}`);
    }
    const logout = await call(gw, 'POST', '/auth/logout', { headers: { authorization: `Bearer ${token}` } });
    assert.equal(logout.status, 401, `sign-out without a proof: ${logout.text}`);
    // An unbound staff token keeps working as a Bearer token.
    const plain = await signIn(tdb.db, keys, 'demo', id);
    assert.equal(
      (await call(gw, 'GET', '/auth/sessions', { headers: { authorization: `Bearer ${plain.accessToken}` } }))
        .status,
      200,
    );
  });

  it('a staff session idle past the tenant timeout is over on the routes core checks itself too', async () => {
    const id = await addStaff(tdb.db, 'demo', 'idle@demo.example', ['ops']);
    const t = await signIn(tdb.db, keys, 'demo', id);
    const sessions = () =>
      call(gw, 'GET', '/auth/sessions', { headers: { authorization: `Bearer ${t.accessToken}` } });
    assert.equal((await sessions()).status, 200);
    // The edge passes /auth/sessions to core unchecked: core judges the idle timeout (30 minutes
    // by default) on the last-seen the edge writes.
    await tdb.db.query(
      `UPDATE sessions SET last_seen = now() - interval '2 hours' WHERE tenant_id = 'demo' AND subject_id = $1`,
      [id],
    );
    const idle = await sessions();
    assert.equal(idle.status, 401, idle.text);
    assert.equal(idle.json.code, 'session_expired');
  });
});
