/**
 * A right PIN overtaken by a lock (core/identity/throttle.ts settleSuccess) is answered 429 LOCKED
 * with the wait an attempt refused at the same moment is told, and its refusal is recorded after
 * the attempts that made the lock. It was judged against the time its PIN was judged, before the
 * wait for its settlement: its Retry-After overstated the lock by that gap (more than the lock's
 * own length: a tell no refused attempt gives) and its record came before the lock's cause.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { loginPolicy } from '../../core/identity/throttle.ts';
import { queryHold } from '../helpers/query-hold.ts';
import { startHarness, type Harness } from './harness.ts';

const pin = '4826';
/** The settlement's counter locks; the admission's two (address, phone) run first. */
const settlementCounters = /INSERT INTO auth_throttle/;
const admissionLocks = 2;

describe('a right PIN overtaken by a lock while it waited to settle', () => {
  const hold = queryHold();
  let h: Harness;
  before(async () => {
    h = await startHarness([{ id: 'ta' }], {}, hold.over);
  });
  after(async () => h?.close());

  const login = (phone: string, p: string, device?: string) =>
    h.post(
      '/customers/auth/login',
      { tenantId: 'ta', phone, pin: p },
      device ? { 'x-device-id': device } : {},
    );

  it('is told the wait left when it settles, like an attempt refused then, and recorded then', async () => {
    const phone = '+254711840001';
    await h.onboard('ta', phone, pin);
    const held = hold.arm(settlementCounters, admissionLocks);
    const right = login(phone, pin);
    await held;
    // A minute on, the customer's other device signs in (a new count), then five wrong PINs lock.
    h.clock.t += 60_000;
    assert.equal((await login(phone, pin, 'other-phone')).status, 200);
    for (let i = 0; i < loginPolicy.threshold; i++) assert.equal((await login(phone, '0000')).status, 401);
    const lockedAt = h.clock.t;
    const refused = await login(phone, pin);
    assert.equal(refused.status, 429, refused.text);
    hold.release();
    const r = await right;

    assert.equal(r.status, 429, r.text);
    assert.equal(r.json.code, 'LOCKED');
    assert.equal(
      r.headers['retry-after'],
      refused.headers['retry-after'],
      'the wait an attempt refused then is told',
    );
    assert.equal(r.headers['retry-after'], String(loginPolicy.lockMs / 1000));
    const { rows } = await h.tdb.db.query<{ ts: Date }>(
      `SELECT ts FROM audit_log WHERE tenant_id = 'ta' AND action = 'auth.login'
          AND attrs->>'outcome' = 'locked' AND actor->>'type' = 'customer'`,
    );
    assert.deepEqual(
      rows.map((x) => x.ts.getTime()),
      [lockedAt],
      'its refusal is recorded when it was answered, after the wrong PINs',
    );
  });
});
