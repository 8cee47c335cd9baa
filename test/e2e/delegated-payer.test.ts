import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { TestDb } from '../helpers/db.ts';
import { releaseLapsedPayers } from '../../core/payments/lapsed-payers.ts';
import { releaseDelegation } from '../../core/payments/revocation.ts';
import { startE2eStack, type E2eStack } from '../helpers/e2e-stack.ts';
import { call, type Res } from '../helpers/http.ts';
import { journey, type Customer, type Demo, type Journey } from '../helpers/journey.ts';

/**
 * Issue 20 item 3 (SPEC 2.7 `payer`) through the dev gateway, nothing mocked: a customer holding
 * a `payer` tuple over another moves money out of that customer's wallet with their own
 * request-bound step-up and device signature; refused without the tuple (at the edge, and by
 * core when the edge is bypassed), for another tenant's customer, outside the tuple's caveat and
 * after the tuple is deleted; both customers' limits apply; a replay moves nothing twice.
 */
describe('delegated payer transfers through the gateway', () => {
  let e2e: E2eStack;
  let tdb: TestDb;
  let gw: string;
  let core: string;
  let j: Journey;
  let adminToken = '';
  /** alice pays for bob (the tuple); carol is alice's payee; dave has no tuple over anyone. */
  let alice: Customer;
  let bob: Customer;
  let carol: Customer;
  let dave: Customer;
  let aliceToCarol = '';

  const payerTuple = (subject: Customer, owner: string, caveat?: Record<string, unknown>) => ({
    subject: { ns: 'customer', id: subject.id },
    relation: 'payer',
    object: { ns: 'customer', id: owner },
    ...(caveat ? { caveat } : {}),
  });
  const tuples = (op: 'PUT' | 'POST', path: string, json: unknown): Promise<Res> =>
    call(gw, op, path, {
      json,
      headers: {
        authorization: `Bearer ${adminToken}`,
        'x-request-id': randomUUID(),
        'idempotency-key': `tp-${randomUUID()}`,
      },
    });
  const grant = (subject: Customer, owner: string, caveat?: Record<string, unknown>) =>
    tuples('PUT', '/v1/tenants/demo/tuples', payerTuple(subject, owner, caveat));
  const revoke = (subject: Customer, owner: string) =>
    tuples('POST', '/v1/tenants/demo/tuples:delete', payerTuple(subject, owner));
  const revokeWith = (subject: Customer, owner: string, key: string) =>
    call(gw, 'POST', '/v1/tenants/demo/tuples:delete', {
      json: payerTuple(subject, owner),
      headers: {
        authorization: `Bearer ${adminToken}`,
        'x-request-id': randomUUID(),
        'idempotency-key': key,
      },
    });
  /** The owner's wallet's available balance, as the owner reads it through the gateway. */
  const available = async (c: Customer): Promise<string> => {
    const r = await call(gw, 'GET', '/v1/accounts', { headers: j.bearer(c) });
    assert.equal(r.status, 200, r.text);
    const wallet = r.json.items.find((a: { id: string }) => a.id === c.wallet);
    return wallet.balances.available as string;
  };
  const statusOf = async (transferId: string) =>
    (await tdb.db.query<{ status: string }>('SELECT status FROM transfers WHERE id = $1', [transferId]))
      .rows[0]?.status;
  /** Until a backend of this database waits for a lock in a statement containing `text` (10 s at most). */
  async function waitingOn(text: string): Promise<void> {
    const until = Date.now() + 10_000;
    for (;;) {
      const { rows } = await tdb.db.query(
        `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND position($1 in query) > 0`,
        [text],
      );
      if (rows.length > 0) return;
      assert.ok(Date.now() < until, `no statement waits on a lock in ${text}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  /** A new payer tuple alice → bob, and a pending transfer alice makes from bob's wallet under it. */
  async function grantedTransfer(amount: string) {
    const made = await grant(alice, bob.id);
    assert.equal(made.status, 201, made.text);
    const tr = await delegated(alice, aliceToCarol, amount, bob.id);
    assert.equal(tr.final.status, 200, tr.final.text);
    return { tr, id: tr.final.json.id as string };
  }
  /** Until another transaction holds transfer `id`'s row lock (10 s at most). */
  async function rowLocked(id: string): Promise<void> {
    const until = Date.now() + 10_000;
    for (;;) {
      const locked = await tdb.db.query('SELECT 1 FROM transfers WHERE id = $1 FOR UPDATE NOWAIT', [id]).then(
        () => false,
        (err: { code?: string }) => err.code === '55P03',
      );
      if (locked) return;
      assert.ok(Date.now() < until, `nothing locks transfer ${id}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  /** The distinct states of a transfer's holds (amount, and fee when there is one). */
  const holdStatuses = async (transferId: string) =>
    (
      await tdb.db.query<{ status: string }>(
        `SELECT DISTINCT h.status FROM ledger_holds h JOIN transfers t ON h.id IN (t.amount_hold_id, t.fee_hold_id)
          WHERE t.id = $1`,
        [transferId],
      )
    ).rows.map((r) => r.status);
  const confirm = (c: Customer, token: string, transferId: string, payerCustomerId?: string) =>
    call(gw, 'POST', '/v1/transfers/confirm', {
      json: { transferId, ...(payerCustomerId ? { payerCustomerId } : {}) },
      headers: { ...j.bearer(c, token), 'idempotency-key': `cf-${randomUUID()}` },
    });
  /** A delegated transfer from `owner`'s wallet, straight to core: no edge decision at all. */
  async function direct(c: Customer, beneficiaryId: string, owner: string, amount: string): Promise<Res> {
    const reference = `d-${randomUUID().slice(0, 8)}`;
    const body = { amount, currency: 'KES', beneficiaryId, reference, payerCustomerId: owner };
    const payload = JSON.stringify(body);
    // Identity headers without the edge's secret claim nothing: core verifies the token itself.
    const headers = {
      ...j.intent(c, body, payload),
      'idempotency-key': `dr-${randomUUID()}`,
      'x-principal-id': c.id,
      'x-tenant-id': 'demo',
      'x-aal': '2',
    };
    const send = (token: string) =>
      call(core, 'POST', '/v1/transfers', { json: body, headers: { ...j.bearer(c, token), ...headers } });
    const first = await send(c.access);
    assert.equal(first.status, 403, first.text);
    assert.equal(first.json.code, 'MFA_REQUIRED', 'core asks for the step-up itself');
    return send(await j.stepUp(c, first.json.challenge, 'device'));
  }
  /**
   * A transfer from `owner`'s wallet, repeated while the edge still answers as before a tuple
   * change (its cache drops the subject's tuples on NOTIFY, moments after the write commits).
   * A refused first request stepped up nothing, so a repeat costs no grant.
   */
  async function delegated(
    c: Customer,
    beneficiaryId: string,
    amount: string,
    owner: string,
    settled: (r: Res) => boolean = (r) => r.json?.code !== 'POLICY_DENIED',
  ) {
    const until = Date.now() + 5000;
    for (;;) {
      const t = await j.transfer(c, beneficiaryId, amount, 'device', { payerCustomerId: owner });
      if (settled(t.final) || Date.now() > until) return t;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  const outboxOf = async (event: string, customerId: string) =>
    (
      await tdb.db.query<{ payload: Record<string, unknown> }>(
        'SELECT payload FROM outbox WHERE event = $1 AND aggregate_id = $2 ORDER BY created_at',
        [event, customerId],
      )
    ).rows;

  before(async () => {
    e2e = await startE2eStack('payer');
    ({ tdb, gw, core } = e2e);
    const demo = e2e.demo as Demo & { serviceTokens: Record<'admin', { token: string }> };
    adminToken = demo.serviceTokens.admin.token;
    j = journey(gw, e2e.dataDir, tdb.db, demo);
    alice = await j.signUp('+254711400001');
    bob = await j.signUp('+254711400002');
    carol = await j.signUp('+254711400003');
    dave = await j.signUp('+254711400004');
    const ben = await j.addPayee(alice, carol.phone, 'Carol');
    assert.equal(ben.status, 201, ben.text);
    aliceToCarol = ben.json.id;
    for (const c of [alice, bob, dave]) await j.fund(c.wallet, '10000.00');
  });
  after(() => e2e?.stop());

  it('without a payer tuple the edge refuses, and core refuses too when the edge is bypassed', async () => {
    const before = await j.balance(bob.wallet);
    const t = await j.transfer(alice, aliceToCarol, '10.00', 'device', { payerCustomerId: bob.id });
    assert.equal(t.final.status, 403, t.final.text);
    assert.equal(t.final.json.code, 'POLICY_DENIED');
    const bypass = await direct(alice, aliceToCarol, bob.id, '10.00');
    assert.equal(bypass.status, 403, bypass.text);
    assert.equal(bypass.json.code, 'PAYER_NOT_AUTHORIZED');
    assert.equal(await j.balance(bob.wallet), before, 'nothing held or moved');
    const { rows } = await tdb.db.query('SELECT 1 FROM transfers WHERE payer_customer_id = $1', [bob.id]);
    assert.equal(rows.length, 0);
  });

  it("with the tuple: the delegate's own bound step-up; the owner's wallet pays; both see it; audited and notified; a replay moves nothing twice", async () => {
    const made = await grant(alice, bob.id);
    assert.equal(made.status, 201, made.text);
    const bobBefore = await j.balance(bob.wallet);
    const aliceBefore = await j.balance(alice.wallet);
    const carolBefore = await j.balance(carol.wallet);
    const tr = await delegated(alice, aliceToCarol, '100.00', bob.id);
    assert.equal(
      tr.first.json.code,
      'MFA_REQUIRED',
      'nothing waived: the delegate steps up for this request',
    );
    assert.equal(tr.final.status, 200, tr.final.text);
    assert.equal(tr.final.json.payer_customer_id, bob.id);
    assert.equal(tr.final.json.initiator_customer_id, alice.id);
    const fee = BigInt(Math.round(Number(tr.final.json.fee) * 1e6));

    // A replay: the same key answers the same transfer; a new key finds the step-up used.
    const replay = await call(gw, 'POST', '/v1/transfers', {
      json: tr.body,
      headers: { ...j.bearer(alice, tr.token), ...tr.headers },
    });
    assert.equal(replay.json.id, tr.final.json.id);
    const again = await call(gw, 'POST', '/v1/transfers', {
      json: tr.body,
      headers: { ...j.bearer(alice, tr.token), ...tr.headers, 'idempotency-key': `tr-${randomUUID()}` },
    });
    assert.equal(again.status, 403, again.text);
    assert.equal(again.json.code, 'MFA_REQUIRED');

    // The confirm names the same wallet owner (the edge judges the tuple again).
    const unnamed = await confirm(alice, tr.token, tr.final.json.id);
    assert.equal(unnamed.status, 422, unnamed.text);
    assert.equal(unnamed.json.code, 'PAYER_MISMATCH');
    assert.equal((await confirm(bob, bob.access, tr.final.json.id, bob.id)).status, 403, 'AAL 1 owner');
    const done = await confirm(alice, tr.token, tr.final.json.id, bob.id);
    assert.equal(done.status, 200, done.text);
    assert.equal(done.json.status, 'POSTED');
    assert.equal(await j.balance(bob.wallet), bobBefore - 100_000_000n - fee);
    assert.equal(await j.balance(alice.wallet), aliceBefore, "the delegate's own wallet is untouched");
    assert.equal(await j.balance(carol.wallet), carolBefore + 100_000_000n);

    const mask = (c: Customer) => `${c.phone.slice(0, 4)}*******${c.phone.slice(-2)}`;
    for (const who of [bob, alice]) {
      const h = await call(gw, 'GET', '/v1/transactions?direction=out', { headers: j.bearer(who) });
      assert.equal(h.status, 200, h.text);
      const item = h.json.items.find((i: { id: string }) => i.id === tr.final.json.id);
      assert.ok(item, `${who.phone} sees the transfer`);
      assert.equal(item.counterparty.phone, '+254*******03');
      assert.deepEqual(item.delegated, {
        wallet_owner: { phone: mask(bob) },
        initiator: { phone: mask(alice) },
      });
    }
    const audit = await tdb.db.query<{ actor: { id: string }; attrs: Record<string, unknown> }>(
      `SELECT actor, attrs FROM audit_log WHERE action IN ('transfer.create', 'transfer.confirm') AND target->>'id' = $1 ORDER BY id`,
      [tr.final.json.id],
    );
    assert.equal(audit.rows.length, 2);
    for (const r of audit.rows) {
      assert.equal(r.actor.id, alice.id, 'the initiator is the actor');
      assert.equal(r.attrs.payer_customer_id, bob.id, 'the wallet owner is named');
    }
    const notices = await outboxOf('wallet.delegated_debit', bob.id);
    assert.equal(notices.length, 1, 'the owner is told of the debit once');
    assert.equal(notices[0]?.payload.transferId, tr.final.json.id);
    // The SMS names the transfer, never the delegate's free text (it would write the platform's SMS).
    const text = String(notices[0]?.payload.text ?? '');
    assert.ok(text.includes(tr.final.json.id), text);
    assert.ok(tr.final.json.reference, 'the transfer carries a reference');
    assert.ok(!text.includes(tr.final.json.reference), text);
  });

  it("refuses a payer tuple over another tenant's customer, and core refuses one that got into the table anyway", async () => {
    const created = await call(gw, 'POST', '/v1/tenants', {
      json: { id: 'payerco', name: 'Payer Co', country: 'KE', baseCurrency: 'KES' },
      headers: {
        authorization: `Bearer ${adminToken}`,
        'idempotency-key': 'e2e-payerco',
        'x-request-id': randomUUID(),
      },
    });
    assert.equal(created.status, 201, created.text);
    const foreign = randomUUID();
    await tdb.db.query(
      `INSERT INTO customers (id, tenant_id, phone_e164) VALUES ($1, 'payerco', '+254711499999')`,
      [foreign],
    );
    const viaApi = await grant(alice, foreign);
    assert.equal(viaApi.status, 422, viaApi.text);
    assert.equal(viaApi.json.code, 'TUPLE_INVALID');
    const refused = await j.transfer(alice, aliceToCarol, '10.00', 'device', { payerCustomerId: foreign });
    assert.equal(refused.final.status, 403, refused.final.text);
    assert.equal(refused.final.json.code, 'POLICY_DENIED');
    // A tuple written behind the API's back: the edge's policy sees a payer tuple, core does not honour it.
    await tdb.db.query(
      `INSERT INTO relationship_tuples (tenant_id, subject_ns, subject_id, relation, object_ns, object_id) VALUES ('demo', 'customer', $1, 'payer', 'customer', $2)`,
      [alice.id, foreign],
    );
    const rogue = (await delegated(alice, aliceToCarol, '10.00', foreign)).final;
    assert.equal(rogue.status, 403, rogue.text);
    assert.equal(rogue.json.code, 'PAYER_NOT_AUTHORIZED');
  });

  it("applies the tuple's caveats in core as the edge does: outside its ip_ranges, refused", async () => {
    const fenced = await grant(dave, bob.id, { ip_ranges: ['10.0.0.0/8'] });
    assert.equal(fenced.status, 201, fenced.text);
    const daveToCarol = (await j.addPayee(dave, carol.phone)).json.id as string;
    // Core reads the tuple itself (no cache) and judges its caveat with the policy's own rule.
    const outside = await direct(dave, daveToCarol, bob.id, '10.00');
    assert.equal(outside.status, 403, outside.text);
    assert.equal(outside.json.code, 'PAYER_NOT_AUTHORIZED');
    const loopback = { ip_ranges: ['127.0.0.0/8', '::1/128', '::ffff:127.0.0.0/104'] };
    assert.equal((await grant(dave, bob.id, loopback)).status, 200);
    const inside = await direct(dave, daveToCarol, bob.id, '10.00');
    assert.equal(inside.status, 200, inside.text);
    assert.equal(inside.json.payer_customer_id, bob.id);
    // The edge: allowed from loopback, then refused once the range excludes it again.
    const allowed = (await delegated(dave, daveToCarol, '10.00', bob.id)).final;
    assert.equal(allowed.status, 200, allowed.text);
    assert.equal((await grant(dave, bob.id, { ip_ranges: ['10.0.0.0/8'] })).status, 200);
    // Until the edge hears of the rewrite (NOTIFY) core refuses it (PAYER_NOT_AUTHORIZED): wait
    // for the edge's own refusal.
    const fencedAgain = (
      await delegated(dave, daveToCarol, '10.00', bob.id, (r) => r.json?.code === 'POLICY_DENIED')
    ).final;
    assert.equal(fencedAgain.status, 403, fencedAgain.text);
    assert.equal(fencedAgain.json.code, 'POLICY_DENIED');
  });

  it("applies both customers' limits: the owner's, and the delegate's own over everything they send", async () => {
    const { rows } = await tdb.db.query<{ id: string }>(
      `SELECT id FROM admin_schedules WHERE tenant_id = 'demo' AND kind = 'LIMIT' AND product = 'TRANSFER' AND status = 'ACTIVE'`,
    );
    const schedule = rows[0]?.id;
    assert.ok(schedule);
    // KYC level 1: 1,000 a transfer; level 2: 2,000 a day. Everyone else keeps the general rows.
    await tdb.db.query(
      `INSERT INTO admin_schedule_limits (id, tenant_id, schedule_id, action, period, max_amount, kyc_level) VALUES
         ($1, 'demo', $3, 'TRANSFER', 'transaction', 1000, '1'), ($2, 'demo', $3, 'TRANSFER', 'day', 2000, '2')`,
      [randomUUID(), randomUUID(), schedule],
    );
    const kyc = (c: Customer, level: number) =>
      tdb.db.query(
        `INSERT INTO kyc_profiles (tenant_id, customer_id, level, status, full_name, id_type, id_number, date_of_birth, registered_by, expires_at, created_at, updated_at)
         VALUES ('demo', $1, $2, 'ACTIVE', 'Test Person', 'NATIONAL_ID', $3, '1990-01-01', $4, now() + interval '1 year', now(), now())`,
        [c.id, level, `KYC-PAYER-${level}`, randomUUID()],
      );
    // The owner's limit: erin's wallet may send 1,000 a transfer, whoever asks.
    const erin = await j.signUp('+254711400005');
    await j.fund(erin.wallet, '5000.00');
    await kyc(erin, 1);
    assert.equal((await grant(alice, erin.id)).status, 201);
    const overOwner = (await delegated(alice, aliceToCarol, '1500.00', erin.id)).final;
    assert.equal(overOwner.status, 422, overOwner.text);
    assert.equal(overOwner.json.code, 'LIMIT_EXCEEDED');
    assert.match(overOwner.json.message, /wallet owner's per-transaction/);
    // The delegate's own: frank may send 2,000 a day in all, his own transfers and bob's together.
    const frank = await j.signUp('+254711400006');
    await j.fund(frank.wallet, '5000.00');
    await kyc(frank, 2);
    const frankToCarol = (await j.addPayee(frank, carol.phone)).json.id as string;
    const own = await j.transfer(frank, frankToCarol, '1500.00');
    assert.equal(own.final.status, 200, own.final.text);
    assert.equal((await grant(frank, bob.id)).status, 201);
    const overOwn = (await delegated(frank, frankToCarol, '800.00', bob.id)).final;
    assert.equal(overOwn.status, 422, overOwn.text);
    assert.equal(overOwn.json.code, 'LIMIT_EXCEEDED');
    assert.match(overOwn.json.message, /your own day/);
    const within = await j.transfer(frank, frankToCarol, '400.00', 'device', { payerCustomerId: bob.id });
    assert.equal(within.final.status, 200, within.final.text);
  });

  it("a deleted tuple releases the delegate's pending transfer at once: holds voided, FAILED for both, audited, the owner told; the confirm refused", async () => {
    const availableBefore = await available(bob);
    const pending = await j.transfer(alice, aliceToCarol, '20.00', 'device', { payerCustomerId: bob.id });
    assert.equal(pending.final.status, 200, pending.final.text);
    const id = pending.final.json.id as string;
    assert.notEqual(await available(bob), availableBefore, "the holds take the owner's available balance");
    const key = `tp-${randomUUID()}`;
    const gone = await revokeWith(alice, bob.id, key);
    assert.equal(gone.status, 200, gone.text);
    assert.equal(await available(bob), availableBefore, "the owner's available balance is back at once");
    assert.deepEqual(await holdStatuses(id), ['voided'], 'amount and fee holds voided, not lapsed');
    assert.equal(await statusOf(id), 'FAILED');

    const next = (await delegated(alice, aliceToCarol, '20.00', bob.id, (r) => r.status === 403)).final;
    assert.equal(next.status, 403, next.text);
    assert.equal(next.json.code, 'POLICY_DENIED');
    const late = await confirm(alice, pending.token, id, bob.id);
    assert.equal(late.status, 403, late.text);
    assert.equal(late.json.code, 'POLICY_DENIED');
    // Core on its own refuses the confirm too (the edge bypassed).
    const direct = await call(core, 'POST', '/v1/transfers/confirm', {
      json: { transferId: id, payerCustomerId: bob.id },
      headers: { ...j.bearer(alice, pending.token), 'idempotency-key': `cf-${randomUUID()}` },
    });
    assert.equal(direct.status, 403, direct.text);
    assert.equal(direct.json.code, 'PAYER_NOT_AUTHORIZED');

    for (const who of [bob, alice]) {
      const h = await call(gw, 'GET', '/v1/transactions?direction=out', { headers: j.bearer(who) });
      assert.equal(h.status, 200, h.text);
      const item = h.json.items.find((i: { id: string }) => i.id === id);
      assert.equal(item?.status, 'FAILED', `${who.phone} sees it FAILED`);
    }
    // A retried delete replays its answer (same key) or finds nothing (new key); nothing voided twice.
    const replay = await revokeWith(alice, bob.id, key);
    assert.equal(replay.status, 200, replay.text);
    const again = await revoke(alice, bob.id);
    assert.equal(again.status, 404, again.text);
    const audit = await tdb.db.query<{ actor: { type: string; id: string }; attrs: Record<string, unknown> }>(
      `SELECT actor, attrs FROM audit_log WHERE action = 'transfer.release' AND target->>'id' = $1`,
      [id],
    );
    assert.equal(audit.rows.length, 1, 'released once, audited once');
    const [deleted] = (
      await tdb.db.query<{ actor: { id: string }; attrs: Record<string, unknown> }>(
        `SELECT actor, attrs FROM audit_log WHERE action = 'tuple.delete' AND attrs->'released_transfer_ids' ? $1`,
        [id],
      )
    ).rows;
    const rec = audit.rows[0];
    assert.equal(rec?.actor.type, 'staff');
    assert.equal(rec?.actor.id, deleted?.actor.id, 'the administrator who deleted the tuple is the actor');
    assert.equal(rec?.attrs.payer_customer_id, bob.id);
    assert.equal(rec?.attrs.initiator_customer_id, alice.id);
    const notices = await outboxOf('wallet.delegated_hold_released', bob.id);
    assert.deepEqual(
      notices.map((n) => n.payload.transferId),
      [id],
      'the owner is told once',
    );
    const toDelegate = await outboxOf('wallet.delegated_payment_cancelled', alice.id);
    assert.deepEqual(
      toDelegate.map((n) => n.payload.transferId),
      [id],
      'the delegate who made it is told once',
    );
    assert.equal(toDelegate[0]?.payload.channel, 'sms');
    assert.match(String(toDelegate[0]?.payload.text), new RegExp(`cancelled.*${id}`));
    // The SMS carries no words of either party: the transfer's free-text reference stays out.
    assert.ok(pending.final.json.reference, 'the transfer carries a reference');
    assert.ok(!JSON.stringify(toDelegate[0]?.payload).includes(pending.final.json.reference));
    const tenants = await tdb.db.query<{ tenant_id: string }>(
      `SELECT DISTINCT tenant_id FROM outbox WHERE event = 'wallet.delegated_payment_cancelled' AND aggregate_id = $1`,
      [alice.id],
    );
    assert.deepEqual(
      tenants.rows.map((r) => r.tenant_id),
      ['demo'],
      "in the delegate's own tenant",
    );
    const failed = await tdb.db.query<{ payload: Record<string, unknown> }>(
      `SELECT payload FROM outbox WHERE event = 'transfer.failed' AND aggregate_id = $1`,
      [id],
    );
    assert.equal(failed.rows[0]?.payload.code, 'PAYER_NOT_AUTHORIZED');
  });

  it('a delete racing the confirm ends POSTED with the tuple gone or FAILED with the holds voided, never both; debits = credits', async () => {
    for (let round = 0; round < 2; round++) {
      const availableBefore = await available(bob);
      const postedBefore = await j.balance(bob.wallet);
      const { tr, id } = await grantedTransfer('30.00');
      const [gone, confirmed] = await Promise.all([
        revoke(alice, bob.id),
        confirm(alice, tr.token, id, bob.id),
      ]);
      assert.equal(gone.status, 200, gone.text);
      const status = await statusOf(id);
      const holds = await holdStatuses(id);
      const released = await tdb.db.query(
        `SELECT 1 FROM audit_log WHERE action = 'transfer.release' AND target->>'id' = $1`,
        [id],
      );
      if (confirmed.status === 200) {
        assert.equal(status, 'POSTED');
        assert.deepEqual(holds, ['captured']);
        assert.equal(released.rows.length, 0, 'a captured transfer is not released');
        assert.ok((await j.balance(bob.wallet)) < postedBefore, "the owner's wallet paid");
      } else {
        assert.equal(confirmed.status, 403, confirmed.text);
        assert.equal(status, 'FAILED');
        assert.deepEqual(holds, ['voided']);
        assert.equal(released.rows.length, 1);
        assert.equal(await available(bob), availableBefore);
        assert.equal(await j.balance(bob.wallet), postedBefore, 'nothing left the wallet');
      }
      const tuple = await tdb.db.query(
        `SELECT 1 FROM relationship_tuples WHERE subject_id = $1 AND relation = 'payer' AND object_id = $2`,
        [alice.id, bob.id],
      );
      assert.equal(tuple.rows.length, 0, 'the tuple is gone either way');
    }
    const totals = await tdb.db.query<{ currency: string; d: string; c: string }>(
      `SELECT currency, sum(amount) FILTER (WHERE side = 'debit')::text AS d, sum(amount) FILTER (WHERE side = 'credit')::text AS c
         FROM ledger_entries WHERE tenant_id = 'demo' GROUP BY currency`,
    );
    for (const r of totals.rows) assert.equal(r.d, r.c, `debits = credits in ${r.currency}`);
    const unbalanced = await tdb.db.query(
      `SELECT posting_id FROM ledger_entries WHERE tenant_id = 'demo' GROUP BY posting_id, currency
       HAVING sum(CASE side WHEN 'debit' THEN amount ELSE -amount END) <> 0`,
    );
    assert.equal(unbalanced.rowCount, 0);
  });

  it('a confirm arriving while a delete is releasing waits for it, then is refused by the payer check', async () => {
    const { tr, id } = await grantedTransfer('25.00');
    // The delete in flight: the tuple row deleted (locked) and the transfer released, uncommitted.
    const deleting = await tdb.db.pool.connect();
    try {
      await deleting.query('BEGIN');
      await deleting.query(
        `DELETE FROM relationship_tuples WHERE subject_id = $1 AND relation = 'payer' AND object_id = $2`,
        [alice.id, bob.id],
      );
      const released = await releaseDelegation(
        deleting,
        { tenantId: 'demo', delegate: alice.id, owner: bob.id },
        Date.now(),
      );
      assert.deepEqual(
        released.map((r) => r.transfer_id),
        [id],
      );
      // Straight to core (the edge still holds the tuple in its cache or not: core decides here).
      const confirming = call(core, 'POST', '/v1/transfers/confirm', {
        json: { transferId: id, payerCustomerId: bob.id },
        headers: { ...j.bearer(alice, tr.token), 'idempotency-key': `cf-${randomUUID()}` },
      });
      await waitingOn('relationship_tuples');
      await deleting.query('COMMIT');
      const refused = await confirming;
      assert.equal(refused.status, 403, refused.text);
      assert.equal(refused.json.code, 'PAYER_NOT_AUTHORIZED', 'the payer check, not a stale status');
    } finally {
      // Closed, not returned to the pool: a failed assertion leaves no transaction holding locks.
      deleting.release(true);
    }
    assert.equal(await statusOf(id), 'FAILED');
    assert.deepEqual(await holdStatuses(id), ['voided']);
  });

  it('a delete arriving while a confirm is posting waits for it, then finds nothing to release', async () => {
    const { tr, id } = await grantedTransfer('26.00');
    // Pause the confirm at its audit record (after its capture) by holding the tenant's audit head.
    const holding = await tdb.db.pool.connect();
    let confirmed: Res;
    let deleted: Res;
    try {
      await holding.query('BEGIN');
      await holding.query(`SELECT 1 FROM audit_chain_heads WHERE tenant_id = 'demo' FOR UPDATE`);
      const confirming = call(core, 'POST', '/v1/transfers/confirm', {
        json: { transferId: id, payerCustomerId: bob.id },
        headers: { ...j.bearer(alice, tr.token), 'idempotency-key': `cf-${randomUUID()}` },
      });
      // Past its payer check: it holds the transfer row (taken after the tuple's share lock).
      await rowLocked(id);
      const deleting = revoke(alice, bob.id);
      await waitingOn('DELETE FROM relationship_tuples');
      await holding.query('ROLLBACK');
      [confirmed, deleted] = await Promise.all([confirming, deleting]);
    } finally {
      // Closed, not returned to the pool: a failed assertion leaves no transaction holding locks.
      holding.release(true);
    }
    assert.equal(confirmed.status, 200, confirmed.text);
    assert.equal(confirmed.json.status, 'POSTED');
    assert.equal(deleted.status, 200, deleted.text);
    assert.equal(await statusOf(id), 'POSTED', 'a captured transfer stays POSTED');
    assert.deepEqual(await holdStatuses(id), ['captured']);
    const released = await tdb.db.query(
      `SELECT 1 FROM audit_log WHERE action = 'transfer.release' AND target->>'id' = $1`,
      [id],
    );
    assert.equal(released.rows.length, 0);
  });

  it('a payer tuple past its expires_at releases the pending transfer by the sweep; a live one keeps it', async () => {
    const expiresAt = new Date(Date.now() + 5 * 60_000);
    const made = await grant(alice, bob.id, { expires_at: expiresAt.toISOString() });
    assert.equal(made.status, 201, made.text);
    const availableBefore = await available(bob);
    const tr = await delegated(alice, aliceToCarol, '40.00', bob.id);
    assert.equal(tr.final.status, 200, tr.final.text);
    const id = tr.final.json.id as string;
    // Before the tuple's expiry nothing is released (the transfer's own holds last 600 s).
    assert.equal(await releaseLapsedPayers(tdb.db, expiresAt.getTime() - 1000), 0);
    assert.equal(await statusOf(id), 'PENDING');
    // Past it, and before the transfer's holds lapse: released, as a delete would.
    const at = expiresAt.getTime() + 1000;
    assert.equal(await releaseLapsedPayers(tdb.db, at), 1);
    assert.equal(await releaseLapsedPayers(tdb.db, at), 0, 'a second sweep finds nothing');
    assert.equal(await statusOf(id), 'FAILED');
    assert.deepEqual(await holdStatuses(id), ['voided']);
    assert.equal(await available(bob), availableBefore, "the owner's available balance is back");
    const audit = await tdb.db.query<{ actor: { type: string; id: string }; attrs: Record<string, unknown> }>(
      `SELECT actor, attrs FROM audit_log WHERE action = 'transfer.release' AND target->>'id' = $1`,
      [id],
    );
    assert.equal(audit.rows.length, 1);
    assert.deepEqual(audit.rows[0]?.actor, { type: 'system', id: 'payer-sweeper' });
    assert.equal(audit.rows[0]?.attrs.cause, 'tuple_expired');
    assert.equal(audit.rows[0]?.attrs.payer_customer_id, bob.id);
    const notices = await outboxOf('wallet.delegated_hold_released', bob.id);
    assert.ok(
      notices.some((n) => n.payload.transferId === id),
      'the owner is told',
    );
    assert.ok(
      (await outboxOf('wallet.delegated_payment_cancelled', alice.id)).some(
        (n) => n.payload.transferId === id,
      ),
      'the delegate is told',
    );
    assert.equal((await revoke(alice, bob.id)).status, 200);
  });

  it('an expiry stored before it could be refused (year 10000) fails no sweep: the sweep goes on', async () => {
    const made = await grant(alice, bob.id, {});
    assert.equal(made.status, 201, made.text);
    const tr = await delegated(alice, aliceToCarol, '7.00', bob.id);
    assert.equal(tr.final.status, 200, tr.final.text);
    await tdb.db.query(
      `UPDATE relationship_tuples SET caveat = jsonb_build_object('expires_at', '+010000-01-01T15:58:59.000Z')
        WHERE tenant_id = 'demo' AND subject_id = $1 AND relation = 'payer' AND object_id = $2`,
      [alice.id, bob.id],
    );
    assert.equal(await releaseLapsedPayers(tdb.db, Date.now()), 0);
    assert.equal(await statusOf(tr.final.json.id as string), 'PENDING');
    assert.equal((await revoke(alice, bob.id)).status, 200);
    assert.equal(await statusOf(tr.final.json.id as string), 'FAILED', 'a delete still releases it');
  });
});
