/**
 * A right PIN and wrong PINs racing through POST /customers/auth/login (SPEC 8 "daily failures":
 * after 10 failures in a day, OTP re-verification before the next PIN attempt). A login admitted
 * before the wrong PINs and judged after they made the phone need an OTP once cleared that
 * requirement on success: one more guess for whoever typed them, and a session that skipped the
 * OTP step. Now the right PIN is answered as if it came after them (403 VERIFICATION_REQUIRED) and
 * the requirement stays until an OTP verification clears it (core/identity/throttle.ts
 * settleSuccess). The race is played deterministically (the right PIN held at its PIN row's read,
 * after its admission, until released) and for real (many wrong PINs sent at once with the right
 * one); either way the phone needs an OTP exactly when the wrong PINs judged reached the limit.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { phonePolicy } from '../../core/identity/throttle.ts';
import type { Res } from '../helpers/http.ts';
import { queryHold } from '../helpers/query-hold.ts';
import { startHarness, type Harness } from './harness.ts';

const dayLimit = phonePolicy.dayLimit as number;
const pin = '4826';
/** The right PIN's read of its customer and PIN, the first step after its admission (login.ts checkPin). */
const pinRead = /LEFT JOIN credentials cr/;

describe('a right PIN racing wrong PINs that reach the daily limit', () => {
  const hold = queryHold();
  let h: Harness;
  before(async () => {
    h = await startHarness([{ id: 'ta' }, { id: 'tb' }, { id: 'tc' }], {}, hold.over);
  });
  after(async () => h?.close());

  const login = (tenantId: string, phone: string, p: string) =>
    h.post('/customers/auth/login', { tenantId, phone, pin: p });
  /** The phone's counter (each test has a tenant of its own, and one phone in it). */
  const counter = async (tenantId: string) => {
    const { rows } = await h.tdb.db.query<{ day_fails: number; needs_otp: boolean }>(
      `SELECT day_fails, needs_otp FROM auth_throttle WHERE tenant_id = $1 AND scope = 'phone'`,
      [tenantId],
    );
    assert.equal(rows.length, 1, 'one phone counter');
    return { day: rows[0]?.day_fails, needsOtp: rows[0]?.needs_otp };
  };
  /** Past every lock a round of answers reported (Retry-After), so the next round is admitted. */
  const pastLocks = (answers: Res[]) => {
    const waits = answers.map((r) => (r.json?.code === 'LOCKED' ? Number(r.headers['retry-after']) : 0));
    h.clock.t += Math.max(0, ...waits) * 1000 + 1000;
  };
  /** Wrong PINs one after another until `n` are judged wrong, each once the lock before it ran out. */
  const wrongPins = async (tenantId: string, phone: string, n: number) => {
    for (let judged = 0; judged < n; ) {
      const r = await login(tenantId, phone, '0000');
      if (r.status === 401) judged++;
      else if (r.json?.code === 'LOCKED') pastLocks([r]);
      else assert.fail(`wrong PIN ${judged + 1}: ${r.status} ${r.text}`);
    }
  };
  /** The OTP step: a code sent and verified clears the requirement; then, past the last lock, the right PIN signs in. */
  const verifyThenSignIn = async (tenantId: string, phone: string) => {
    assert.equal((await h.post('/customers/auth/otp/send', { tenantId, phone })).status, 202);
    const v = await h.post('/customers/auth/otp/verify', { tenantId, phone, otp: h.sms.lastCode(phone) });
    assert.equal(v.status, 200, v.text);
    const first = await login(tenantId, phone, pin);
    if (first.json?.code === 'LOCKED') pastLocks([first]);
    const r = first.json?.code === 'LOCKED' ? await login(tenantId, phone, pin) : first;
    assert.equal(r.status, 200, `the right PIN signs in after the OTP step: ${r.text}`);
  };
  const isCode = (r: Res, status: number, code: string) => r.status === status && r.json?.code === code;
  /**
   * A phone onboarded now (the sign-in opens its window), its right PIN sent in the window's last
   * second and held after its admission; then the clock at the window's end, and the held answer.
   */
  const heldAtWindowEnd = async (tenantId: string, phone: string): Promise<{ right: Promise<Res> }> => {
    await h.onboard(tenantId, phone, pin);
    const windowEnd = h.clock.t + phonePolicy.windowMs;
    h.clock.t = windowEnd - 1000;
    const held = hold.arm(pinRead);
    const right = login(tenantId, phone, pin);
    await held;
    h.clock.t = windowEnd;
    return { right };
  };

  it("held across the window's end while ten wrong PINs are judged: answered VERIFICATION_REQUIRED, the requirement stays", async () => {
    const phone = '+254711810001';
    const { right } = await heldAtWindowEnd('ta', phone);
    await wrongPins('ta', phone, dayLimit);
    hold.release();
    const r = await right;
    assert.deepEqual(
      await counter('ta'),
      { day: dayLimit, needsOtp: true },
      'the ten wrong PINs keep the requirement',
    );
    assert.equal(
      r.status,
      403,
      `the right PIN leads to the OTP step, not a session: ${r.status} ${r.json?.code}`,
    );
    assert.equal(r.json.code, 'VERIFICATION_REQUIRED');
    assert.equal(r.json.accessToken, undefined);
    const { rows } = await h.tdb.db.query<{ actor: string; allow: boolean }>(
      `SELECT actor->>'type' AS actor, (decision->>'allow')::boolean AS allow FROM audit_log
       WHERE tenant_id = 'ta' AND action = 'auth.login' AND attrs->>'outcome' = 'verification_required'`,
    );
    assert.deepEqual(
      rows,
      [{ actor: 'customer', allow: false }],
      'its refusal is recorded, naming the customer',
    );
    const again = await login('ta', phone, pin);
    assert.ok(isCode(again, 403, 'VERIFICATION_REQUIRED'), `still: ${again.text}`);
    await verifyThenSignIn('ta', phone);
  });

  it('many wrong PINs sent with the right one, round after round: an OTP is needed exactly when the wrong ones reach ten', async () => {
    const phone = '+254711810002';
    await h.onboard('tb', phone, pin);
    const windowEnd = h.clock.t + phonePolicy.windowMs;
    let judgedWrong = 0;
    for (let round = 0; round < 30 && judgedWrong < dayLimit; round++) {
      const answers = await Promise.all([
        login('tb', phone, pin),
        ...Array.from({ length: 6 }, () => login('tb', phone, '0000')),
      ]);
      const [right, ...wrong] = answers as [Res, ...Res[]];
      judgedWrong += wrong.filter((r) => r.status === 401).length;
      const refused = ['VERIFICATION_REQUIRED', 'LOCKED', 'RATE_LIMITED'];
      for (const r of answers)
        assert.ok(
          r.status === 200 || r.status === 401 || refused.includes(r.json?.code),
          `${r.status} ${r.text}`,
        );
      assert.notEqual(right.status, 401, 'the right PIN is never judged wrong');
      assert.deepEqual(
        await counter('tb'),
        { day: judgedWrong, needsOtp: judgedWrong >= dayLimit },
        `round ${round}: ${answers.map((r) => r.status).join(',')}`,
      );
      pastLocks(answers);
    }
    assert.ok(h.clock.t < windowEnd, 'every round in one window');
    assert.ok(judgedWrong >= dayLimit, 'the wrong PINs reached the limit');
    const r = await login('tb', phone, pin);
    assert.ok(isCode(r, 403, 'VERIFICATION_REQUIRED'), r.text);
    await verifyThenSignIn('tb', phone);
  });

  it("held across the window's end and released while wrong PINs race: an OTP is needed once they reach ten", async () => {
    const phone = '+254711810003';
    const { right } = await heldAtWindowEnd('tc', phone);
    let judgedWrong = 0;
    let answer: Res | undefined;
    for (let round = 0; round < 30 && (judgedWrong < dayLimit || !answer); round++) {
      // Released with the round that may reach the limit, the right PIN's verdict races it.
      const releasing = !answer && judgedWrong >= dayLimit - 1;
      const wrong = Array.from({ length: 6 }, () => login('tc', phone, '0000'));
      if (releasing) hold.release();
      const answers = await Promise.all(wrong);
      if (releasing) answer = await right;
      judgedWrong += answers.filter((r) => r.status === 401).length;
      pastLocks(answers);
    }
    assert.ok(answer, 'the right PIN was answered');
    assert.ok(judgedWrong >= dayLimit, 'the wrong PINs reached the limit');
    assert.deepEqual(await counter('tc'), { day: judgedWrong, needsOtp: true });
    assert.ok(
      answer.status === 200 || isCode(answer, 403, 'VERIFICATION_REQUIRED'),
      `judged before or after the limit: ${answer.text}`,
    );
    const r = await login('tc', phone, pin);
    assert.ok(isCode(r, 403, 'VERIFICATION_REQUIRED'), r.text);
    await verifyThenSignIn('tc', phone);
  });
});
