/**
 * Attacks through the dev gateway on "a sign-in the service failed is not the client's fault"
 * (core/identity/throttle.ts judgedAttempt): an attempt admission counted is taken back when the
 * service fails before answering it, and a PIN judged wrong stays counted. Each case is a hole
 * found by trying it, kept so it stays closed, or a probe of what held: the lockout still comes
 * at the fifth wrong PIN (SPEC 8), and an outage locks nobody out.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { installAuditRefusal, type AuditRefusal } from '../helpers/audit-refusal.ts';
import { startE2eStack, type E2eStack } from '../helpers/e2e-stack.ts';
import { callRetrying, signUpCustomer } from '../helpers/gateway.ts';
import type { Res } from '../helpers/http.ts';

describe('attacks on the take-back of sign-ins the service failed', () => {
  let s: E2eStack;
  let refusal: AuditRefusal;

  const login = (phone: string, pin: string): Promise<Res> =>
    callRetrying(s.gw, 'POST', '/customers/auth/login', {
      json: { tenantId: 'demo', phone, pin },
      headers: { 'x-request-id': randomUUID() },
    });
  const lockedOut = (r: Res, what: string) => {
    assert.equal(r.status, 429, `${what}: ${r.text}`);
    assert.equal(r.json?.code, 'LOCKED', `${what}: ${r.text}`);
  };

  before(async () => {
    s = await startE2eStack('attack-outage');
    refusal = await installAuditRefusal(s.tdb.db);
  });
  after(async () => {
    await s?.stop();
  });

  it('a right PIN the service failed once the first lock ran out does not lock the phone again', async () => {
    const phone = '+254700031001';
    await signUpCustomer(s.gw, s.dataDir, phone, '482913', 'attack-outage-1');
    for (let i = 1; i <= 5; i++) assert.equal((await login(phone, '000000')).status, 401, `wrong PIN ${i}`);
    lockedOut(await login(phone, '482913'), 'the fifth wrong PIN locks the phone (SPEC 8)');
    // The 15 minutes pass (the counter keeps its five failures: the next lock is longer).
    const { rowCount } = await s.tdb.db.query(
      `UPDATE auth_throttle SET locked_until = now() - interval '1 second'
       WHERE tenant_id = 'demo' AND scope = 'phone' AND fails = 5 AND locked_until > now()`,
    );
    assert.equal(rowCount, 1);
    // The customer types the right PIN while the service cannot record a sign-in.
    await refusal.refuse('auth.login');
    try {
      const failed = await login(phone, '482913');
      assert.equal(failed.status, 500, failed.text);
    } finally {
      await refusal.clear();
    }
    // That attempt was the service's failure: its admission (the sixth, locking for 30 minutes
    // ahead) is taken back, and with it the lock it set.
    const r = await login(phone, '482913');
    assert.equal(r.status, 200, `the right PIN signs in once the service answers: ${r.text}`);
  });

  it('twelve wrong PINs at once: five are judged, the others refused, and the phone is locked', async () => {
    const phone = '+254700031002';
    await signUpCustomer(s.gw, s.dataDir, phone, '482913', 'attack-outage-2');
    const burst = await Promise.all(Array.from({ length: 12 }, () => login(phone, '000000')));
    const judged = burst.filter((r) => r.status === 401).length;
    for (const r of burst) assert.ok(r.status === 401 || r.status === 429, `${r.status} ${r.text}`);
    assert.equal(judged, 5, 'SPEC 8: the fifth counted failure locks; no guess is judged past it');
    lockedOut(await login(phone, '482913'), 'the right PIN after five wrong ones');
  });
});
