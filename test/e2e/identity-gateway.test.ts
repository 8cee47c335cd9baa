import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call } from '../helpers/http.ts';

/** The newest code the dev SMS inbox (DATA_DIR/dev-sms.jsonl: "that file is the phone") holds for `phone`. */
async function lastCode(dataDir: string, phone: string): Promise<string> {
  const lines = (await readFile(join(dataDir, 'dev-sms.jsonl'), 'utf8'))
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  const mine = lines.filter((l) => l.to === phone);
  const code = mine.at(-1)?.code;
  assert.equal(typeof code, 'string', 'an SMS reached the inbox');
  return code;
}

describe('customer identity through the dev gateway and the edge policy', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let demo: Record<string, any>;
  const phone = '+254700111222';
  const json = { 'content-type': 'application/json' };

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    // A tight public limit so the flood guard shows within a few requests.
    stack = await startStack(config, {
      checkResponses: true,
      checkTimeoutMs: 2000,
      publicRateLimit: { perMinute: 30, burst: 10 },
    });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8'));
  });
  after(async () => {
    await stack.stop();
    await tdb.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  let access = '';
  it('signs a customer up and in: OTP from the dev inbox, PIN, login', async () => {
    assert.equal(
      (await call(gw, 'POST', '/customers/auth/otp/send', { json: { tenantId: 'demo', phone } })).status,
      202,
    );
    const otp = await lastCode(dataDir, phone);
    const verified = await call(gw, 'POST', '/customers/auth/otp/verify', {
      json: { tenantId: 'demo', phone, otp },
    });
    assert.equal(verified.status, 200, verified.text);
    const set = await call(gw, 'POST', '/customers/auth/pin/set', {
      json: { tenantId: 'demo', phone, pin: '4826', verificationToken: verified.json.verificationToken },
    });
    assert.equal(set.status, 204, set.text);
    const login = await call(gw, 'POST', '/customers/auth/login', {
      json: { tenantId: 'demo', phone, pin: '4826' },
    });
    assert.equal(login.status, 200, login.text);
    assert.equal(login.json.aal, 1);
    access = login.json.accessToken;
  });

  it('failed logins of other phones from this address (127.0.0.1) do not lock the customer out of it', async () => {
    for (let i = 0; i < 6; i++) {
      // Client-sent address headers are not believed: every attempt counts for the socket's address.
      const spoof = { 'x-client-ip': `10.9.9.${i}`, 'x-forwarded-for': `10.8.8.${i}` };
      const r = await call(gw, 'POST', '/customers/auth/login', {
        json: { tenantId: 'demo', phone: `+25470022200${i}`, pin: '9137' },
        headers: spoof,
      });
      assert.equal(r.status, 401, r.text);
      assert.equal(r.json.code, 'INVALID_CREDENTIALS');
    }
    const login = await call(gw, 'POST', '/customers/auth/login', {
      json: { tenantId: 'demo', phone, pin: '4826' },
    });
    assert.equal(login.status, 200, login.text);
    const { rows } = await tdb.db.query<{ ip: string; n: number }>(
      `SELECT attrs->>'ip' AS ip, count(*)::int AS n FROM audit_log WHERE tenant_id = 'demo' AND action = 'auth.login' AND attrs->>'outcome' = 'unknown_or_no_pin' GROUP BY 1`,
    );
    assert.equal(rows.length, 1);
    assert.match(rows[0]?.ip ?? '', /^(::ffff:)?127\.0\.0\.1$/);
    assert.equal(rows[0]?.n, 6);
  });

  it('lets the customer list their sessions through the edge; spoofed identity headers change nothing', async () => {
    const r = await call(gw, 'GET', '/customers/sessions', {
      headers: { authorization: `Bearer ${access}`, 'x-tenant-id': 'other', 'x-principal-id': 'someone' },
    });
    assert.equal(r.status, 200, r.text);
    assert.ok(Array.isArray(r.json.sessions ?? r.json));
  });

  it('refuses a bearer route without a token at the edge, with WWW-Authenticate', async () => {
    const r = await call(gw, 'GET', '/customers/sessions');
    assert.equal(r.status, 401);
    assert.match(r.headers['www-authenticate'] ?? '', /^Bearer/);
  });

  it('simulates a decision for ops, refuses ReadOnly and customers', async () => {
    const input = {
      tenant: { id: 'demo' },
      subject: {
        id: 'c1',
        type: 'customer',
        aal: 1,
        tuples: [{ relation: 'member', object_ns: 'tenant', object_id: 'demo', caveat: {} }],
      },
      resource: { type: 'transaction', tenant_id: 'demo' },
      action: 'transfer.create',
      purpose: 'customer.transact',
      context: { ip: '10.0.0.1', risk: 'low', now_ns: 0 },
    };
    const ops = { authorization: `Bearer ${demo.serviceTokens.ops.token}`, ...json };
    const post = await call(gw, 'POST', '/v1/auth/simulate', { json: { input }, headers: ops });
    assert.equal(post.status, 200, post.text);
    assert.equal(post.json.allow, false);
    assert.equal(post.json.code, 'MFA_REQUIRED');
    assert.ok(post.json.reasons.some((r: { check: string; ok: boolean }) => r.check === 'min_aal' && !r.ok));
    const get = await call(
      gw,
      'GET',
      `/v1/auth/simulate?policy_ref=${post.json.policy_version}&input=${encodeURIComponent(JSON.stringify({ input }))}`,
      { headers: ops },
    );
    assert.equal(get.status, 200, get.text);
    assert.deepEqual(get.json.reasons, post.json.reasons);
    const unknownRef = await call(gw, 'POST', '/authz/simulate?policy_ref=nope', {
      json: { input },
      headers: ops,
    });
    assert.equal(unknownRef.status, 404);
    const ro = await call(gw, 'POST', '/v1/auth/simulate', {
      json: { input },
      headers: { authorization: `Bearer ${demo.serviceTokens.readOnly.token}`, ...json },
    });
    assert.equal(ro.status, 403);
    const cust = await call(gw, 'POST', '/v1/auth/simulate', {
      json: { input },
      headers: { authorization: `Bearer ${access}`, ...json },
    });
    assert.equal(cust.status, 401);
  });

  it('refuses the session after logout on the next request', async () => {
    const out = await call(gw, 'POST', '/customers/auth/logout', {
      headers: { authorization: `Bearer ${access}` },
    });
    assert.ok(out.status === 204 || out.status === 200, out.text);
    let status = 0;
    for (let i = 0; i < 50 && status !== 401; i++) {
      status = (
        await call(gw, 'GET', '/customers/sessions', { headers: { authorization: `Bearer ${access}` } })
      ).status;
      if (status !== 401) await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(status, 401);
  });

  it('rate limits unauthenticated routes per source address', async () => {
    let limited: Awaited<ReturnType<typeof call>> | undefined;
    for (let i = 0; i < 40 && !limited; i++) {
      const r = await call(gw, 'POST', '/customers/auth/token/refresh', {
        json: { tenantId: 'demo', refreshToken: 'not-a-token' },
      });
      if (r.status === 429) limited = r;
      else assert.ok(r.status === 400 || r.status === 401, r.text);
    }
    assert.ok(limited, 'a burst is eventually refused');
    assert.equal(limited.json.code, 'RATE_LIMITED');
    assert.ok(Number(limited.headers['retry-after']) >= 1);
  });
});
