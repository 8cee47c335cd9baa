/**
 * The customer's PIN typed on the USSD menu shares the app login's lockout counter (the phone).
 * A right PIN admitted before the phone's window ran out and judged after wrong PINs locked it
 * (core/identity/throttle.ts settleSuccess) ends the session with the lock's wording: no balance,
 * the lock kept, its refusal audited naming the customer. Held deterministically at its
 * settlement, once its PIN was judged.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { loginPolicy, phonePolicy } from '../../core/identity/throttle.ts';
import { viaEdge } from '../helpers/edge-auth.ts';
import { call } from '../helpers/http.ts';
import { queryHold } from '../helpers/query-hold.ts';
import { setPinByOtp } from '../identity/harness.ts';
import { startAgentHarness, type AgentHarness } from './harness.ts';

const pin = '2580';
/** The USSD PIN's settlement locks the phone's counter again (its admission locked it once). */
const settlementCounter = /INSERT INTO auth_throttle/;

describe('a USSD customer PIN overtaken by a lock', () => {
  const hold = queryHold();
  let h: AgentHarness;
  before(async () => {
    h = await startAgentHarness(['ta'], hold.over);
  });
  after(async () => h?.close());

  const ussd = (phone: string, text: string) =>
    call(h.origin, 'POST', '/v1/ussd/session', {
      body: new URLSearchParams({
        sessionId: `s-${randomUUID()}`,
        serviceCode: '*384*7#',
        phoneNumber: phone,
        text,
      }).toString(),
      headers: viaEdge({
        'content-type': 'application/x-www-form-urlencoded',
        'x-tenant-id': 'ta',
        'x-principal-id': 'service-token:ussd-gw',
        'x-roles': 'ussd',
      }),
    });
  const login = (phone: string, p: string) =>
    h.post('/customers/auth/login', { tenantId: 'ta', phone, pin: p });

  it("held across the window's end while five wrong PINs lock the phone: the session ends locked, no balance", async () => {
    const phone = '+254722840001';
    await setPinByOtp(h.post, h.sms, 'ta', phone, pin);
    assert.equal((await login(phone, pin)).status, 200, 'the sign-in opens the window');
    const windowEnd = h.clock.t + phonePolicy.windowMs;
    h.clock.t = windowEnd - 1000;
    const held = hold.arm(settlementCounter, 1);
    const right = ussd(phone, `1*${pin}`);
    await held;
    h.clock.t = windowEnd;
    for (let i = 0; i < loginPolicy.threshold; i++) assert.equal((await login(phone, '0000')).status, 401);
    hold.release();
    const r = await right;

    assert.equal(r.status, 200, r.text);
    assert.equal(r.text, 'END Too many wrong PINs. Please try again later.');
    const { rows } = await h.tdb.db.query<{ fails: number; locked: boolean }>(
      `SELECT fails, locked_until > to_timestamp($1 / 1000.0) AS locked FROM auth_throttle WHERE tenant_id = 'ta' AND scope = 'phone'`,
      [h.clock.t],
    );
    assert.deepEqual(rows, [{ fails: loginPolicy.threshold, locked: true }], 'the lock stays');
    const audit = await h.tdb.db.query<{ actor: string; allow: boolean }>(
      `SELECT actor->>'type' AS actor, (decision->>'allow')::boolean AS allow FROM audit_log
        WHERE tenant_id = 'ta' AND action = 'auth.ussd_pin' AND attrs->>'outcome' = 'locked'`,
    );
    assert.deepEqual(audit.rows, [{ actor: 'customer', allow: false }], 'its refusal names the customer');
  });
});
