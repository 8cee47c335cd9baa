import assert from 'node:assert/strict';
import { createPrivateKey, randomUUID, sign, type JsonWebKey } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { proofMessage } from '../../core/agents/device.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, type Res } from '../helpers/http.ts';
import { journey, type Customer, type Journey } from '../helpers/journey.ts';

/**
 * Issue 13 item 1 says a SIM swap gives an attacker the OTPs, so nothing an OTP alone can do may
 * let a new factor authorise money before a cool-off, and a PIN change is one of the actions that
 * change who can authorise money. Through the gateway: an attacker who receives the victim's SMS
 * (and nothing else) resets the PIN with an enrolment OTP and sends money by USSD with that PIN at
 * once. The victim's money must not move.
 */
describe('a PIN reset by SMS alone does not authorise money at once (through the gateway)', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let j: Journey;
  let demo: {
    serviceTokens: Record<string, { token: string }>;
    agent: { agentCode: string; pin: string; deviceId: string; devicePrivateJwk: JsonWebKey };
  };
  let agentToken = '';
  let victim: Customer;
  let friend: Customer;

  const agentHeaders = () => ({
    authorization: `Bearer ${agentToken}`,
    'x-device-id': demo.agent.deviceId,
    'idempotency-key': `e2e-${randomUUID()}`,
  });

  async function agentLogin(): Promise<string> {
    const a = demo.agent;
    const key = createPrivateKey({ key: a.devicePrivateJwk, format: 'jwk' });
    let r: Res | undefined;
    for (let i = 0; i < 4 && (!r || r.status === 503); i++) {
      const timestamp = String(Date.now());
      const signature = sign(
        null,
        Buffer.from(proofMessage('agent-login', 'demo', a.agentCode, a.deviceId, timestamp)),
        key,
      ).toString('base64url');
      r = await call(gw, 'POST', '/v1/agent/auth/login', {
        json: {
          tenantId: 'demo',
          agentCode: a.agentCode,
          pin: a.pin,
          device: { deviceId: a.deviceId, timestamp, signature },
        },
      });
    }
    assert.equal(r?.status, 200, r?.text);
    return r?.json.accessToken as string;
  }

  /** An agent registers the customer (KYC), as USSD money needs. */
  async function kyc(c: Customer, idNumber: string): Promise<void> {
    assert.equal(
      (await call(gw, 'POST', '/customers/auth/otp/send', { json: { tenantId: 'demo', phone: c.phone } }))
        .status,
      202,
    );
    assert.equal(
      (
        await call(gw, 'POST', '/customers/auth/otp/verify', {
          json: { tenantId: 'demo', phone: c.phone, otp: await j.lastCode(c.phone) },
        })
      ).status,
      200,
    );
    const r = await call(gw, 'POST', '/v1/kyc/customers', {
      json: {
        phone: c.phone,
        fullName: 'Wanjiku Kamau',
        idType: 'NATIONAL_ID',
        idNumber,
        dateOfBirth: '1992-04-05',
      },
      headers: agentHeaders(),
    });
    assert.equal(r.status, 201, r.text);
  }

  const ussd = (phone: string, text: string) =>
    call(gw, 'POST', '/v1/ussd/session', {
      body: new URLSearchParams({
        sessionId: `gw-${randomUUID()}`,
        serviceCode: '*384*7#',
        phoneNumber: phone,
        text,
      }).toString(),
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        authorization: `Bearer ${demo.serviceTokens.ussd?.token}`,
      },
    });

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-attack-simswap-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    stack = await startStack(config, { checkResponses: true, checkTimeoutMs: 3000 });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8'));
    j = journey(gw, dataDir, tdb.db, JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')));
    agentToken = await agentLogin();
    const courses = await call(gw, 'GET', '/v1/training/courses', { headers: agentHeaders() });
    const course = courses.json.items.find((c: { unlocks: string | null }) => c.unlocks === 'kyc.register');
    const answers = [
      { questionId: 'q1', choice: 1 },
      { questionId: 'q2', choice: 0 },
      { questionId: 'q3', choice: 1 },
      { questionId: 'q4', choice: 1 },
    ];
    assert.equal(
      (
        await call(gw, 'POST', `/v1/training/quizzes/${course.quiz.id}/submit`, {
          json: { answers },
          headers: agentHeaders(),
        })
      ).status,
      200,
    );
    victim = await j.signUp('+254733000501');
    friend = await j.signUp('+254733000502');
    await kyc(victim, 'SIMSWAP0001');
    await kyc(friend, 'SIMSWAP0002');
    await j.fund(victim.wallet, '500.00');
    // The victim's own PIN works on USSD (the channel is in order before the attack).
    assert.match((await ussd(victim.phone, '1*4826')).text, /balance is KES 500\.00/);
  });
  after(async () => {
    await stack?.stop();
    await tdb?.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it("the attacker with the victim's SMS resets the PIN, then USSD send money with it moves nothing", async () => {
    // The SIM swapper: the victim's SMS arrive on the attacker's SIM; nothing else is known.
    assert.equal(
      (
        await call(gw, 'POST', '/customers/auth/otp/send', {
          json: { tenantId: 'demo', phone: victim.phone },
        })
      ).status,
      202,
    );
    const v = await call(gw, 'POST', '/customers/auth/otp/verify', {
      json: { tenantId: 'demo', phone: victim.phone, otp: await j.lastCode(victim.phone) },
    });
    assert.equal(v.status, 200, v.text);
    const reset = await call(gw, 'POST', '/customers/auth/pin/set', {
      json: {
        tenantId: 'demo',
        phone: victim.phone,
        pin: '1357',
        verificationToken: v.json.verificationToken,
      },
    });
    // Whether the reset is refused or accepted with a hold, the new PIN must not move money now.
    if (reset.status === 204) {
      const sent = await ussd(victim.phone, `2*${friend.phone}*400*1357`);
      assert.equal(sent.status, 200, sent.text);
      assert.doesNotMatch(sent.text, /^END Sent/, `money left the wallet: ${sent.text}`);
    }
    assert.equal(await j.balance(victim.wallet), 500_000_000n, "the victim's balance is untouched");
    assert.equal(await j.balance(friend.wallet), 0n);
  });

  it('during the hold the new PIN reads but approves no cash-out, each refusal is audited and the phone was told; after the hold it sends', async () => {
    const held = await tdb.db.query<{ u: Date | null }>(
      `SELECT cr.pin_reset_hold_until AS u FROM credentials cr JOIN customers c ON c.tenant_id = cr.tenant_id AND c.id = cr.customer_id WHERE c.tenant_id = 'demo' AND c.phone_e164 = $1`,
      [victim.phone],
    );
    assert.ok(held.rows[0]?.u, 'the reset above was accepted with a hold');
    // Reads (and the app sign-in) are AAL 1: not held.
    assert.match((await ussd(victim.phone, '1*1357')).text, /balance is KES 500\.00/);
    const co = await call(gw, 'POST', '/v1/txns/cashout', {
      json: { customerPhone: victim.phone, amount: '100.00' },
      headers: agentHeaders(),
    });
    assert.equal(co.status, 202, co.text);
    assert.match(
      (await ussd(victim.phone, '3*1*1357')).text,
      /^END Your PIN was changed recently\. For your safety it can approve payments from/,
    );
    assert.equal(await j.balance(victim.wallet), 500_000_000n);
    const refusals = await tdb.db.query<{ action: string; allow: boolean }>(
      `SELECT action, (decision->>'allow')::boolean AS allow FROM audit_log WHERE tenant_id = 'demo' AND attrs->>'outcome' = 'pin_reset_hold' ORDER BY id`,
    );
    assert.deepEqual(refusals.rows, [
      { action: 'ussd.transfer', allow: false },
      { action: 'ussd.cashout_approve', allow: false },
    ]);
    const inbox = (await readFile(join(dataDir, 'dev-sms.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { to: string; code?: string; text: string });
    const notices = inbox.filter((m) => m.to === victim.phone && /PIN was changed/.test(m.text));
    assert.equal(notices.length, 1, 'the verified phone is told once');
    assert.equal(notices[0]?.code, undefined);
    assert.doesNotMatch(notices[0]?.text ?? '', /1357/);

    // The cool-off has passed (the stack's clock is real: the hold is moved into the past).
    await tdb.db.query(
      `UPDATE credentials SET pin_reset_hold_until = now() - interval '1 second' WHERE tenant_id = 'demo' AND pin_reset_hold_until IS NOT NULL`,
    );
    assert.match((await ussd(victim.phone, `2*${friend.phone}*100*1357`)).text, /^END Sent KES 100\.00/);
    assert.equal(await j.balance(friend.wallet), 100_000_000n);
  });
});
