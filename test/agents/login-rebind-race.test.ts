/**
 * Binding a new device (POST /v1/agent/auth/device-bind, after an OTP) revokes the agent's bound
 * device and every session it has: what an agent does when the phone is lost or stolen. An app
 * login by the old device, its proof checked just before the bind and its session opened just
 * after the bind's revocation, must not keep an AAL 2 session the bind did not see. The race is
 * held deterministically: the login held right after its device proof was checked (at the
 * proof's recorded use) while the bind runs, until the bind commits or waits for it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { queryHold } from '../helpers/query-hold.ts';
import { bearer, startAgentHarness, type AgentHarness } from './harness.ts';

/** The login's statement right after its device proof was read and verified (device.ts). */
const proofUsed = /INSERT INTO used_challenges/;

describe('an agent login by the old device racing a new device bind', () => {
  const hold = queryHold();
  let h: AgentHarness;
  before(async () => {
    h = await startAgentHarness(['ta'], hold.over);
  });
  after(async () => h?.close());

  /** Whether a statement of the test database waits for a lock (the bind behind the held login). */
  const waiting = async () =>
    (
      await h.tdb.db.query(
        `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
      )
    ).rows.length > 0;

  it('the bind revokes the session the old device opened meanwhile', async () => {
    const a = await h.agent('ta', 'AG8201', '+254711830001');
    const old = await h.bind(a);
    const held = hold.arm(proofUsed);
    const racing = h.post('/v1/agent/auth/login', {
      tenantId: a.tenantId,
      agentCode: a.code,
      pin: a.pin,
      device: h.proof('agent-login', a, old),
    });
    await held;
    let done = false;
    const rebinding = h.bind(a).then(() => {
      done = true;
    });
    while (!done && !(await waiting())) await new Promise((r) => setTimeout(r, 5));
    hold.release();
    const [r] = await Promise.all([racing, rebinding]);
    assert.equal(r.status, 200, `judged and settled before the bind: ${r.text}`);
    const { rows } = await h.tdb.db.query<{ device: string }>(
      `SELECT device FROM sessions WHERE tenant_id = 'ta' AND subject_type = 'agent' AND revoked_at IS NULL`,
    );
    assert.deepEqual(rows, [], 'no live session of the old device after the bind');
    const me = await h.get('/v1/agent/me', bearer(r.json.accessToken));
    assert.equal(me.status, 401, `its access token is refused: ${me.status} ${me.text}`);
  });
});
