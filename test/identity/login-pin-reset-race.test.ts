/**
 * A PIN reset (OTP verification, then POST /customers/auth/pin/set) revokes every session of the
 * customer. A login with the old PIN that was judged right before the reset and settles after it
 * must not open a session the reset did not see: whoever kept the old PIN (the reason for the
 * reset) would keep the account, and its refresh token, past it. Both orders are held
 * deterministically: the login held at its settlement's first statement, after its PIN was read
 * and judged, while the reset commits; or held once its settlement began, while the reset waits
 * for it (and then revokes the session it opened).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { decodeJwt } from 'jose';
import { PinHasher } from '../../core/identity/pin.ts';
import { SecretStore } from '../../core/identity/secrets.ts';
import { queryHold } from '../helpers/query-hold.ts';
import { bearer, setPinByOtp, startHarness, type Harness } from './harness.ts';

const oldPin = '4826';
const newPin = '7391';
/** The admission's two counter locks (throttle.ts lockRows: address, phone) run before either. */
const admissionLocks = 2;
/** The settlement's first statement: its credential check, or (without one) its counter locks. */
const settlementStart = /SELECT 1 FROM credentials|INSERT INTO auth_throttle/;
/** The settlement's counter locks, after its credential check. */
const settlementCounters = /INSERT INTO auth_throttle/;

describe('a login judged with the old PIN and settled after a PIN reset', () => {
  const hold = queryHold();
  let h: Harness;
  before(async () => {
    h = await startHarness([{ id: 'ta' }], {}, hold.over);
  });
  after(async () => h?.close());

  const login = (phone: string, pin: string) =>
    h.post('/customers/auth/login', { tenantId: 'ta', phone, pin });
  const reset = (phone: string, pin: string) => setPinByOtp(h.post, h.sms, 'ta', phone, pin);

  const liveSessions = async (phone: string) =>
    (
      await h.tdb.db.query<{ id: string }>(
        `SELECT s.id FROM sessions s JOIN customers c ON c.tenant_id = s.tenant_id AND c.id::text = s.subject_id
          WHERE s.tenant_id = 'ta' AND c.phone_e164 = $1 AND s.revoked_at IS NULL`,
        [phone],
      )
    ).rows;
  /** Whether a statement of the test database waits for a lock (the reset behind the held login). */
  const waiting = async () =>
    (
      await h.tdb.db.query(
        `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
      )
    ).rows.length > 0;

  it('the reset first: opens no session; the old PIN is answered as wrong, stays counted and is audited naming the customer', async () => {
    const phone = '+254711820001';
    const first = await h.onboard('ta', phone, oldPin);
    const held = hold.arm(settlementStart, admissionLocks);
    const racing = login(phone, oldPin);
    await held;
    await reset(phone, newPin);
    hold.release();
    const r = await racing;

    assert.equal(r.status, 401, `the old PIN opens nothing after the reset: ${r.status} ${r.text}`);
    assert.equal(r.json.code, 'INVALID_CREDENTIALS');
    assert.equal(r.json.accessToken, undefined);
    assert.deepEqual(await liveSessions(phone), [], 'no live session of the customer after the reset');
    const sessions = await h.get('/customers/sessions', bearer(first.accessToken));
    assert.equal(sessions.status, 401, 'the session before the reset is revoked');

    const { rows: audit } = await h.tdb.db.query<{ actor: string; allow: boolean }>(
      `SELECT actor->>'type' AS actor, (decision->>'allow')::boolean AS allow FROM audit_log
        WHERE tenant_id = 'ta' AND action = 'auth.login' AND attrs->>'outcome' = 'pin_changed'`,
    );
    assert.deepEqual(audit, [{ actor: 'customer', allow: false }], 'the refusal names the customer');
    const { rows: counted } = await h.tdb.db.query<{ fails: number }>(
      `SELECT fails FROM auth_throttle WHERE tenant_id = 'ta' AND scope = 'phone'`,
    );
    assert.deepEqual(counted, [{ fails: 1 }], 'counted like any wrong PIN');

    const fresh = await login(phone, newPin);
    assert.equal(fresh.status, 200, `the new PIN signs in: ${fresh.text}`);
  });

  it('the login first: the reset waits for its settlement and revokes the session it opened', async () => {
    const phone = '+254711820002';
    await h.onboard('ta', phone, oldPin);
    const held = hold.arm(settlementCounters, admissionLocks);
    const racing = login(phone, oldPin);
    await held;
    let done = false;
    const resetting = reset(phone, newPin).then(() => {
      done = true;
    });
    while (!done && !(await waiting())) await new Promise((r) => setTimeout(r, 5));
    hold.release();
    const [r] = await Promise.all([racing, resetting]);
    assert.equal(r.status, 200, `judged and settled before the reset: ${r.text}`);
    assert.deepEqual(await liveSessions(phone), [], 'the reset revoked the session the old PIN opened');
    const refreshed = await h.post('/customers/auth/token/refresh', {
      tenantId: 'ta',
      refreshToken: r.json.refreshToken,
    });
    assert.equal(refreshed.status, 401, `its refresh token went with it: ${refreshed.text}`);
  });

  it('a rehash of the same PIN meanwhile (a newer kdf_version) is no reset: the login stands', async () => {
    const phone = '+254711820003';
    const sub = decodeJwt((await h.onboard('ta', phone, oldPin)).accessToken).sub;
    const pepper = (await new SecretStore(h.tdb.db, h.keys).get('ta'))?.pin;
    assert.ok(pepper);
    const legacy = await new PinHasher().hash(oldPin, pepper, 1);
    await h.tdb.db.query(
      'UPDATE credentials SET pin_hash = $2, pin_salt = $3, kdf_version = 1 WHERE customer_id = $1',
      [sub, legacy.hash, legacy.salt],
    );
    const held = hold.arm(settlementStart, admissionLocks);
    const racing = login(phone, oldPin);
    await held;
    // Another login with the same PIN settles and has the legacy hash replaced in the background.
    assert.equal((await login(phone, oldPin)).status, 200);
    const version = async () =>
      (
        await h.tdb.db.query<{ kdf_version: number }>(
          'SELECT kdf_version FROM credentials WHERE customer_id = $1',
          [sub],
        )
      ).rows[0]?.kdf_version;
    for (let i = 0; i < 200 && (await version()) === 1; i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(await version(), 2, 'rehashed');
    hold.release();
    const r = await racing;
    assert.equal(r.status, 200, `the same PIN, rehashed: ${r.text}`);
  });
});
