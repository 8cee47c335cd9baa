/**
 * The agent sign-ins share the customers' lockout counters (core/identity/throttle.ts), keyed on
 * the agent code: the app login (POST /v1/agent/auth/login) and the PIN typed on the USSD agent
 * menu. A right PIN admitted before wrong PINs and judged after they made the agent code need an
 * OTP once cleared that requirement on success (one more guess, and a session or a float balance
 * past the OTP step). Each race is held deterministically: the right PIN held after its admission
 * while the window runs out and ten wrong PINs are judged, then released. It is answered as if it
 * came after them, and the requirement stays until the agent verifies a code.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { phonePolicy } from '../../core/identity/throttle.ts';
import type { Res } from '../helpers/http.ts';
import { queryHold } from '../helpers/query-hold.ts';
import { startAgentHarness, ussdAgentMenu, type AgentHarness, type TestAgent } from './harness.ts';

const dayLimit = phonePolicy.dayLimit as number;
/** Every lock ten wrong PINs in a row meet (15 min doubling to the ninth) is over by then. */
const pastTenWrongMs = 12 * 3_600_000;

describe('an agent right PIN judged after wrong PINs reached the daily limit', () => {
  const holds = queryHold();
  let h: AgentHarness;
  before(async () => {
    h = await startAgentHarness(['ta', 'tb'], holds.over);
  });
  after(async () => h?.close());

  const login = (a: TestAgent, pin: string, at = h.clock.t) => {
    if (!a.device) throw new Error('no device bound');
    return h.post('/v1/agent/auth/login', {
      tenantId: a.tenantId,
      agentCode: a.code,
      pin,
      device: h.proof('agent-login', a, a.device, at),
    });
  };
  /** A wrong PIN from a device of its own (the PIN is judged before any device proof). */
  const wrongPin = (a: TestAgent) =>
    h.post('/v1/agent/auth/login', {
      tenantId: a.tenantId,
      agentCode: a.code,
      pin: '0000',
      device: { deviceId: randomUUID(), timestamp: String(h.clock.t), signature: 'A'.repeat(86) },
    });
  const pastLock = (r: Res) => {
    h.clock.t += Number(r.headers['retry-after']) * 1000 + 1000;
  };
  /** Wrong PINs until ten are judged wrong, each once the lock before it ran out. */
  const tenWrongPins = async (a: TestAgent) => {
    for (let judged = 0; judged < dayLimit; ) {
      const r = await wrongPin(a);
      if (r.status === 401) judged++;
      else if (r.json?.code === 'LOCKED') pastLock(r);
      else assert.fail(`wrong PIN ${judged + 1}: ${r.status} ${r.text}`);
    }
  };
  /** The agent code's counter (each test has a tenant of its own, and one agent in it). */
  const counter = async (tenantId: string) => {
    const { rows } = await h.tdb.db.query<{ fails: number; day_fails: number; needs_otp: boolean }>(
      `SELECT fails, day_fails, needs_otp FROM auth_throttle WHERE tenant_id = $1 AND scope = 'phone'`,
      [tenantId],
    );
    assert.equal(rows.length, 1, "the agent code's counter");
    return { fails: rows[0]?.fails, day: rows[0]?.day_fails, needsOtp: rows[0]?.needs_otp };
  };
  /** A fresh agent with a bound device, its counter gone, its window opened by one sign-in now. */
  const freshAgent = async (tenantId: string, code: string, phone: string) => {
    const a = await h.agent(tenantId, code, phone);
    await h.bind(a);
    await h.tdb.db.query(`DELETE FROM auth_throttle WHERE tenant_id = $1`, [tenantId]);
    await h.login(a);
    return { a, windowEnd: h.clock.t + phonePolicy.windowMs };
  };
  /**
   * `right` sent in the last second of the window the agent's sign-in opened and held at `at` (once
   * `skip` matching statements ran) after its admission; the window runs out and ten wrong PINs are
   * judged; then it is released at `releaseAt` (default: where the wrong PINs left the clock).
   */
  const heldAcrossWindowEnd = async (
    a: TestAgent,
    windowEnd: number,
    hold: { at: RegExp; skip?: number; releaseAt?: number },
    right: () => Promise<Res>,
  ): Promise<Res> => {
    h.clock.t = windowEnd - 1000;
    const held = holds.arm(hold.at, hold.skip);
    const answer = right();
    await held;
    assert.equal((await counter(a.tenantId)).fails, 1, 'admitted (counted) before it is held');
    h.clock.t = windowEnd;
    await tenWrongPins(a);
    if (hold.releaseAt !== undefined) h.clock.t = hold.releaseAt;
    holds.release();
    const r = await answer;
    const c = await counter(a.tenantId);
    assert.deepEqual([c.needsOtp, c.day], [true, dayLimit], 'the ten wrong PINs keep the requirement');
    return r;
  };
  /** The OTP step (a code sent and verified clears the requirement), then a sign-in past the last lock. */
  const verifyThenSignIn = async (a: TestAgent) => {
    h.clock.t += phonePolicy.maxLockMs;
    const sent = await h.post('/v1/agent/auth/otp/request', { tenantId: a.tenantId, agentCode: a.code });
    assert.equal(sent.status, 202, sent.text);
    const otp = h.sms.lastCode(a.phone);
    const v = await h.post('/v1/agent/auth/otp/verify', { tenantId: a.tenantId, agentCode: a.code, otp });
    assert.equal(v.status, 200, v.text);
    const r = await login(a, a.pin);
    assert.equal(r.status, 200, `the right PIN signs in after the OTP step: ${r.text}`);
  };

  it("app login held across the window's end: answered VERIFICATION_REQUIRED, no session, the requirement stays", async () => {
    const { a, windowEnd } = await freshAgent('ta', 'AG8101', '+254711820001');
    // Its device proof is checked once its PIN is judged, at the release.
    const releaseAt = windowEnd + pastTenWrongMs;
    // Held at the agent's row, read right after the admission (auth.ts findAgentByCode).
    const r = await heldAcrossWindowEnd(
      a,
      windowEnd,
      { at: /FROM agents WHERE tenant_id = \$1 AND code = \$2/, releaseAt },
      () => login(a, a.pin, releaseAt),
    );
    assert.equal(
      r.status,
      403,
      `the right PIN leads to the OTP step, not a session: ${r.status} ${r.json?.code}`,
    );
    assert.equal(r.json.code, 'VERIFICATION_REQUIRED');
    const { rows } = await h.tdb.db.query<{ actor: string; allow: boolean }>(
      `SELECT actor->>'type' AS actor, (decision->>'allow')::boolean AS allow FROM audit_log
       WHERE tenant_id = 'ta' AND action = 'agent.auth.login' AND attrs->>'outcome' = 'verification_required'`,
    );
    assert.deepEqual(rows, [{ actor: 'agent', allow: false }], 'its refusal is recorded, naming the agent');
    const sessions = await h.tdb.db.query(
      `SELECT 1 FROM sessions WHERE tenant_id = 'ta' AND created_at >= to_timestamp($1 / 1000.0)`,
      [windowEnd - 1000],
    );
    assert.equal(sessions.rows.length, 0, 'no session opened');
    await verifyThenSignIn(a);
  });

  it("USSD agent PIN held across the window's end: answered the OTP step, not the float balance", async () => {
    const { a, windowEnd } = await freshAgent('tb', 'AG8102', '+254711820002');
    // Held at its settlement, the second statement on the counter, once the PIN was judged (pin.ts).
    const r = await heldAcrossWindowEnd(a, windowEnd, { at: /INSERT INTO auth_throttle/, skip: 1 }, () =>
      ussdAgentMenu(h, a, `1*${a.pin}`, `ov-${randomUUID()}`),
    );
    assert.match(r.text, /^END Too many wrong PINs today\. Verify your phone/, r.text);
    await verifyThenSignIn(a);
  });
});
