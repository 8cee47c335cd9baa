import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { startAgentHarness, type AgentHarness, type TestAgent } from './harness.ts';
import type { Res } from '../helpers/http.ts';

/** Issue 13 item 4: agents share shop and carrier addresses too; the address throttles, it does not lock out. */
describe('agent login: the source address is a carrier-NAT-sized throttle', () => {
  let h: AgentHarness;
  let a: TestAgent;
  let b: TestAgent;
  before(async () => {
    h = await startAgentHarness(['ta', 'tlow']);
    await h.tdb.db.query(`UPDATE tenants SET security = $1 WHERE id = 'tlow'`, [
      JSON.stringify({ address_throttle: { failures: 20, delay_seconds: 45 } }),
    ]);
    a = await h.agent('ta', 'AG2001', '+254711200001');
    b = await h.agent('tlow', 'AG2002', '+254711200002');
    await h.bind(a);
    await h.bind(b);
  });
  after(() => h.close());

  let seq = 0;
  /** A failed login for an agent code and device no other attempt uses. */
  const fail = (like: TestAgent, ip: string): Promise<Res> => {
    seq++;
    const d = h.newDevice();
    d.id = randomUUID();
    return h.post(
      '/v1/agent/auth/login',
      {
        tenantId: like.tenantId,
        agentCode: `NOPE${seq}`,
        pin: '9137',
        device: h.proof('agent-login', { ...like, code: `NOPE${seq}` }, d),
      },
      { 'x-client-ip': ip },
    );
  };
  const failMany = async (like: TestAgent, ip: string, n: number) => {
    for (let i = 0; i < n; i++) assert.equal((await fail(like, ip)).status, 401);
  };
  const login = (x: TestAgent, ip: string) => {
    h.clock.t += 1; // a fresh proof each time (a proof is single use)
    return h.post(
      '/v1/agent/auth/login',
      { tenantId: x.tenantId, agentCode: x.code, pin: x.pin, device: h.proof('agent-login', x, x.device!) },
      { 'x-client-ip': ip },
    );
  };

  it('20 failed agent logins from one address do not stop another agent there (defaults)', async () => {
    await failMany(a, '127.0.0.1', 20);
    const r = await login(a, '127.0.0.1');
    assert.equal(r.status, 200, r.text);
  });

  it("past the tenant's threshold the address gets 429 ADDRESS_THROTTLED with a growing Retry-After", async () => {
    await failMany(b, '10.77.0.1', 19);
    assert.equal((await login(b, '10.77.0.1')).status, 200);
    await failMany(b, '10.77.0.1', 1);
    const first = await login(b, '10.77.0.1');
    assert.equal(first.status, 429);
    assert.equal(first.json.code, 'ADDRESS_THROTTLED');
    assert.equal(first.headers['retry-after'], '45');
    h.clock.t += 45_000;
    assert.equal((await fail(b, '10.77.0.1')).status, 401);
    const second = await login(b, '10.77.0.1');
    assert.equal(second.json.code, 'ADDRESS_THROTTLED');
    assert.equal(Number(second.headers['retry-after']), 90);
    assert.equal((await login(b, '10.77.0.2')).status, 200, 'another address is not slowed down');
    assert.equal(
      (await login(a, '10.77.0.1')).status,
      200,
      "another tenant's counter for the same address is untouched",
    );
  });

  it('the agent-code lockout is unchanged: 5 wrong PINs lock the code from any address and device', async () => {
    const c = await h.agent('ta', 'AG2003', '+254711200003');
    await h.bind(c);
    for (let i = 0; i < 5; i++) {
      const d = h.newDevice();
      d.id = randomUUID();
      const r = await h.post('/v1/agent/auth/login', {
        tenantId: 'ta',
        agentCode: c.code,
        pin: '9137',
        device: h.proof('agent-login', c, d),
      });
      assert.equal(r.status, 401);
    }
    const r = await login(c, '10.78.0.1');
    assert.equal(r.status, 429);
    assert.equal(r.json.code, 'LOCKED');
    assert.equal(r.headers['retry-after'], String(15 * 60));
  });
});
