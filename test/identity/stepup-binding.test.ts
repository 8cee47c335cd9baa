import assert from 'node:assert/strict';
import { generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { decodeJwt } from 'jose';
import { issueChallenge, origOf } from '../../shared/challenge.ts';
import { enrolmentCodesPerDay, stepUpCodesPerDay } from '../../core/identity/throttle.ts';
import { detachedRespellings, respellings } from '../helpers/respell.ts';
import { bearer, count, startHarness, withStepUp, type Harness, type Tokens } from './harness.ts';

/**
 * Issue 13 items 1 and 2 in core (injected clock): device registration and removal, and
 * revoking another session, each need a step-up bound to that request and use it up; a new
 * device key waits out the tenant's cool-off and the customer is told by SMS; step-up codes
 * have their own daily allowance.
 */
describe('request-bound step-ups and device cool-off (core)', () => {
  let h: Harness;
  const phone = '+254711000101';
  const pin = '639017';
  let tok: Tokens;
  let customerId: string;
  const hour = 3_600_000;

  const keyPair = () => {
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    return { privateKey, x: String(publicKey.export({ format: 'jwk' }).x) };
  };
  const login = async (tenantId = 'ta', p = phone) =>
    (await h.post('/customers/auth/login', { tenantId, phone: p, pin })).json as Tokens;
  const assertion = (challenge: string, deviceId: string, key: KeyObject, spell = (sig: string) => sig) => ({
    deviceId,
    signature: spell(sign(null, Buffer.from(challenge), key).toString('base64url')),
  });
  const deviceStepUp = async (
    t: Tokens,
    deviceId: string,
    key: KeyObject,
    tenantId = 'ta',
    sub = customerId,
    spell?: (sig: string) => string,
  ) => {
    const ch = await issueChallenge(
      h.keys.challenges,
      { tenantId, sub, orig: 'some-request', methods: ['otp', 'device'] },
      h.clock.t,
    );
    return h.post(
      '/customers/auth/stepup/complete',
      { challengeToken: ch, deviceAssertion: assertion(ch, deviceId, key, spell) },
      bearer(t.accessToken),
    );
  };

  before(async () => {
    h = await startHarness([{ id: 'ta' }, { id: 'tcool', security: { device_cooloff_hours: 2 } }]);
    tok = await h.onboard('ta', phone, pin);
    customerId = String(decodeJwt(tok.accessToken).sub);
  });
  after(() => h.close());

  it('a step-up bought for a transfer does not register a device; the registration step-up works once', async () => {
    const transferOrig = origOf('POST', '/v1/transfers', '{"amount":"1.00","currency":"KES"}');
    const ch = await issueChallenge(
      h.keys.challenges,
      { tenantId: 'ta', sub: customerId, orig: transferOrig, methods: ['otp'] },
      h.clock.t,
    );
    await h.post('/customers/auth/stepup/otp', { challengeToken: ch }, bearer(tok.accessToken));
    const forTransfer = (
      await h.post(
        '/customers/auth/stepup/complete',
        { challengeToken: ch, otp: h.sms.lastCode(phone) },
        bearer(tok.accessToken),
      )
    ).json.accessToken as string;
    const { x } = keyPair();
    const body = { publicKey: x, label: 'attacker phone' };
    const refused = await h.post('/customers/devices', body, bearer(forTransfer));
    assert.equal(refused.status, 403);
    assert.equal(refused.json.code, 'MFA_REQUIRED');
    assert.equal(
      decodeJwt(refused.json.challenge).orig,
      origOf('POST', '/customers/devices', JSON.stringify(body)),
      'a fresh challenge bound to the registration',
    );
    assert.equal(await count(h, 'customer_devices'), 0);

    const reg = await withStepUp(h, tok.accessToken, phone, 'POST', '/customers/devices', body);
    assert.equal(reg.final.status, 201, reg.final.text);
    assert.equal(reg.final.json.status, 'cooling_off');
    assert.equal(
      Date.parse(reg.final.json.usableFrom),
      h.clock.t + 24 * hour,
      'the default cool-off is 24 hours, OTP step-up or not',
    );
    const note = h.sms.sent.at(-1);
    assert.equal(note?.to, phone);
    assert.equal(note?.purpose, 'device_added');
    assert.equal(note?.code, undefined);
    assert.doesNotMatch(note?.text ?? '', /attacker/, 'the client-chosen label stays out of the warning');

    // The registration's AAL 2 token is used up: the same request again, or another key, asks anew.
    const again = await h.post('/customers/devices', body, bearer(reg.token));
    assert.equal(again.status, 403);
    assert.equal(again.json.code, 'MFA_REQUIRED');
    assert.ok(again.json.challenge);
    const other = await h.post('/customers/devices', { publicKey: keyPair().x }, bearer(reg.token));
    assert.equal(other.json.code, 'MFA_REQUIRED');
    const uses = await h.tdb.db.query<{ action: string; grant_jti: string }>(
      'SELECT action, grant_jti FROM stepup_uses WHERE tenant_id = $1',
      ['ta'],
    );
    assert.deepEqual(
      uses.rows.map((r) => [r.action, r.grant_jti]),
      [['device.register', decodeJwt(reg.token).jti]],
    );
    assert.equal(await count(h, 'customer_devices'), 1);
  });

  it('a second spelling of a challenge is refused as a malformed one: padding by the schema, spare bits as challenge_mismatch', async () => {
    const ch = await issueChallenge(
      h.keys.challenges,
      { tenantId: 'ta', sub: customerId, orig: 'some-request', methods: ['otp'] },
      h.clock.t,
    );
    const [[, padded], [, spareBits]] = respellings(ch) as [[string, string], [string, string]];
    const codeOf = async (path: string, body: Record<string, unknown>) => {
      const r = await h.post(path, body, bearer(tok.accessToken));
      return `${r.status} ${r.json.code}`;
    };
    for (const path of ['/customers/auth/stepup/otp', '/customers/auth/stepup/complete']) {
      const garbled = `${ch.slice(0, -1)}*`;
      assert.equal(await codeOf(path, { challengeToken: padded, otp: '000000' }), '400 VALIDATION_FAILED');
      assert.equal(
        await codeOf(path, { challengeToken: padded, otp: '000000' }),
        await codeOf(path, { challengeToken: garbled, otp: '000000' }),
      );
    }
    assert.equal(
      await codeOf('/customers/auth/stepup/otp', { challengeToken: spareBits }),
      '403 challenge_mismatch',
    );
    await h.post('/customers/auth/stepup/otp', { challengeToken: ch }, bearer(tok.accessToken));
    const otp = h.sms.lastCode(phone);
    assert.equal(
      await codeOf('/customers/auth/stepup/complete', { challengeToken: spareBits, otp }),
      '403 challenge_mismatch',
    );
    const done = await h.post(
      '/customers/auth/stepup/complete',
      { challengeToken: ch, otp },
      bearer(tok.accessToken),
    );
    assert.equal(done.status, 200, done.text);
  });

  it('a new key can neither step up nor be offered until the cool-off has passed; then it can, and its use is listed', async () => {
    const { privateKey, x } = keyPair();
    const reg = await withStepUp(h, tok.accessToken, phone, 'POST', '/customers/devices', {
      publicKey: x,
      label: 'my phone',
    });
    assert.equal(reg.final.status, 201, reg.final.text);
    const deviceId = reg.final.json.deviceId as string;
    const early = await deviceStepUp(tok, deviceId, privateKey);
    assert.equal(early.status, 403, early.text);
    assert.equal(early.json.code, 'DEVICE_COOLING_OFF');
    const forged = await deviceStepUp(tok, deviceId, keyPair().privateKey);
    assert.equal(
      forged.json.code,
      'DEVICE_ASSERTION_INVALID',
      'a wrong signature learns nothing about the cool-off',
    );
    const challengeNow = await h.post(
      '/customers/devices',
      { publicKey: keyPair().x },
      bearer(tok.accessToken),
    );
    assert.deepEqual(challengeNow.json.methods, ['otp'], 'a cooling-off key is not offered');

    h.clock.t += 24 * hour - 60_000;
    tok = await login();
    assert.equal(
      (await deviceStepUp(tok, deviceId, privateKey)).json.code,
      'DEVICE_COOLING_OFF',
      'a minute short',
    );
    h.clock.t += 60_000;
    tok = await login();
    // The key's own signature of the challenge, with a spare bit set: the same bytes, another text
    // (padding and the base64 alphabet are refused by the schema, 400).
    const spelled = await deviceStepUp(
      tok,
      deviceId,
      privateKey,
      'ta',
      customerId,
      (sig) => Object.fromEntries(detachedRespellings(sig))['a signature with spare bits set'] ?? '',
    );
    assert.equal(spelled.status, 401, spelled.text);
    assert.equal(spelled.json.code, 'DEVICE_ASSERTION_INVALID', 'a second spelling is a bad signature');
    const ok = await deviceStepUp(tok, deviceId, privateKey);
    assert.equal(ok.status, 200, ok.text);
    assert.deepEqual(decodeJwt(ok.json.accessToken).amr, ['pin', 'device']);
    assert.equal(decodeJwt(ok.json.accessToken).dvc, deviceId);
    const list = await h.get('/customers/devices', bearer(tok.accessToken));
    assert.equal(list.status, 200, list.text);
    const mine = (
      list.json.devices as {
        id: string;
        label: string;
        status: string;
        lastUsedAt: string | null;
        createdAt: string;
      }[]
    ).find((d) => d.id === deviceId);
    assert.equal(mine?.label, 'my phone');
    assert.equal(mine?.status, 'active');
    assert.equal(mine?.lastUsedAt, new Date(h.clock.t).toISOString());
    assert.equal(mine?.createdAt, new Date(h.clock.t - 24 * hour).toISOString());
  });

  it('the cool-off is the tenant security setting device_cooloff_hours', async () => {
    const p = '+254711000102';
    let t = await h.onboard('tcool', p, pin);
    const sub = String(decodeJwt(t.accessToken).sub);
    const { privateKey, x } = keyPair();
    const reg = await withStepUp(h, t.accessToken, p, 'POST', '/customers/devices', { publicKey: x });
    assert.equal(Date.parse(reg.final.json.usableFrom), h.clock.t + 2 * hour);
    h.clock.t += 2 * hour - 1000;
    t = await login('tcool', p);
    assert.equal(
      (await deviceStepUp(t, reg.final.json.deviceId, privateKey, 'tcool', sub)).json.code,
      'DEVICE_COOLING_OFF',
    );
    h.clock.t += 1000;
    t = await login('tcool', p);
    assert.equal((await deviceStepUp(t, reg.final.json.deviceId, privateKey, 'tcool', sub)).status, 200);
  });

  it('removing a device needs its own bound step-up; what it stepped up stops working; a failed removal uses nothing up', async () => {
    tok = await login();
    const devices = (await h.get('/customers/devices', bearer(tok.accessToken))).json.devices as {
      id: string;
      status: string;
    }[];
    const active = devices.find((d) => d.status === 'active');
    assert.ok(active);
    const path = `/customers/devices/${active.id}`;
    const refused = await call(path, tok.accessToken);
    assert.equal(refused.status, 403);
    assert.equal(refused.json.code, 'MFA_REQUIRED');
    const usesBefore = await count(h, 'stepup_uses');
    const gone = await withStepUp(h, tok.accessToken, phone, 'DELETE', path);
    assert.equal(gone.final.status, 204, gone.final.text);
    assert.equal(await count(h, 'stepup_uses'), usesBefore + 1);
    assert.equal(h.sms.sent.at(-1)?.purpose, 'device_removed');
    const listed = (await h.get('/customers/devices', bearer(tok.accessToken))).json.devices as {
      id: string;
      status: string;
      revokedAt: string | null;
    }[];
    assert.equal(listed.find((d) => d.id === active.id)?.status, 'revoked');
    const twice = await withStepUp(h, tok.accessToken, phone, 'DELETE', path);
    assert.equal(twice.final.status, 404);
    assert.equal(twice.final.json.code, 'DEVICE_NOT_FOUND');
    assert.equal(await count(h, 'stepup_uses'), usesBefore + 1, 'the refused removal used nothing up');
    const unknown = await withStepUp(
      h,
      tok.accessToken,
      phone,
      'DELETE',
      '/customers/devices/0196a8f0-0000-7000-8000-000000000000',
    );
    assert.equal(unknown.final.json.code, 'DEVICE_NOT_FOUND');
  });

  it('a token stepped up with a device stops working in core once the device is removed', async () => {
    const { privateKey, x } = keyPair();
    const reg = await withStepUp(h, tok.accessToken, phone, 'POST', '/customers/devices', { publicKey: x });
    const deviceId = reg.final.json.deviceId as string;
    h.clock.t += 24 * hour;
    tok = await login();
    const up = await deviceStepUp(tok, deviceId, privateKey);
    assert.equal(up.status, 200, up.text);
    const dvcToken = up.json.accessToken as string;
    assert.equal((await h.get('/customers/sessions', bearer(dvcToken))).status, 200);
    const gone = await withStepUp(h, tok.accessToken, phone, 'DELETE', `/customers/devices/${deviceId}`);
    assert.equal(gone.final.status, 204, gone.final.text);
    const after = await h.get('/customers/sessions', bearer(dvcToken));
    assert.equal(after.status, 401);
    assert.equal(after.json.code, 'device_revoked');
    assert.equal((await deviceStepUp(tok, deviceId, privateKey)).json.code, 'DEVICE_ASSERTION_INVALID');
  });

  it("ending one's own current session is a logout (no step-up); ending another needs one", async () => {
    const other = await login();
    const own = await call(`/customers/sessions/${other.sessionId}`, other.accessToken);
    assert.equal(own.status, 204, own.text);
    const third = await login();
    const refused = await call(`/customers/sessions/${third.sessionId}`, tok.accessToken);
    assert.equal(refused.json.code, 'MFA_REQUIRED');
  });

  it('step-up codes have their own daily allowance, apart from enrolment codes', async () => {
    assert.equal(enrolmentCodesPerDay, 5);
    assert.equal(stepUpCodesPerDay, 30);
    const p = '+254711000103';
    const t = await h.onboard('ta', p, pin);
    const sub = String(decodeJwt(t.accessToken).sub);
    for (let i = 1; i < enrolmentCodesPerDay; i++)
      assert.equal((await h.post('/customers/auth/otp/send', { tenantId: 'ta', phone: p })).status, 202);
    assert.equal(
      (await h.post('/customers/auth/otp/send', { tenantId: 'ta', phone: p })).status,
      429,
      'enrolment codes used up',
    );
    const stepUpSend = async () => {
      const ch = await issueChallenge(
        h.keys.challenges,
        { tenantId: 'ta', sub, orig: 'x', methods: ['otp'] },
        h.clock.t,
      );
      return h.post('/customers/auth/stepup/otp', { challengeToken: ch }, bearer(t.accessToken));
    };
    for (let i = 0; i < stepUpCodesPerDay; i++)
      assert.equal((await stepUpSend()).status, 202, `step-up code ${i + 1}`);
    const over = await stepUpSend();
    assert.equal(over.status, 429);
    assert.ok(Number(over.headers['retry-after']) > 0);
  });

  async function call(path: string, token: string) {
    const { call: c } = await import('../helpers/http.ts');
    return c(h.origin, 'DELETE', path, { headers: bearer(token) });
  }
});
