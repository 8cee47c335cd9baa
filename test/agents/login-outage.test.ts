/**
 * An agent sign-in the service failed is not a wrong PIN (SPEC 8 lockout, per agent code and
 * device): the attempt is counted when it is admitted, and a database that does not answer
 * afterwards (the agent's row, the signing key of the access token) must not leave it counted.
 * Five such sign-ins once locked the agent out for 15 minutes, answered 429 LOCKED with the right
 * PIN and device once the database was back; a PIN queue past its capacity (429 busy) counted
 * the same way.
 */
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { outage } from '../helpers/outage.ts';
import { startAgentHarness, type AgentHarness, type TestAgent } from './harness.ts';

describe('agent sign-in while the service fails', () => {
  const down = outage();
  let h: AgentHarness;

  before(async () => {
    h = await startAgentHarness(['ta'], down.over);
  });
  afterEach(() => down.end());
  after(async () => h?.close());

  const login = (a: TestAgent) => {
    // A proof of its own each time (one proof signs one sign-in).
    h.clock.t += 1000;
    if (!a.device) throw new Error('no device bound');
    return h.post('/v1/agent/auth/login', {
      tenantId: a.tenantId,
      agentCode: a.code,
      pin: a.pin,
      device: h.proof('agent-login', a, a.device),
    });
  };

  /** More failed sign-ins than the lockout allows (SPEC 8: 5), each answered 503, then a sign-in. */
  async function failSixTimesThenSignIn(a: TestAgent): Promise<void> {
    for (let i = 0; i < 6; i++) {
      const r = await login(a);
      assert.equal(r.status, 503, `attempt ${i + 1}: ${r.text}`);
      assert.equal(r.json.code, 'SERVICE_UNAVAILABLE');
    }
    down.end();
    const r = await login(a);
    assert.equal(r.status, 200, `the right PIN and device sign in once the database answers: ${r.text}`);
  }

  it('an agent whose row could not be read is not counted', async () => {
    const a = await h.agent('ta', 'AG9001', '+254711700001');
    await h.bind(a);
    down.fail(/FROM agents WHERE tenant_id = \$1 AND code = \$2/);
    await failSixTimesThenSignIn(a);
  });

  it('a right PIN and device whose access token could not be signed is not counted', async () => {
    const a = await h.agent('ta', 'AG9002', '+254711700002');
    await h.bind(a);
    await h.login(a);
    // Past the key cache's minute, the signing key is read again: and cannot be.
    h.clock.t += 120_000;
    down.fail(/SELECT kid, private_enc FROM signing_keys/);
    await failSixTimesThenSignIn(a);
  });
});
