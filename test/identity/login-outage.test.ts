/**
 * A sign-in the service failed is not a wrong PIN (SPEC 8 lockout): the attempt is counted when
 * it is admitted, before the PIN is checked, and a database that does not answer afterwards (the
 * PIN's row unreadable, the signing key unreadable, a record that cannot be written) must not
 * leave it counted. Five such sign-ins once locked the phone out for 15 minutes, and the
 * customer holding the right PIN was answered 429 LOCKED once the database was back. A PIN
 * judged wrong stays counted, whatever becomes of its record.
 */
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { installAuditRefusal } from '../helpers/audit-refusal.ts';
import { outage } from '../helpers/outage.ts';
import { startHarness, type Harness } from './harness.ts';

describe('sign-in while the service fails', () => {
  const down = outage();
  let h: Harness;
  const login = (phone: string, pin: string) =>
    h.post('/customers/auth/login', { tenantId: 'ta', phone, pin });

  before(async () => {
    h = await startHarness([{ id: 'ta' }], {}, down.over);
  });
  afterEach(() => down.end());
  after(async () => h?.close());

  /** More failed sign-ins than the lockout allows (SPEC 8: 5), each answered 503, then the right PIN. */
  async function failSixTimesThenSignIn(phone: string, pin: string): Promise<void> {
    for (let i = 0; i < 6; i++) {
      const r = await login(phone, pin);
      assert.equal(r.status, 503, `attempt ${i + 1}: ${r.text}`);
      assert.equal(r.json.code, 'SERVICE_UNAVAILABLE');
      assert.equal(r.headers['retry-after'], '1');
    }
    down.end();
    const r = await login(phone, pin);
    assert.equal(r.status, 200, `the right PIN signs in once the database answers: ${r.text}`);
  }

  it('a PIN whose row could not be read is not counted', async () => {
    const phone = '+254711600001';
    await h.onboard('ta', phone, '4826');
    down.fail(/LEFT JOIN credentials cr/);
    await failSixTimesThenSignIn(phone, '4826');
  });

  it('a right PIN whose access token could not be signed (the signing key unreadable) is not counted', async () => {
    const phone = '+254711600002';
    await h.onboard('ta', phone, '4826');
    h.keys.invalidate('ta');
    down.fail(/SELECT kid, private_enc FROM signing_keys/);
    await failSixTimesThenSignIn(phone, '4826');
  });

  it('a right PIN whose success record could not be written is not counted; a wrong one whose record failed is', async () => {
    const phone = '+254711600003';
    const other = '+254711600004';
    await h.onboard('ta', phone, '4826');
    await h.onboard('ta', other, '4826');
    const refusal = await installAuditRefusal(h.tdb.db);
    await refusal.refuse('auth.login');
    try {
      for (let i = 0; i < 6; i++) {
        assert.equal((await login(phone, '4826')).status, 500, 'the record is refused');
        assert.equal((await login(other, '1357')).status, 500, 'the record is refused');
      }
    } finally {
      await refusal.clear();
    }
    assert.equal((await login(phone, '4826')).status, 200, 'the right PIN was never a failure');
    const locked = await login(other, '4826');
    assert.equal(locked.status, 429, `five wrong PINs lock the phone: ${locked.text}`);
    assert.equal(locked.json.code, 'LOCKED');
  });
});
