import assert from 'node:assert/strict';
import { generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { decodeJwt } from 'jose';
import { issueChallenge } from '../../shared/challenge.ts';
import { bearer, startHarness, withStepUp, type Harness, type Tokens } from './harness.ts';

/**
 * Issue 13 item 1 applied to a PIN reset (core, injected clock): a SIM swapper gets the victim's
 * SMS, so a PIN replaced by phone verification cannot step up by OTP until the tenant's device
 * cool-off has passed, while a device key the customer could use before the reset still steps up;
 * the verified phone is told; sign-in (AAL 1) is not held; a first enrolment is not held.
 */
describe('PIN reset hold (core)', () => {
  let h: Harness;
  const phone = '+254711000301';
  const hour = 3_600_000;
  let customerId: string;
  let own: { id: string; key: KeyObject };
  let late: { id: string; key: KeyObject };

  const login = async (pin: string) => {
    const r = await h.post('/customers/auth/login', { tenantId: 'ta', phone, pin });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.aal, 1);
    return r.json as Tokens;
  };
  const challenge = () =>
    issueChallenge(
      h.keys.challenges,
      { tenantId: 'ta', sub: customerId, orig: 'some-request', methods: ['otp', 'device'] },
      h.clock.t,
    );
  const otpStepUp = async (t: Tokens) => {
    const ch = await challenge();
    assert.equal(
      (await h.post('/customers/auth/stepup/otp', { challengeToken: ch }, bearer(t.accessToken))).status,
      202,
    );
    return h.post(
      '/customers/auth/stepup/complete',
      { challengeToken: ch, otp: h.sms.lastCode(phone) },
      bearer(t.accessToken),
    );
  };
  const deviceStepUp = async (t: Tokens, d: { id: string; key: KeyObject }) => {
    const ch = await challenge();
    const deviceAssertion = {
      deviceId: d.id,
      signature: sign(null, Buffer.from(ch), d.key).toString('base64url'),
    };
    return h.post(
      '/customers/auth/stepup/complete',
      { challengeToken: ch, deviceAssertion },
      bearer(t.accessToken),
    );
  };
  const register = async (t: Tokens) => {
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    const reg = await withStepUp(h, t.accessToken, phone, 'POST', '/customers/devices', {
      publicKey: String(publicKey.export({ format: 'jwk' }).x),
    });
    assert.equal(reg.final.status, 201, reg.final.text);
    return { id: reg.final.json.deviceId as string, key: privateKey };
  };
  const holdUntil = async () =>
    (
      await h.tdb.db.query<{ u: Date | null }>(
        'SELECT pin_reset_hold_until AS u FROM credentials WHERE tenant_id = $1 AND customer_id = $2',
        ['ta', customerId],
      )
    ).rows[0]?.u;

  before(async () => {
    h = await startHarness([{ id: 'ta' }]);
  });
  after(() => h.close());

  it('a first enrolment is not held and sends no PIN-change notice', async () => {
    const t = await h.onboard('ta', phone, '639017');
    customerId = String(decodeJwt(t.accessToken).sub);
    assert.equal(await holdUntil(), null);
    assert.equal(h.sms.sent.filter((m) => m.purpose === 'pin_changed').length, 0);
    assert.equal((await otpStepUp(t)).status, 200, 'an OTP step-up works at once');
    own = await register(t);
    h.clock.t += 23 * hour;
    late = await register(await login('639017'));
    h.clock.t += hour;
    assert.equal(
      (await deviceStepUp(await login('639017'), own)).status,
      200,
      "the customer's own key is usable before the reset",
    );
  });

  it('a reset by SMS is held: OTP step-up refused, the key usable before the reset still steps up, the phone is told', async () => {
    h.clock.t += hour;
    const sent = h.sms.sent.length;
    assert.equal((await h.post('/customers/auth/otp/send', { tenantId: 'ta', phone })).status, 202);
    const v = await h.post('/customers/auth/otp/verify', {
      tenantId: 'ta',
      phone,
      otp: h.sms.lastCode(phone),
    });
    const reset = await h.post('/customers/auth/pin/set', {
      tenantId: 'ta',
      phone,
      pin: '470913',
      verificationToken: v.json.verificationToken,
    });
    assert.equal(reset.status, 204, reset.text);
    const resetAt = h.clock.t;
    assert.equal(
      (await holdUntil())?.getTime(),
      resetAt + 24 * hour,
      "the hold is the tenant's device cool-off (default 24 hours)",
    );
    const notices = h.sms.sent.slice(sent).filter((m) => m.purpose === 'pin_changed');
    assert.equal(notices.length, 1);
    assert.equal(notices[0]?.to, phone);
    assert.equal(notices[0]?.code, undefined, 'the notice carries no code');
    assert.doesNotMatch(notices[0]?.text ?? '', /470913/);
    assert.match(notices[0]?.text ?? '', /PIN was changed.*2026-03-03 09:00 UTC/);

    const t = await login('470913');
    const byOtp = await otpStepUp(t);
    assert.equal(byOtp.status, 403, byOtp.text);
    assert.equal(byOtp.json.code, 'PIN_RESET_HOLD');
    const audit = await h.tdb.db.query<{ allow: boolean }>(
      `SELECT (decision->>'allow')::boolean AS allow FROM audit_log WHERE tenant_id = 'ta' AND action = 'auth.stepup' AND attrs->>'outcome' = 'pin_reset_hold'`,
    );
    assert.deepEqual(
      audit.rows.map((r) => r.allow),
      [false],
    );

    const byOwnKey = await deviceStepUp(t, own);
    assert.equal(byOwnKey.status, 200, byOwnKey.text);
    assert.deepEqual(decodeJwt(byOwnKey.json.accessToken).amr, ['pin', 'device']);

    // Registered before the reset but usable only after it: not the customer's proven phone yet.
    h.clock.t = resetAt + 23 * hour;
    const byLateKey = await deviceStepUp(await login('470913'), late);
    assert.equal(byLateKey.json.code, 'PIN_RESET_HOLD', byLateKey.text);
  });

  it('the hold ends after the cool-off: an OTP step-up works again', async () => {
    const until = (await holdUntil())?.getTime() ?? 0;
    h.clock.t = until - 1000;
    assert.equal((await otpStepUp(await login('470913'))).json.code, 'PIN_RESET_HOLD', 'a second short');
    h.clock.t = until;
    const ok = await otpStepUp(await login('470913'));
    assert.equal(ok.status, 200, ok.text);
    assert.deepEqual(decodeJwt(ok.json.accessToken).amr, ['pin', 'otp']);
  });
});
