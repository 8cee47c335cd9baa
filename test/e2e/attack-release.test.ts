import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { TestDb } from '../helpers/db.ts';
import { releaseLapsedPayers } from '../../core/payments/lapsed-payers.ts';
import { startE2eStack, type E2eStack } from '../helpers/e2e-stack.ts';
import { call } from '../helpers/http.ts';
import { payerTuple, tupleAdmin } from '../helpers/tuples.ts';
import { journey, type Customer, type Demo, type Journey } from '../helpers/journey.ts';

/**
 * Attacks on the release of a delegate's pending transfers when its payer tuple is deleted or
 * lapses (SPEC 2.7 `payer`, issue 20 item 3), through the dev gateway with the demo tenant's
 * administrator token.
 */
describe('attack: payer tuple delete and lapse release', () => {
  let e2e: E2eStack;
  let tdb: TestDb;
  let gw: string;
  let j: Journey;
  let adminToken = '';
  let alice: Customer;
  let bob: Customer;
  let carol: Customer;
  let aliceToCarol = '';

  const admin = () => tupleAdmin(gw, () => adminToken);
  const grant = (subject: Customer, owner: string, caveat?: Record<string, unknown>) =>
    admin().write(payerTuple(subject.id, owner, caveat));
  const revoke = (subject: Customer, owner: string) => admin().remove(payerTuple(subject.id, owner));

  before(async () => {
    e2e = await startE2eStack('atkrel');
    ({ tdb, gw } = e2e);
    const demo = e2e.demo as Demo & { serviceTokens: Record<'admin', { token: string }> };
    adminToken = demo.serviceTokens.admin.token;
    j = journey(gw, e2e.dataDir, tdb.db, demo);
    alice = await j.signUp('+254711500001');
    bob = await j.signUp('+254711500002');
    carol = await j.signUp('+254711500003');
    const ben = await j.addPayee(alice, carol.phone, 'Carol');
    assert.equal(ben.status, 201, ben.text);
    aliceToCarol = ben.json.id;
    for (const c of [alice, bob]) await j.fund(c.wallet, '10000.00');
  });
  after(() => e2e?.stop());

  for (const expiresAt of ['2300-01-01T00:00:00Z', '9999-12-31T23:59:59-15:59']) {
    it(`a payer tuple expiring at ${expiresAt} is refused or judged: never a 503 for the delegate, never a broken sweep`, async () => {
      const made = await grant(alice, bob.id, { expires_at: expiresAt });
      if (made.status === 422) {
        // Refused outright (422) is one answer; but a live tuple rewritten to it must not break the sweep.
        assert.equal(made.json.code, 'TUPLE_INVALID', made.text);
        assert.equal((await grant(alice, bob.id)).status, 201);
        const t = await j.transfer(alice, aliceToCarol, '1.00', 'device', { payerCustomerId: bob.id });
        assert.equal(t.final.status, 200, t.final.text);
        const rewrite = await grant(alice, bob.id, { expires_at: expiresAt });
        if (rewrite.status !== 422) await releaseLapsedPayers(tdb.db, Date.now());
        assert.equal(rewrite.status, 422, rewrite.text);
        assert.equal((await revoke(alice, bob.id)).status, 200);
      } else {
        assert.equal(made.status, 201, made.text);
        const own = await call(gw, 'GET', '/v1/accounts', { headers: j.bearer(alice) });
        assert.equal(own.status, 200, own.text);
        const t = await j.transfer(alice, aliceToCarol, '1.00', 'device', { payerCustomerId: bob.id });
        assert.equal(t.final.status, 200, t.final.text);
        await releaseLapsedPayers(tdb.db, Date.now());
        const del = await revoke(alice, bob.id);
        assert.equal(del.status, 200, del.text);
      }
    });
  }
});
