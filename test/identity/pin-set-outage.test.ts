/**
 * The first PIN set of a tenant opens the first wallet, and with it inserts the tenant's ledger
 * catalogue in the same transaction (core/ledger/catalog.ts). When that transaction rolled back
 * (here its record is refused), the catalogue was remembered as inserted anyway: the customer's
 * retry, and every later enrolment in the tenant, was answered 422 UNKNOWN_PRODUCT ("product
 * WALLET_MAIN is not defined") until core restarted.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { installAuditRefusal } from '../helpers/audit-refusal.ts';
import { startHarness, type Harness } from './harness.ts';

describe("a tenant's first PIN set that did not commit", () => {
  let h: Harness;
  before(async () => {
    h = await startHarness([{ id: 'tnew' }]);
  });
  after(async () => h?.close());

  it('is retried with its verification token and enrols the customer', async () => {
    const phone = '+254711800001';
    await h.post('/customers/auth/otp/send', { tenantId: 'tnew', phone });
    const v = await h.post('/customers/auth/otp/verify', {
      tenantId: 'tnew',
      phone,
      otp: h.sms.lastCode(phone),
    });
    assert.equal(v.status, 200, v.text);
    const pinSet = () =>
      h.post('/customers/auth/pin/set', {
        tenantId: 'tnew',
        phone,
        pin: '4826',
        verificationToken: v.json.verificationToken,
      });
    const refusal = await installAuditRefusal(h.tdb.db);
    await refusal.refuse('auth.pin_set');
    const failed = await pinSet();
    assert.equal(failed.status, 500, failed.text);
    await refusal.clear();
    const retried = await pinSet();
    assert.equal(retried.status, 204, retried.text);
    const login = await h.post('/customers/auth/login', { tenantId: 'tnew', phone, pin: '4826' });
    assert.equal(login.status, 200, login.text);
  });
});
