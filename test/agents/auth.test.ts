import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { spareBitsSignature } from '../helpers/respell.ts';
import { bearer, startAgentHarness, type AgentHarness, type TestAgent } from './harness.ts';

describe('agent auth: OTP, device bind, login, refresh, logout', () => {
  let h: AgentHarness;
  let a: TestAgent;
  before(async () => {
    h = await startAgentHarness();
    a = await h.agent('ta', 'AG1001', '+254711000001');
  });
  after(() => h.close());

  it('refuses login before a device is bound, with the uniform 401', async () => {
    const d = h.newDevice();
    d.id = '00000000-0000-7000-8000-000000000000';
    const r = await h.post('/v1/agent/auth/login', {
      tenantId: 'ta',
      agentCode: a.code,
      pin: a.pin,
      device: h.proof('agent-login', a, d),
    });
    assert.equal(r.status, 401);
    assert.equal(r.json.code, 'INVALID_CREDENTIALS');
    assert.ok(!r.text.includes(a.pin));
  });

  it('binds a device after an OTP; a used bind token or wrong OTP is refused', async () => {
    await h.post('/v1/agent/auth/otp/request', { tenantId: 'ta', agentCode: a.code });
    const wrong = await h.post('/v1/agent/auth/otp/verify', {
      tenantId: 'ta',
      agentCode: a.code,
      otp: '000000' === h.sms.lastCode(a.phone) ? '111111' : '000000',
    });
    assert.equal(wrong.status, 401);
    assert.equal(wrong.json.code, 'OTP_INVALID');
    const ok = await h.post('/v1/agent/auth/otp/verify', {
      tenantId: 'ta',
      agentCode: a.code,
      otp: h.sms.lastCode(a.phone),
    });
    assert.equal(ok.status, 200, ok.text);
    // A small-order point (the 32 zero bytes, the identity) is no device key; the bind token survives it.
    for (const weak of [Buffer.alloc(32), Buffer.from('01'.padEnd(64, '0'), 'hex')]) {
      const refused = await h.post('/v1/agent/auth/device-bind', {
        tenantId: 'ta',
        agentCode: a.code,
        bindToken: ok.json.bindToken,
        publicKey: weak.toString('base64url'),
      });
      assert.equal(refused.status, 400, refused.text);
      assert.equal(refused.json.code, 'PUBLIC_KEY_INVALID');
    }
    const d = h.newDevice();
    const bound = await h.post('/v1/agent/auth/device-bind', {
      tenantId: 'ta',
      agentCode: a.code,
      bindToken: ok.json.bindToken,
      publicKey: d.publicX,
    });
    assert.equal(bound.status, 201, bound.text);
    const again = await h.post('/v1/agent/auth/device-bind', {
      tenantId: 'ta',
      agentCode: a.code,
      bindToken: ok.json.bindToken,
      publicKey: h.newDevice().publicX,
    });
    assert.equal(again.status, 401);
    d.id = bound.json.deviceId;
    a.device = d;
  });

  it('unknown code, wrong PIN, other device, stale or replayed proof all answer the same 401', async () => {
    const d = a.device!;
    const good = h.proof('agent-login', a, d);
    const other = h.newDevice();
    other.id = d.id;
    const cases = [
      { tenantId: 'ta', agentCode: 'NOPE99', pin: a.pin, device: good },
      { tenantId: 'ta', agentCode: a.code, pin: '9137', device: h.proof('agent-login', a, d, h.clock.t + 1) },
      {
        tenantId: 'ta',
        agentCode: a.code,
        pin: a.pin,
        device: h.proof('agent-login', a, other, h.clock.t + 2),
      },
      {
        tenantId: 'ta',
        agentCode: a.code,
        pin: a.pin,
        device: h.proof('agent-login', a, d, h.clock.t - 10 * 60_000),
      },
      { tenantId: 'tb', agentCode: a.code, pin: a.pin, device: h.proof('agent-login', a, d, h.clock.t + 3) },
    ];
    for (const body of cases) {
      const r = await h.post('/v1/agent/auth/login', body);
      assert.equal(r.status, 401, JSON.stringify(body));
      assert.deepEqual(r.json, { code: 'INVALID_CREDENTIALS', message: 'invalid credentials' });
    }
    const first = await h.post('/v1/agent/auth/login', {
      tenantId: 'ta',
      agentCode: a.code,
      pin: a.pin,
      device: h.proof('agent-login', a, d, h.clock.t + 4),
    });
    assert.equal(first.status, 200, first.text);
    assert.equal(first.json.aal, 2);
    const replay = await h.post('/v1/agent/auth/login', {
      tenantId: 'ta',
      agentCode: a.code,
      pin: a.pin,
      device: h.proof('agent-login', a, d, h.clock.t + 4),
    });
    assert.equal(replay.status, 401, 'a device proof works once');
    const { rows } = await h.tdb.db.query(
      `SELECT count(*)::int AS n FROM audit_log WHERE tenant_id = 'ta' AND action = 'agent.auth.login'`,
    );
    assert.ok((rows[0]?.n ?? 0) >= 7);
    const leaked = await h.tdb.db.query(
      `SELECT count(*)::int AS n FROM audit_log WHERE attrs::text LIKE '%' || $1 || '%'`,
      [a.pin],
    );
    assert.equal(leaked.rows[0]?.n, 0);
  });

  it('locks the agent code after repeated failures', async () => {
    const b = await h.agent('ta', 'AG1002', '+254711000002');
    const d = await h.bind(b);
    let last = 0;
    for (let i = 0; i < 6; i++) {
      const r = await h.post('/v1/agent/auth/login', {
        tenantId: 'ta',
        agentCode: b.code,
        pin: '9137',
        device: h.proof('agent-login', b, d, h.clock.t + 100 + i),
      });
      last = r.status;
    }
    assert.equal(last, 429);
  });

  it('refreshes with rotation and a device proof; replay revokes the session; logout revokes', async () => {
    h.clock.t += 20 * 60_000; // past the device lockout the previous cases earned
    const l = await h.login(a);
    const me = await h.post('/v1/agent/auth/refresh', {
      tenantId: 'ta',
      refreshToken: l.refreshToken,
      device: h.proof('agent-refresh', a, a.device!, h.clock.t + 20),
    });
    assert.equal(me.status, 200, me.text);
    assert.equal(me.json.aal, 2);
    assert.notEqual(me.json.refreshToken, l.refreshToken);
    const noProof = await h.post('/v1/agent/auth/refresh', {
      tenantId: 'ta',
      refreshToken: me.json.refreshToken,
      device: h.proof('agent-login', a, a.device!, h.clock.t + 21),
    });
    assert.equal(noProof.status, 401, 'a login proof is not a refresh proof');
    const replay = await h.post('/v1/agent/auth/refresh', {
      tenantId: 'ta',
      refreshToken: l.refreshToken,
      device: h.proof('agent-refresh', a, a.device!, h.clock.t + 22),
    });
    assert.equal(replay.status, 401);
    const after = await h.post('/v1/agent/auth/logout', {}, bearer(me.json.accessToken));
    assert.equal(after.status, 401, 'the session was revoked by the replay');
    h.clock.t += 1000; // a new proof (Ed25519 signatures are deterministic: same timestamp = replay)
    const l2 = await h.login(a);
    assert.equal((await h.post('/v1/agent/auth/logout', {}, bearer(l2.accessToken))).status, 204);
    assert.equal((await h.post('/v1/agent/auth/logout', {}, bearer(l2.accessToken))).status, 401);
  });

  it('a captured device proof replayed with its signature spelled otherwise (spare bits set) is refused too', async () => {
    h.clock.t += 20 * 60_000; // past the lockout the previous cases earned
    const d = a.device!;
    const proof = h.proof('agent-login', a, d);
    const body = { tenantId: 'ta', agentCode: a.code, pin: a.pin, device: proof };
    const first = await h.post('/v1/agent/auth/login', body);
    assert.equal(first.status, 200, first.text);
    // 86 characters carry 64 bytes and 4 bits more: the same signature, another text.
    const respelled = spareBitsSignature(proof.signature);
    assert.notEqual(respelled, proof.signature);
    assert.deepEqual(Buffer.from(respelled, 'base64url'), Buffer.from(proof.signature, 'base64url'));
    const replay = await h.post('/v1/agent/auth/login', {
      ...body,
      device: { ...proof, signature: respelled },
    });
    assert.equal(replay.status, 401, `a device proof works once, whatever its spelling: ${replay.text}`);
    assert.deepEqual(replay.json, { code: 'INVALID_CREDENTIALS', message: 'invalid credentials' });
  });
});
