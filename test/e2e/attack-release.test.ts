import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
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
  let dave: Customer;
  let bobToCarol = '';

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
    dave = await j.signUp('+254711500004');
    const bobs = await j.addPayee(bob, carol.phone, 'Carol');
    assert.equal(bobs.status, 201, bobs.text);
    bobToCarol = bobs.json.id;
    for (const c of [alice, bob, dave]) await j.fund(c.wallet, '10000.00');
  });
  after(() => e2e?.stop());

  for (const expiresAt of ['2300-01-01T00:00:00Z', '9999-12-31T23:59:59.999Z', '9999-12-31T23:59:59-15:59']) {
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

  const statusOf = async (id: string) =>
    (await tdb.db.query<{ status: string }>('SELECT status FROM transfers WHERE id = $1', [id])).rows[0]
      ?.status;
  const holdsOf = async (id: string) =>
    (
      await tdb.db.query<{ status: string }>(
        `SELECT DISTINCT h.status FROM ledger_holds h JOIN transfers t ON h.id IN (t.amount_hold_id, t.fee_hold_id) WHERE t.id = $1`,
        [id],
      )
    ).rows.map((r) => r.status);

  it("a delete, a second delete and the confirm at once, then the tuple re-created and the confirm retried: one outcome, only that owner's delegated transfer released, never the owner's own nor another owner's", async () => {
    assert.equal((await grant(alice, bob.id)).status, 201);
    assert.equal((await grant(alice, dave.id)).status, 201);
    const fromBob = await j.transfer(alice, aliceToCarol, '40.00', 'device', { payerCustomerId: bob.id });
    assert.equal(fromBob.final.status, 200, fromBob.final.text);
    const fromDave = await j.transfer(alice, aliceToCarol, '41.00', 'device', { payerCustomerId: dave.id });
    assert.equal(fromDave.final.status, 200, fromDave.final.text);
    const bobsOwn = await j.transfer(bob, bobToCarol, '42.00');
    assert.equal(bobsOwn.final.status, 200, bobsOwn.final.text);
    const id = fromBob.final.json.id as string;
    const confirm = () =>
      call(gw, 'POST', '/v1/transfers/confirm', {
        json: { transferId: id, payerCustomerId: bob.id },
        headers: { ...j.bearer(alice, fromBob.token), 'idempotency-key': `cf-${randomUUID()}` },
      });
    const [d1, d2, c1] = await Promise.all([revoke(alice, bob.id), revoke(alice, bob.id), confirm()]);
    assert.deepEqual([d1.status, d2.status].sort(), [200, 404], `${d1.text} ${d2.text}`);
    assert.ok([200, 403].includes(c1.status), c1.text);
    assert.equal((await grant(alice, bob.id)).status, 201);
    const c2 = await confirm();
    const status = await statusOf(id);
    if (c1.status === 200) {
      assert.equal(status, 'POSTED');
      assert.deepEqual(await holdsOf(id), ['captured']);
    } else {
      assert.equal(c2.status, 409, c2.text);
      assert.equal(c2.json.code, 'TRANSFER_NOT_PENDING');
      assert.equal(status, 'FAILED');
      assert.deepEqual(await holdsOf(id), ['voided']);
      // Released once, by whoever deleted the tuple (the admin's token), as that delete is audited.
      const audit = await tdb.db.query<{ action: string; actor: unknown }>(
        `SELECT action, actor FROM audit_log WHERE (action = 'transfer.release' AND target->>'id' = $1)
            OR (action = 'tuple.delete' AND attrs->'released_transfer_ids' ? $1)`,
        [id],
      );
      assert.deepEqual(audit.rows.map((r) => r.action).sort(), ['transfer.release', 'tuple.delete']);
      assert.deepEqual(audit.rows[0]?.actor, audit.rows[1]?.actor);
      assert.equal((audit.rows[0]?.actor as { type: string }).type, 'staff');
    }
    assert.equal(
      await statusOf(fromDave.final.json.id),
      'PENDING',
      "another owner's delegated transfer stays",
    );
    assert.deepEqual(await holdsOf(fromDave.final.json.id), ['pending']);
    assert.equal(await statusOf(bobsOwn.final.json.id), 'PENDING', "the owner's own transfer stays");
    assert.deepEqual(await holdsOf(bobsOwn.final.json.id), ['pending']);
    assert.equal(await releaseLapsedPayers(tdb.db, Date.now()), 0, 'the sweep finds nothing to release');
    const unbalanced = await tdb.db.query(
      `SELECT posting_id FROM ledger_entries WHERE tenant_id = 'demo' GROUP BY posting_id, currency
       HAVING sum(CASE side WHEN 'debit' THEN amount ELSE -amount END) <> 0`,
    );
    assert.equal(unbalanced.rowCount, 0);
  });

  it('refuses an ip_ranges caveat naming an IPv6 zone (fe80::1%eth0/64): the policy never matches it, so the delegation would be paused everywhere while the API said it was written', async () => {
    for (const ranges of [['fe80::1%eth0/64'], ['10.0.0.0/8', 'fe80::1%25eth0']]) {
      const made = await grant(alice, dave.id, { ip_ranges: ranges });
      assert.equal(made.status, 422, made.text);
      assert.equal(made.json.code, 'TUPLE_INVALID');
    }
  });
});
