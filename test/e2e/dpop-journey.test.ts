import assert from 'node:assert/strict';
import { createPrivateKey, randomUUID, sign, type JsonWebKey } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { proofMessage } from '../../core/agents/device.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { dpopCall, dpopKey, proof, type DpopKey } from '../helpers/dpop.ts';
import { call } from '../helpers/http.ts';
import { journey, type Customer, type Demo, type Journey } from '../helpers/journey.ts';

/**
 * Issue 17 item 3, through the gateway: on a tenant with `require_dpop` the whole customer
 * journey (login, payee, transfer with step-up, confirm, refresh) works with DPoP proofs, the
 * tokens are bound (`cnf.jkt`, `tokenType: DPoP`), and every bad proof is refused with
 * `WWW-Authenticate: DPoP` (RFC 9449 §7.1).
 */
describe('DPoP for customers through the gateway (require_dpop)', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let demo: Demo & {
    agent: {
      tenantId: string;
      agentCode: string;
      pin: string;
      deviceId: string;
      devicePrivateJwk: JsonWebKey;
    };
  };
  let aliceKey: DpopKey;
  let j: Journey;
  let alice: Customer;
  let bob: Customer;
  const pin = '4826';

  const login = (send: typeof call, phone: string, headers: Record<string, string> = {}) =>
    send(gw, 'POST', '/customers/auth/login', {
      json: { tenantId: 'demo', phone, pin },
      headers: { 'x-device-id': alice.device, ...headers },
    });
  const payload = (jwt: string) =>
    JSON.parse(Buffer.from(jwt.split('.')[1] ?? '', 'base64url').toString('utf8'));

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-dpop-'));
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
    demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8'));
    await tdb.db.query(
      `UPDATE tenants SET security = security || '{"require_dpop": true}' WHERE id = 'demo'`,
    );
    aliceKey = await dpopKey('ES256');
    j = journey(gw, dataDir, tdb.db, demo, { call: dpopCall(aliceKey) });
    alice = await j.signUp('+254711100001');
    bob = await journey(gw, dataDir, tdb.db, demo, { call: dpopCall(await dpopKey('EdDSA')) }).signUp(
      '+254711100002',
    );
  });
  after(async () => {
    await stack.stop();
    await tdb.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('refuses a sign-in without a proof with a clear code and a DPoP challenge', async () => {
    const r = await login(call, alice.phone);
    assert.equal(r.status, 401, r.text);
    assert.equal(r.json.code, 'DPOP_REQUIRED');
    assert.match(
      r.headers['www-authenticate'] ?? '',
      /^DPoP algs="EdDSA ES256 PS256", error="invalid_dpop_proof"/,
    );
  });

  it('binds the tokens to the key: cnf.jkt, tokenType DPoP', async () => {
    const r = await login(dpopCall(aliceKey), alice.phone);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.tokenType, 'DPoP');
    assert.deepEqual(payload(r.json.accessToken).cnf, { jkt: aliceKey.jkt });
  });

  it('moves money with proofs: payee, transfer with step-up, confirm; the AAL 2 token is bound too', async () => {
    const payee = await j.addPayee(alice, bob.phone, 'Bob');
    assert.equal(payee.status, 201, payee.text);
    await j.fund(alice.wallet, '500.00');
    const t = await j.transfer(alice, payee.json.id, '100.00', 'otp');
    assert.equal(t.first.json.code, 'MFA_REQUIRED');
    assert.equal(t.final.status, 200, t.final.text);
    assert.deepEqual(payload(t.token).cnf, { jkt: aliceKey.jkt });
    const send = dpopCall(aliceKey);
    const confirm = await send(gw, 'POST', '/v1/transfers/confirm', {
      json: { transferId: t.final.json.id },
      headers: { ...j.bearer(alice, t.token), 'idempotency-key': `cf-${randomUUID()}` },
    });
    assert.equal(confirm.status, 200, confirm.text);
    assert.equal(confirm.json.status, 'POSTED');
  });

  it('refreshes only with a proof by the bound key', async () => {
    const send = dpopCall(aliceKey);
    const first = await login(send, alice.phone);
    const other = await dpopKey();
    const stolen = await dpopCall(other)(gw, 'POST', '/customers/auth/token/refresh', {
      json: { tenantId: 'demo', refreshToken: first.json.refreshToken },
    });
    assert.equal(stolen.status, 401, stolen.text);
    assert.match(stolen.headers['www-authenticate'] ?? '', /^DPoP .*error="invalid_dpop_proof"/);
    const bare = await call(gw, 'POST', '/customers/auth/token/refresh', {
      json: { tenantId: 'demo', refreshToken: first.json.refreshToken },
    });
    assert.equal(bare.status, 401, bare.text);
    const ok = await send(gw, 'POST', '/customers/auth/token/refresh', {
      json: { tenantId: 'demo', refreshToken: first.json.refreshToken },
    });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.tokenType, 'DPoP');
    assert.deepEqual(payload(ok.json.accessToken).cnf, { jkt: aliceKey.jkt });
    const accounts = await send(gw, 'GET', '/v1/accounts', {
      headers: { authorization: `DPoP ${ok.json.accessToken}`, 'x-device-id': alice.device },
    });
    assert.equal(accounts.status, 200, accounts.text);
  });

  it('refuses a bound token without its proof, as Bearer, or with a bad proof', async () => {
    const token = (await login(dpopCall(aliceKey), alice.phone)).json.accessToken as string;
    const url = `${gw}/v1/accounts`;
    const other = await dpopKey();
    const iat = Math.floor(Date.now() / 1000);
    const cases: [string, Record<string, string>][] = [
      ['no proof', { authorization: `DPoP ${token}` }],
      [
        'Bearer scheme',
        { authorization: `Bearer ${token}`, dpop: await proof(aliceKey, 'GET', url, { accessToken: token }) },
      ],
      [
        'another key',
        { authorization: `DPoP ${token}`, dpop: await proof(other, 'GET', url, { accessToken: token }) },
      ],
      [
        'wrong htm',
        {
          authorization: `DPoP ${token}`,
          dpop: await proof(aliceKey, 'GET', url, { accessToken: token, htm: 'POST' }),
        },
      ],
      [
        'wrong htu',
        {
          authorization: `DPoP ${token}`,
          dpop: await proof(aliceKey, 'GET', url, { accessToken: token, htu: `${gw}/v1/transfers` }),
        },
      ],
      [
        'stale iat',
        {
          authorization: `DPoP ${token}`,
          dpop: await proof(aliceKey, 'GET', url, { accessToken: token, iatS: iat - 600 }),
        },
      ],
      ['no ath', { authorization: `DPoP ${token}`, dpop: await proof(aliceKey, 'GET', url) }],
      [
        'wrong typ',
        {
          authorization: `DPoP ${token}`,
          dpop: await proof(aliceKey, 'GET', url, { accessToken: token, typ: 'JWT' }),
        },
      ],
    ];
    for (const [name, headers] of cases) {
      const r = await call(gw, 'GET', '/v1/accounts', {
        headers: { ...headers, 'x-device-id': alice.device },
      });
      assert.equal(r.status, 401, `${name}: ${r.text}`);
      assert.equal(r.json.code, 'invalid_dpop_proof', name);
      assert.match(
        r.headers['www-authenticate'] ?? '',
        /^DPoP algs="EdDSA ES256 PS256", error="invalid_dpop_proof"/,
        name,
      );
    }
    const once = await proof(aliceKey, 'GET', url, { accessToken: token });
    assert.equal(
      (
        await call(gw, 'GET', '/v1/accounts', {
          headers: { authorization: `DPoP ${token}`, dpop: once, 'x-device-id': alice.device },
        })
      ).status,
      200,
    );
    const replayed = await call(gw, 'GET', '/v1/accounts', {
      headers: { authorization: `DPoP ${token}`, dpop: once, 'x-device-id': alice.device },
    });
    assert.equal(replayed.status, 401, 'a replayed proof jti is refused');
    assert.match(replayed.json.message, /replayed/);
  });

  it('refuses sign-in proofs with a wrong htu or a replayed jti', async () => {
    const url = `${gw}/customers/auth/login`;
    const wrongHtu = await login(call, alice.phone, {
      dpop: await proof(aliceKey, 'POST', `${gw}/customers/auth/otp/send`),
    });
    assert.equal(wrongHtu.status, 401, wrongHtu.text);
    assert.equal(wrongHtu.json.code, 'DPOP_PROOF_INVALID');
    const p = await proof(aliceKey, 'POST', url);
    assert.equal((await login(call, alice.phone, { dpop: p })).status, 200);
    const again = await login(call, alice.phone, { dpop: p });
    assert.equal(again.status, 401, again.text);
    assert.equal(again.json.code, 'DPOP_PROOF_INVALID');
  });

  it('agents: the same rule: sign-in refused without a proof, bound with one, refresh only by the same key', async () => {
    const a = demo.agent;
    const deviceKey = createPrivateKey({ key: a.devicePrivateJwk, format: 'jwk' });
    const device = (purpose: 'agent-login' | 'agent-refresh') => {
      const timestamp = String(Date.now());
      return {
        deviceId: a.deviceId,
        timestamp,
        signature: sign(
          null,
          Buffer.from(proofMessage(purpose, a.tenantId, a.agentCode, a.deviceId, timestamp)),
          deviceKey,
        ).toString('base64url'),
      };
    };
    const body = () => ({
      tenantId: a.tenantId,
      agentCode: a.agentCode,
      pin: a.pin,
      device: device('agent-login'),
    });
    const refused = await call(gw, 'POST', '/v1/agent/auth/login', { json: body() });
    assert.equal(refused.status, 401, refused.text);
    assert.equal(refused.json.code, 'DPOP_REQUIRED');
    const key = await dpopKey('EdDSA');
    const send = dpopCall(key);
    const r = await send(gw, 'POST', '/v1/agent/auth/login', { json: body() });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.tokenType, 'DPoP');
    assert.deepEqual(payload(r.json.accessToken).cnf, { jkt: key.jkt });
    const headers = { authorization: `DPoP ${r.json.accessToken}`, 'x-device-id': a.deviceId };
    assert.equal((await send(gw, 'GET', '/v1/float', { headers })).status, 200);
    assert.equal((await call(gw, 'GET', '/v1/float', { headers })).status, 401, 'not without its proof');
    const stolen = await dpopCall(await dpopKey())(gw, 'POST', '/v1/agent/auth/refresh', {
      json: { tenantId: a.tenantId, refreshToken: r.json.refreshToken, device: device('agent-refresh') },
    });
    assert.equal(stolen.status, 401, stolen.text);
    assert.equal(stolen.json.code, 'DPOP_PROOF_INVALID');
    const ok = await send(gw, 'POST', '/v1/agent/auth/refresh', {
      json: { tenantId: a.tenantId, refreshToken: r.json.refreshToken, device: device('agent-refresh') },
    });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.tokenType, 'DPoP');
  });

  it('asks for a server nonce when the tenant requires one, and accepts the proof that carries it', async () => {
    await tdb.db.query(
      `UPDATE tenants SET security = security || '{"require_dpop_nonce": true}' WHERE id = 'demo'`,
    );
    try {
      const first = await login(call, alice.phone, {
        dpop: await proof(aliceKey, 'POST', `${gw}/customers/auth/login`),
      });
      assert.equal(first.status, 401, first.text);
      assert.equal(first.json.code, 'DPOP_NONCE_REQUIRED');
      assert.match(first.headers['www-authenticate'] ?? '', /error="use_dpop_nonce"/);
      const nonce = first.headers['dpop-nonce'];
      assert.ok(nonce);
      const bad = await login(call, alice.phone, {
        dpop: await proof(aliceKey, 'POST', `${gw}/customers/auth/login`, { nonce: 'not-a-nonce' }),
      });
      assert.equal(bad.json.code, 'DPOP_NONCE_REQUIRED');
      const ok = await login(call, alice.phone, {
        dpop: await proof(aliceKey, 'POST', `${gw}/customers/auth/login`, { nonce }),
      });
      assert.equal(ok.status, 200, ok.text);
    } finally {
      await tdb.db.query(`UPDATE tenants SET security = security - 'require_dpop_nonce' WHERE id = 'demo'`);
    }
  });
});
