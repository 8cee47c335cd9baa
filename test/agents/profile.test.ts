import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { deriveCapabilities } from '../../core/agents/capabilities.ts';
import { call } from '../helpers/http.ts';
import { bearer, startAgentHarness, type AgentHarness, type AgentLogin, type TestAgent } from './harness.ts';

const allowed = (caps: { name: string; allowed: boolean }[], name: string) =>
  caps.find((c) => c.name === name)?.allowed;
const reasons = (caps: { name: string; reasons: { code: string }[] }[], name: string) =>
  caps.find((c) => c.name === name)?.reasons.map((r) => r.code);

describe('agent profile, outlet and capabilities', () => {
  let h: AgentHarness;
  let a: TestAgent;
  let la: AgentLogin;
  let other: AgentLogin;
  before(async () => {
    h = await startAgentHarness();
    a = await h.agent('ta', 'AG3001', '+254711000031');
    la = await h.login(a);
    other = await h.login(await h.agent('tb', 'AG3002', '+254711000032'));
  });
  after(() => h.close());

  it('derives capabilities from status, tier, training and float (pure rules)', () => {
    const base = {
      status: 'active',
      tier: 'basic' as const,
      currency: 'KES',
      floatAvailable: 0n,
      passed: new Set<string>(),
      unlocks: [{ course: 'kyc-basics', capability: 'kyc.register' }],
    };
    const caps = deriveCapabilities(base);
    assert.deepEqual(reasons(caps, 'cashin.create'), ['FLOAT_EMPTY']);
    assert.deepEqual(reasons(caps, 'p2p.assist'), ['TIER_TOO_LOW']);
    assert.deepEqual(reasons(caps, 'kyc.register'), ['TRAINING_REQUIRED']);
    assert.equal(allowed(caps, 'cashout.create'), true);
    const trained = deriveCapabilities({
      ...base,
      tier: 'standard',
      floatAvailable: 1n,
      passed: new Set(['kyc-basics']),
    });
    assert.ok(trained.every((c) => c.allowed));
    const suspended = deriveCapabilities({
      ...base,
      status: 'suspended',
      tier: 'super',
      floatAvailable: 1n,
      passed: new Set(['kyc-basics']),
    });
    assert.ok(suspended.every((c) => !c.allowed && c.reasons.some((r) => r.code === 'AGENT_SUSPENDED')));
  });

  it('GET /v1/agent/me and /v1/agent/outlet answer for the caller only', async () => {
    const me = await h.get('/v1/agent/me', bearer(la.accessToken));
    assert.equal(me.status, 200, me.text);
    assert.equal(me.json.id, a.id);
    assert.equal(me.json.code, 'AG3001');
    assert.equal(me.json.displayName, null);
    const outlet = await h.get('/v1/agent/outlet', bearer(la.accessToken));
    assert.equal(outlet.status, 200);
    assert.equal(outlet.json.id, a.outletId);
    assert.equal(outlet.json.region, 'Nairobi');
    const none = await h.get('/v1/agent/me');
    assert.equal(none.status, 401, "no token: the one verifier's refusal, as at the edge");
    assert.equal(none.json.code, 'UNAUTHENTICATED');
    assert.equal((await h.get('/v1/agent/me', bearer('not.a.token'))).status, 401);
    // The edge's identity headers must agree with the token (tenant isolation, defence in depth).
    const crossed = await h.get('/v1/agent/me', bearer(other.accessToken, { 'x-tenant-id': 'ta' }));
    assert.equal(crossed.status, 403);
    assert.equal(crossed.json.code, 'TENANT_MISMATCH');
  });

  it('PATCH /v1/agent/me changes display name and language, refuses other fields, audits', async () => {
    const patch = (json: unknown) =>
      call(h.origin, 'PATCH', '/v1/agent/me', { json, headers: bearer(la.accessToken) });
    const ok = await patch({ displayName: 'Mama Njeri Shop', language: 'sw' });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.displayName, 'Mama Njeri Shop');
    assert.equal(ok.json.language, 'sw');
    assert.equal((await patch({ tier: 'super' })).status, 400);
    assert.equal((await patch({})).status, 400);
    assert.equal((await patch({ language: 'Swahili' })).status, 400);
    assert.equal((await patch({ displayName: '' })).status, 400);
    const cleared = await patch({ displayName: null });
    assert.equal(cleared.json.displayName, null);
    assert.equal(cleared.json.language, 'sw');
    const { rows } = await h.tdb.db.query(
      `SELECT 1 FROM audit_log WHERE tenant_id = 'ta' AND action = 'agent.profile.update'`,
    );
    assert.equal(rows.length, 2);
  });

  it('GET /v1/agent/capabilities follows float, tier, training and suspension', async () => {
    const caps = async () => {
      const r = await h.get('/v1/agent/capabilities', bearer(la.accessToken));
      assert.equal(r.status, 200, r.text);
      return r.json;
    };
    let c = await caps();
    assert.equal(c.float.available, '0.00');
    assert.deepEqual(reasons(c.capabilities, 'cashin.create'), ['FLOAT_EMPTY']);
    assert.equal(allowed(c.capabilities, 'p2p.assist'), true, 'standard tier');
    await h.fundFloat(a, '250.00');
    await h.tdb.db.query(`UPDATE agents SET tier = 'basic' WHERE tenant_id = 'ta' AND id = $1`, [a.id]);
    await h.tdb.db.query(
      `INSERT INTO agent_courses (tenant_id, id, code, title, unlocks, created_at) VALUES ('ta', gen_random_uuid(), 'kyc-basics', 'KYC basics', 'kyc.register', now())`,
    );
    c = await caps();
    assert.equal(c.float.available, '250.00');
    assert.equal(allowed(c.capabilities, 'cashin.create'), true);
    assert.deepEqual(reasons(c.capabilities, 'p2p.assist'), ['TIER_TOO_LOW']);
    assert.deepEqual(reasons(c.capabilities, 'kyc.register'), ['TRAINING_REQUIRED']);
    // The same rules are enforced, not only shown: the operations refuse with the reasons.
    const p2p = await h.post(
      '/v1/txns/p2p/assist',
      { customerPhone: '+254711000041', recipientPhone: '+254711000042', amount: '10.00' },
      bearer(la.accessToken, { 'idempotency-key': 'cap-p2p-1' }),
    );
    assert.equal(p2p.status, 403, p2p.text);
    assert.equal(p2p.json.code, 'CAPABILITY_REQUIRED');
    assert.deepEqual(
      p2p.json.reasons.map((r: { code: string }) => r.code),
      ['TIER_TOO_LOW'],
    );
    const kyc = await h.post(
      '/v1/kyc/customers',
      {
        phone: '+254711000041',
        fullName: 'Amina Otieno',
        idType: 'NATIONAL_ID',
        idNumber: 'C0000001',
        dateOfBirth: '1990-01-01',
      },
      bearer(la.accessToken, { 'idempotency-key': 'cap-kyc-1' }),
    );
    assert.equal(kyc.json.code, 'CAPABILITY_REQUIRED');
    assert.deepEqual(
      kyc.json.reasons.map((r: { code: string }) => r.code),
      ['TRAINING_REQUIRED'],
    );
    await h.tdb.db.query(`UPDATE agents SET status = 'suspended' WHERE tenant_id = 'ta' AND id = $1`, [a.id]);
    c = await caps();
    assert.equal(c.status, 'suspended');
    assert.ok(c.capabilities.every((x: { allowed: boolean }) => !x.allowed));
    assert.equal(
      (await h.get('/v1/agent/me', bearer(la.accessToken))).status,
      200,
      'a suspended agent still reads its profile',
    );
    const patch = await call(h.origin, 'PATCH', '/v1/agent/me', {
      json: { language: 'en' },
      headers: bearer(la.accessToken),
    });
    assert.equal(patch.status, 403, 'but cannot change it');
    await h.tdb.db.query(`UPDATE agents SET status = 'active' WHERE tenant_id = 'ta' AND id = $1`, [a.id]);
  });
});
