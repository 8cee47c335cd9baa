import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { bearer, startAgentHarness, type AgentHarness, type AgentLogin, type TestAgent } from './harness.ts';

/** Wallet reads (own; a customer's with the customer's code), EOD report and close, transaction and float reports. */
describe('agent wallets and reports', () => {
  let h: AgentHarness;
  let a: TestAgent;
  let b: TestAgent;
  let la: AgentLogin;
  let lb: AgentLogin;
  const phone = '+254722000201';
  let keyN = 0;
  const idem = () => ({ 'idempotency-key': `rep-key-${++keyN}-${Date.now()}` });
  let cashinId = '';
  let cashoutId = '';

  before(async () => {
    h = await startAgentHarness();
    a = await h.agent('ta', 'AG4001', '+254711000041');
    b = await h.agent('ta', 'AG4002', '+254711000042');
    la = await h.login(a);
    lb = await h.login(b);
    await h.fundFloat(a, '10000.00');
    assert.equal((await h.post('/customers/auth/otp/send', { tenantId: 'ta', phone })).status, 202);
    assert.equal(
      (await h.post('/customers/auth/otp/verify', { tenantId: 'ta', phone, otp: h.sms.lastCode(phone) }))
        .status,
      200,
    );
    const kyc = await h.post(
      '/v1/kyc/customers',
      {
        phone,
        fullName: 'Baraka Mwangi',
        idType: 'NATIONAL_ID',
        idNumber: 'G2000002',
        dateOfBirth: '1988-07-09',
      },
      bearer(la.accessToken, idem()),
    );
    assert.equal(kyc.status, 201, kyc.text);
    const ci = await h.post(
      '/v1/txns/cashin',
      { customerPhone: phone, amount: '2000.00' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(ci.status, 201, ci.text);
    cashinId = ci.json.id;
    const co = await h.post(
      '/v1/txns/cashout',
      { customerPhone: phone, amount: '500.00' },
      bearer(la.accessToken, idem()),
    );
    const ok = await h.post(
      `/v1/txns/${co.json.id}/authorize`,
      { customerCode: h.sms.lastCode(phone) },
      bearer(la.accessToken, idem()),
    );
    assert.equal(ok.status, 200, ok.text);
    cashoutId = ok.json.id;
  });
  after(() => h.close());

  it("reads the agent's own wallets; not another agent's or a platform account", async () => {
    const fl = await h.get(`/v1/wallets/${a.floatAccountId}/balance`, bearer(la.accessToken));
    assert.equal(fl.status, 200, fl.text);
    assert.equal(fl.json.balance, '8500.00');
    const cm = await h.get(`/v1/wallets/${a.commissionAccountId}/balance`, bearer(la.accessToken));
    assert.equal(cm.json.balance, '12.00', '8.00 cash-in + 4.00 cash-out');
    const tx = await h.get(`/v1/wallets/${a.floatAccountId}/transactions?limit=2`, bearer(la.accessToken));
    assert.equal(tx.status, 200, tx.text);
    assert.deepEqual(
      tx.json.items.map((i: { type: string; direction: string; amount: string; balanceAfter: string }) => [
        i.type,
        i.direction,
        i.amount,
        i.balanceAfter,
      ]),
      [
        ['CASHOUT', 'in', '500.00', '8500.00'],
        ['CASHIN', 'out', '2000.00', '8000.00'],
      ],
    );
    const rest = await h.get(
      `/v1/wallets/${a.floatAccountId}/transactions?limit=2&cursor=${tx.json.next_cursor}`,
      bearer(la.accessToken),
    );
    assert.deepEqual(
      rest.json.items.map((i: { type: string }) => i.type),
      ['FUNDING'],
    );
    assert.equal(tx.json.nextCursor, tx.json.next_cursor, 'the old name, for one more release');
    assert.equal(rest.json.next_cursor, null);
    assert.equal(rest.json.nextCursor, null);
    assert.equal(
      (await h.get(`/v1/wallets/${a.floatAccountId}/balance`, bearer(lb.accessToken))).status,
      404,
    );
    const { rows } = await h.tdb.db.query<{ id: string }>(
      `SELECT id FROM ledger_accounts WHERE tenant_id = 'ta' AND owner_type = 'platform' LIMIT 1`,
    );
    assert.equal(
      (await h.get(`/v1/wallets/${rows[0]?.id}/balance`, bearer(la.accessToken))).json.code,
      'WALLET_NOT_FOUND',
    );
  });

  it("reads a customer's wallet only with the customer's one-time code, once", async () => {
    const consent = await h.post(
      '/v1/wallets/consent',
      { customerPhone: phone },
      bearer(la.accessToken, idem()),
    );
    assert.equal(consent.status, 202, consent.text);
    const w = consent.json.walletId;
    const none = await h.get(`/v1/wallets/${w}/balance`, bearer(la.accessToken));
    assert.equal(none.status, 403);
    assert.equal(none.json.code, 'CUSTOMER_CONSENT_REQUIRED');
    const code = h.sms.lastCode(phone);
    const wrong = await h.get(
      `/v1/wallets/${w}/balance`,
      bearer(la.accessToken, { 'x-customer-code': code === '000000' ? '111111' : '000000' }),
    );
    assert.equal(wrong.status, 401);
    assert.equal(wrong.json.code, 'CUSTOMER_CODE_INVALID');
    const other = await h.get(
      `/v1/wallets/${w}/balance`,
      bearer(lb.accessToken, { 'x-customer-code': code }),
    );
    assert.equal(other.status, 401, 'the code is bound to the agent that asked');
    const ok = await h.get(
      `/v1/wallets/${w}/transactions`,
      bearer(la.accessToken, { 'x-customer-code': code }),
    );
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.balance, '1490.00', '2000 in, 500 + 10 fee out');
    assert.equal(ok.json.consent, true);
    assert.equal(ok.json.items.length, 2);
    const reuse = await h.get(
      `/v1/wallets/${w}/balance`,
      bearer(la.accessToken, { 'x-customer-code': code }),
    );
    assert.equal(reuse.status, 401, 'one read per code');
    const audit = await h.tdb.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM audit_log WHERE action = 'agent.wallet.read' AND target->>'id' = $1 AND decision->>'allow' = 'true'`,
      [w],
    );
    assert.equal(audit.rows[0]?.n, 1);
  });

  it('EOD report: counts and amounts by type, float and commissions reconciled with the ledger', async () => {
    const r = await h.get('/v1/reports/eod', bearer(la.accessToken));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.businessDate, '2026-03-02');
    assert.equal(r.json.closed, false);
    assert.deepEqual(r.json.transactions.byType.CASHIN, {
      count: 1,
      amount: '2000.00',
      fees: '0.00',
      commission: '8.00',
    });
    assert.deepEqual(r.json.transactions.byType.CASHOUT, {
      count: 1,
      amount: '500.00',
      fees: '10.00',
      commission: '4.00',
    });
    assert.equal(r.json.float.opening, '0.00');
    assert.equal(r.json.float.closing, '8500.00');
    assert.equal(r.json.float.reconciled, true);
    assert.deepEqual(
      r.json.float.movements.map((m: { type: string; in: string; out: string }) => [m.type, m.in, m.out]),
      [
        ['CASHIN', '0.00', '2000.00'],
        ['CASHOUT', '500.00', '0.00'],
        ['FUNDING', '10000.00', '0.00'],
      ],
    );
    assert.equal(r.json.commissions.closing, '12.00');
    assert.equal(r.json.commissions.reconciled, true);
    assert.equal(
      (await h.get('/v1/reports/eod?date=2026-03-03', bearer(la.accessToken))).json.code,
      'DAY_NOT_STARTED',
    );
  });

  it('transaction report as JSON pages and as CSV', async () => {
    const j = await h.get('/v1/reports/txns?kind=CASHIN', bearer(la.accessToken));
    assert.equal(j.status, 200, j.text);
    assert.deepEqual(
      j.json.items.map((t: { id: string }) => t.id),
      [cashinId],
    );
    const csv = await h.get('/v1/reports/txns', bearer(la.accessToken, { accept: 'text/csv' }));
    assert.equal(csv.status, 200);
    assert.match(csv.headers['content-type'] ?? '', /^text\/csv/);
    const lines = csv.text.trim().split('\r\n');
    assert.equal(lines[0]?.split(',')[0], 'id');
    assert.equal(lines.length, 3);
    assert.ok(
      lines.some((l) => l.startsWith(`${cashoutId},2026-03-02,CASHOUT,POSTED,KES,500.00,10.00,4.00`)),
      csv.text,
    );
    assert.equal(
      (await h.get('/v1/reports/txns?from=2026-01-01&to=2026-03-02', bearer(la.accessToken))).status,
      400,
      'range too long',
    );
    assert.equal(
      (await h.get('/v1/reports/txns', bearer(lb.accessToken))).json.items.length,
      0,
      "another agent's report is its own",
    );
  });

  it('close: the day becomes immutable; a late or backdated transaction is refused; the next day opens from the close', async () => {
    const pending = await h.post(
      '/v1/txns/cashout',
      { customerPhone: phone, amount: '100.00' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(pending.json.state, 'AWAITING_CUSTOMER');
    const future = await h.post(
      '/v1/reports/eod/close',
      { date: '2026-03-03' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(future.json.code, 'DAY_NOT_STARTED', future.text);
    const past = await h.post(
      '/v1/reports/eod/close',
      { date: '2026-03-01' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(past.status, 409, past.text);
    assert.equal(
      past.json.code,
      'CONFLICT',
      'a day before the latest transactions: close the latest day instead',
    );
    const close = await h.post('/v1/reports/eod/close', {}, bearer(la.accessToken, idem()));
    assert.equal(close.status, 201, close.text);
    assert.equal(close.json.closed, true);
    assert.deepEqual(close.json.expiredAtClose, [pending.json.id]);
    assert.equal((await h.get(`/v1/txns/${pending.json.id}`, bearer(la.accessToken))).json.state, 'EXPIRED');
    const again = await h.post('/v1/reports/eod/close', {}, bearer(la.accessToken, idem()));
    assert.equal(again.status, 409);
    assert.equal(again.json.code, 'DAY_ALREADY_CLOSED');
    const late = await h.post(
      '/v1/txns/cashin',
      { customerPhone: phone, amount: '50.00' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(late.status, 409);
    assert.equal(late.json.code, 'DAY_CLOSED');
    await assert.rejects(
      h.tdb.db.query(
        `INSERT INTO agent_txns (tenant_id, id, kind, state, agent_id, customer_id, currency, amount, business_date, created_at, updated_at)
       SELECT 'ta', gen_random_uuid(), 'CASHIN', 'POSTED', agent_id, customer_id, 'KES', 1, '2026-03-01', now(), now() FROM agent_txns WHERE id = $1`,
        [cashinId],
      ),
      /is closed/,
      'a backdated row is refused by the trigger',
    );
    await assert.rejects(
      h.tdb.db.query(`UPDATE agent_eod_closes SET summary = '{}' WHERE agent_id = $1`, [a.id]),
      /cannot be changed/,
    );
    const stored = await h.get('/v1/reports/eod?date=2026-03-02', bearer(la.accessToken));
    assert.equal(stored.json.closed, true);
    assert.equal(stored.json.float.closing, '8500.00');
    // Next day: a new period opening at the close.
    h.clock.t += 24 * 60 * 60_000;
    la = await h.login(a);
    const next = await h.post(
      '/v1/txns/cashin',
      { customerPhone: phone, amount: '50.00' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(next.status, 201, next.text);
    const day2 = await h.get('/v1/reports/eod', bearer(la.accessToken));
    assert.equal(day2.json.businessDate, '2026-03-03');
    assert.equal(day2.json.periodStart, '2026-03-03');
    assert.equal(day2.json.float.opening, '8500.00');
    assert.equal(day2.json.float.closing, '8450.00');
    assert.equal(day2.json.float.reconciled, true);
    assert.equal(day2.json.transactions.byType.CASHIN.count, 1);
    const fr = await h.get('/v1/reports/float?from=2026-03-01&to=2026-03-03', bearer(la.accessToken));
    assert.equal(fr.status, 200, fr.text);
    assert.equal(fr.json.now.balance, '8450.00');
    assert.deepEqual(
      fr.json.closedPeriods.map((p: { businessDate: string }) => p.businessDate),
      ['2026-03-02'],
    );
  });
});
