import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { quoteFee } from '../../core/admin/schedules.ts';
import { format } from '../../shared/money.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call } from '../helpers/http.ts';
import { journey, type Customer, type Demo, type Journey } from '../helpers/journey.ts';

/**
 * Issue 7, end to end through the dev gateway with nothing mocked: sign-up, step-up, payee,
 * transfer with intent signing, confirm, balances, masked history; plus the device-assertion
 * path, high risk at AAL 2, the daily limit, concurrent confirms and the bad inputs.
 */
describe('customer transfers through the gateway', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let demo: Demo;

  let j: Journey;
  const json = { 'content-type': 'application/json' };

  let alice: Customer;
  let bob: Customer;
  let bobBeneficiary = '';

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-transfers-'));
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
    j = journey(gw, dataDir, tdb.db, demo);
    alice = await j.signUp('+254711000001');
    bob = await j.signUp('+254711000002');
  });
  after(async () => {
    await stack.stop();
    await tdb.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('adds a payee by phone, masked, and refuses yourself or an unknown phone', async () => {
    const r = await j.addPayee(alice, bob.phone, 'Bob');
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.phone, '+254*******02');
    bobBeneficiary = r.json.id;
    assert.equal((await j.addPayee(alice, alice.phone)).json.code, 'CANNOT_PAY_SELF');
    assert.equal((await j.addPayee(alice, '+254799999998')).status, 404);
  });

  it('moves money: MFA_REQUIRED → OTP step-up → repeat → confirm; balances and fee change exactly; history is masked', async () => {
    await j.fund(alice.wallet, '5000.00');
    const aliceBefore = await j.balance(alice.wallet);
    const bobBefore = await j.balance(bob.wallet);
    const t = await j.transfer(alice, bobBeneficiary, '1000.00', 'otp');
    assert.equal(t.first.status, 403);
    assert.equal(t.first.json.code, 'MFA_REQUIRED');
    assert.ok(t.first.json.challenge);
    assert.equal(t.final.status, 200, t.final.text);
    assert.equal(t.final.json.status, 'PENDING');
    const expectedFee = (
      await quoteFee(tdb.db, {
        tenantId: 'demo',
        product: 'TRANSFER',
        amount: 1_000_000_000n,
        currency: 'KES',
      })
    ).fee;
    assert.equal(t.final.json.fee, format(expectedFee));
    assert.equal(t.final.json.total, format(1_000_000_000n + expectedFee));
    const replay = await call(gw, 'POST', '/v1/transfers', {
      json: t.body,
      headers: { ...j.bearer(alice, t.token), ...t.headers },
    });
    assert.equal(replay.json.id, t.final.json.id, 'an idempotent replay answers the same transfer');
    const confirm = await call(gw, 'POST', '/v1/transfers/confirm', {
      json: { transferId: t.final.json.id },
      headers: { ...j.bearer(alice, t.token), 'idempotency-key': `cf-${randomUUID()}` },
    });
    assert.equal(confirm.status, 200, confirm.text);
    assert.equal(confirm.json.status, 'POSTED');
    assert.equal(await j.balance(alice.wallet), aliceBefore - 1_000_000_000n - expectedFee);
    assert.equal(await j.balance(bob.wallet), bobBefore + 1_000_000_000n);
    const { rows } = await tdb.db.query<{ fee_account_id: string | null }>(
      'SELECT fee_account_id FROM transfers WHERE id = $1',
      [t.final.json.id],
    );
    if (expectedFee > 0n) assert.equal(await j.balance(rows[0]?.fee_account_id ?? ''), expectedFee);
    const history = await call(gw, 'GET', '/v1/transactions?direction=out', { headers: j.bearer(alice) });
    assert.equal(history.status, 200, history.text);
    assert.equal(history.json.items[0].id, t.final.json.id);
    assert.equal(history.json.items[0].counterparty.phone, '+254*******02');
    const incoming = await call(gw, 'GET', '/v1/transactions?direction=in', { headers: j.bearer(bob) });
    assert.equal(incoming.json.items[0].counterparty.phone, '+254*******01');
    assert.equal(incoming.json.items[0].amount, '1000.00');
  });

  it('does the same with a device assertion instead of an OTP', async () => {
    const t = await j.transfer(alice, bobBeneficiary, '10.00', 'device');
    assert.equal(t.first.json.code, 'MFA_REQUIRED');
    assert.equal(t.final.status, 200, t.final.text);
  });

  it('refuses a changed amount after step-up: the challenge was for the other request', async () => {
    const t = await j.transfer(alice, bobBeneficiary, '20.00');
    assert.equal(t.final.status, 200);
    const changed = { ...t.body, amount: '2000.00' };
    const payload = JSON.stringify(changed);
    const again = await call(gw, 'POST', '/v1/transfers', {
      json: changed,
      headers: {
        ...j.bearer(alice, t.token),
        ...j.intent(alice, changed, payload),
        'idempotency-key': `tr-${randomUUID()}`,
      },
    });
    assert.equal(again.status, 403);
    assert.equal(again.json.code, 'MFA_REQUIRED');
  });

  it('treats a request from another device as high risk: step-up even at AAL 2', async () => {
    const t = await j.transfer(alice, bobBeneficiary, '5.00');
    const read = await call(gw, 'GET', '/v1/transactions', {
      headers: { authorization: `Bearer ${t.token}`, 'x-device-id': 'someone-elses-phone' },
    });
    assert.equal(read.status, 403);
    assert.equal(read.json.code, 'MFA_REQUIRED');
  });

  it('moves money once when two confirms race', async () => {
    const t = await j.transfer(alice, bobBeneficiary, '100.00');
    const before = await j.balance(bob.wallet);
    const confirm = () =>
      call(gw, 'POST', '/v1/transfers/confirm', {
        json: { transferId: t.final.json.id },
        headers: { ...j.bearer(alice, t.token), 'idempotency-key': `cf-${randomUUID()}` },
      });
    const results = await Promise.all([confirm(), confirm()]);
    assert.deepEqual(results.map((r) => r.status).sort(), [200, 409], results.map((r) => r.text).join(' | '));
    assert.equal(await j.balance(bob.wallet), before + 100_000_000n);
  });

  it('lets two customers pay each other at the same moment without a deadlock (no transaction retried for 40P01)', async () => {
    const aliceBeneficiary = (await j.addPayee(bob, alice.phone)).json.id as string;
    await j.fund(alice.wallet, '1000.00');
    await j.fund(bob.wallet, '1000.00');
    const deadlockRetries = async () => {
      const m = await call(gw, 'GET', '/v1/metrics');
      const line = m.text.split('\n').find((l) => l.startsWith('db_tx_retries_total{code="40P01"}'));
      return Number(line?.split(' ')[1] ?? 0);
    };
    const before = await deadlockRetries();
    const flow = async (from: Customer, beneficiaryId: string) => {
      const t = await j.transfer(from, beneficiaryId, '10.00');
      assert.equal(t.final.status, 200, t.final.text);
      const c = await call(gw, 'POST', '/v1/transfers/confirm', {
        json: { transferId: t.final.json.id },
        headers: { ...j.bearer(from, t.token), 'idempotency-key': `cf-${randomUUID()}` },
      });
      assert.equal(c.status, 200, c.text);
    };
    // Each payer's row is locked while the other's transaction references it (foreign keys):
    // FOR UPDATE there deadlocked; FOR NO KEY UPDATE does not.
    await Promise.all([
      flow(alice, bobBeneficiary),
      flow(bob, aliceBeneficiary),
      flow(alice, bobBeneficiary),
      flow(bob, aliceBeneficiary),
    ]);
    assert.equal(await deadlockRetries(), before);
  });

  it('refuses a transfer over the daily limit with LIMIT_EXCEEDED', async () => {
    await j.fund(alice.wallet, '400000.00');
    const a = await j.transfer(alice, bobBeneficiary, '150000.00');
    assert.equal(a.final.status, 200, a.final.text);
    // The day so far holds about 1,200 KES from the earlier tests: 150,000 + 145,000 stays under 300,000.
    const b = await j.transfer(alice, bobBeneficiary, '145000.00');
    assert.equal(b.final.status, 200, b.final.text);
    const c = await j.transfer(alice, bobBeneficiary, '5000.00');
    assert.equal(c.final.status, 422, c.final.text);
    assert.equal(c.final.json.code, 'LIMIT_EXCEEDED');
    assert.match(c.final.json.message, /day/);
  });

  it("applies the limit rows of the payer's KYC level when the schedule has them, the general rows otherwise", async () => {
    const { rows } = await tdb.db.query<{ id: string }>(
      `SELECT id FROM admin_schedules WHERE tenant_id = 'demo' AND kind = 'LIMIT' AND product = 'TRANSFER' AND status = 'ACTIVE'`,
    );
    assert.ok(rows[0]);
    await tdb.db.query(
      `INSERT INTO admin_schedule_limits (id, tenant_id, schedule_id, action, period, max_amount, kyc_level) VALUES ($1, 'demo', $2, 'TRANSFER', 'transaction', 1000, '1')`,
      [randomUUID(), rows[0].id],
    );
    const carol = await j.signUp('+254711000007');
    const dave = await j.signUp('+254711000008');
    await tdb.db.query(
      `INSERT INTO kyc_profiles (tenant_id, customer_id, level, status, full_name, id_type, id_number, date_of_birth, registered_by, expires_at, created_at, updated_at)
       VALUES ('demo', $1, 1, 'ACTIVE', 'Carol Wambui', 'NATIONAL_ID', 'KYC-LIMIT-1', '1990-01-01', $2, now() + interval '1 year', now(), now())`,
      [carol.id, randomUUID()],
    );
    const payee = async (c: Customer) => (await j.addPayee(c, bob.phone)).json.id as string;
    for (const c of [carol, dave]) await j.fund(c.wallet, '5000.00');
    const over = await j.transfer(carol, await payee(carol), '1500.00');
    assert.equal(over.final.status, 422, over.final.text);
    assert.equal(over.final.json.code, 'LIMIT_EXCEEDED');
    assert.match(over.final.json.message, /transaction/);
    const within = await j.transfer(carol, await payee(carol), '900.00');
    assert.equal(within.final.status, 200, within.final.text);
    const general = await j.transfer(dave, await payee(dave), '1500.00');
    assert.equal(general.final.status, 200, `no KYC record: the general rows apply: ${general.final.text}`);
  });

  it('refuses insufficient funds, a removed payee, and a bad intent signature', async () => {
    const poor = await j.signUp('+254711000003');
    const ben = await j.addPayee(poor, alice.phone);
    assert.equal(ben.status, 201, ben.text);
    const broke = await j.transfer(poor, ben.json.id, '50.00');
    assert.equal(broke.final.json.code, 'INSUFFICIENT_FUNDS', broke.final.text);
    assert.equal(
      (await j.withStepUp(poor, 'DELETE', `/v1/beneficiaries/${ben.json.id}`, undefined, {}, 'device')).final
        .status,
      204,
    );
    await j.fund(poor.wallet, '100.00');
    const removed = await j.transfer(poor, ben.json.id, '10.00');
    assert.equal(removed.final.json.code, 'BENEFICIARY_NOT_FOUND', removed.final.text);
    const body = { amount: '10.00', currency: 'KES', beneficiaryId: bobBeneficiary, reference: 'x1' };
    const signedOther = {
      ...j.intent(alice, { ...body, amount: '11.00' }, JSON.stringify(body)),
      'idempotency-key': `tr-${randomUUID()}`,
    };
    const forged = await j.withStepUp(alice, 'POST', '/v1/transfers', body, signedOther, 'device');
    assert.equal(forged.final.status, 403);
    assert.equal(forged.final.json.code, 'INTENT_SIGNATURE_INVALID');
  });

  it('refuses bad amounts and currencies at core with clear codes (never 500)', async () => {
    const cases: [Record<string, unknown>, number][] = [
      [{ amount: '10.001', currency: 'KES' }, 422],
      [{ amount: '1e3', currency: 'KES' }, 400],
      [{ amount: 10.5, currency: 'KES' }, 400],
      [{ amount: '-5.00', currency: 'KES' }, 400],
      [{ amount: '10.00', currency: 'USD' }, 422],
      [{ amount: '10.00', currency: 'XYZ' }, 422],
    ];
    for (const [over, status] of cases) {
      const body = { beneficiaryId: bobBeneficiary, reference: 'bad', ...over };
      const payload = JSON.stringify(body);
      const sig = j.intent(
        alice,
        { amount: String(over.amount), currency: String(over.currency), beneficiaryId: bobBeneficiary },
        payload,
      );
      const r = await j.withStepUp(
        alice,
        'POST',
        '/v1/transfers',
        body,
        { ...sig, 'idempotency-key': `tr-${randomUUID()}` },
        'device',
      );
      assert.equal(r.final.status, status, `${JSON.stringify(over)} → ${r.final.text}`);
      assert.equal(typeof r.final.json.code, 'string');
    }
  });

  it('answers a non-JSON body on the transfer route with 400 at core once stepped up for those bytes (never 500)', async () => {
    const raw = 'amount=10.00&currency=KES';
    const sig = j.intent(alice, { amount: '10.00', currency: 'KES', beneficiaryId: bobBeneficiary }, raw);
    const headers = { ...j.bearer(alice), ...json, ...sig, 'idempotency-key': `tr-${randomUUID()}` };
    const first = await call(gw, 'POST', '/v1/transfers', { body: raw, headers });
    assert.equal(first.json?.code, 'MFA_REQUIRED', first.text);
    const token = await j.stepUp(alice, first.json.challenge, 'device');
    const final = await call(gw, 'POST', '/v1/transfers', {
      body: raw,
      headers: { ...headers, ...j.bearer(alice, token) },
    });
    assert.equal(final.status, 400, final.text);
    assert.equal(final.json?.code, 'MALFORMED_JSON', final.text);
  });

  it("refuses to confirm another customer's transfer, and an expired one", async () => {
    const t = await j.transfer(alice, bobBeneficiary, '1.00');
    const foreign = await j.withStepUp(
      bob,
      'POST',
      '/v1/transfers/confirm',
      { transferId: t.final.json.id },
      { 'idempotency-key': `cf-${randomUUID()}` },
      'device',
    );
    assert.equal(foreign.final.status, 404, `${foreign.first.text} ==> ${foreign.final.text}`);
    await tdb.db.query(`UPDATE transfers SET expires_at = now() - interval '1 second' WHERE id = $1`, [
      t.final.json.id,
    ]);
    const late = await call(gw, 'POST', '/v1/transfers/confirm', {
      json: { transferId: t.final.json.id },
      headers: { ...j.bearer(alice, t.token), 'idempotency-key': `cf-${randomUUID()}` },
    });
    assert.equal(late.status, 422, late.text);
    assert.equal(late.json.code, 'TRANSFER_EXPIRED');
    const { rows } = await tdb.db.query<{ status: string }>('SELECT status FROM transfers WHERE id = $1', [
      t.final.json.id,
    ]);
    assert.equal(rows[0]?.status, 'EXPIRED');
  });

  it("keeps each customer's Idempotency-Keys their own: another customer's replay of a key runs as their own request and cannot poison it", async () => {
    await j.fund(alice.wallet, '100.00');
    const t = await j.transfer(alice, bobBeneficiary, '3.00');
    assert.equal(t.final.status, 200, t.final.text);
    const key = { 'idempotency-key': `cf-${randomUUID()}` };
    const mine = await call(gw, 'POST', '/v1/transfers/confirm', {
      json: { transferId: t.final.json.id },
      headers: { ...j.bearer(alice, t.token), ...key },
    });
    assert.equal(mine.status, 200, mine.text);
    assert.equal(mine.json.status, 'POSTED');
    // Bob presents Alice's key with Alice's very request: his own confirm runs (not his transfer: 404), nothing of Alice's is shown.
    const stolen = await j.withStepUp(
      bob,
      'POST',
      '/v1/transfers/confirm',
      { transferId: t.final.json.id },
      key,
      'device',
    );
    assert.equal(stolen.final.status, 404, stolen.final.text);
    assert.equal(stolen.final.headers['idempotent-replayed'], undefined);
    assert.doesNotMatch(
      stolen.final.text,
      new RegExp(`${t.body.reference}|"fee"|"amount"`),
      "neither amount, fee, payee nor reference of Alice's transfer",
    );
    const again = await call(gw, 'POST', '/v1/transfers/confirm', {
      json: { transferId: t.final.json.id },
      headers: { ...j.bearer(alice, t.token), ...key },
    });
    assert.equal(again.status, 200, again.text);
    assert.equal(again.headers['idempotent-replayed'], 'true');
    assert.deepEqual(again.json, mine.json, "Alice's retry still gets her first answer");
    // Bob uses a key before Alice does: Alice's later confirm with that key runs (no 409).
    const t2 = await j.transfer(alice, bobBeneficiary, '2.00');
    assert.equal(t2.final.status, 200, t2.final.text);
    const early = { 'idempotency-key': `cf-${randomUUID()}` };
    const poison = await j.withStepUp(
      bob,
      'POST',
      '/v1/transfers/confirm',
      { transferId: t2.final.json.id },
      early,
      'device',
    );
    assert.equal(poison.final.status, 404, poison.final.text);
    const later = await call(gw, 'POST', '/v1/transfers/confirm', {
      json: { transferId: t2.final.json.id },
      headers: { ...j.bearer(alice, t2.token), ...early },
    });
    assert.equal(later.status, 200, later.text);
    assert.equal(later.json.status, 'POSTED');
  });

  it('records transfer events in the outbox and audits each step with the policy and registry versions', async () => {
    const { rows } = await tdb.db.query<{ event: string }>(
      `SELECT DISTINCT event FROM outbox WHERE aggregate = 'transfer'`,
    );
    const events = rows.map((r) => r.event).sort();
    assert.deepEqual(
      events,
      ['transfer.completed', 'transfer.created', 'transfer.failed'],
      JSON.stringify(events),
    );
    const audits = await tdb.db.query<{ decision: Record<string, unknown> }>(
      `SELECT decision FROM audit_log WHERE action = 'transfer.create' ORDER BY id DESC LIMIT 1`,
    );
    const d = audits.rows[0]?.decision ?? {};
    assert.ok(d.policy_version && d.registry_version && d.decision_id, JSON.stringify(d));
  });
});
