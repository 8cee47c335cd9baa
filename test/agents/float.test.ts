import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { bearer, startAgentHarness, type AgentHarness, type AgentLogin, type TestAgent } from './harness.ts';

/** Float instructions (PENDING → APPROVED → SETTLED, REJECTED, CANCELLED) and commission payouts. */
describe('agent float instructions and commission payouts', () => {
  let h: AgentHarness;
  let a: TestAgent;
  let b: TestAgent;
  let la: AgentLogin;
  let lb: AgentLogin;
  const phone = '+254722000101';
  let keyN = 0;
  const idem = () => ({ 'idempotency-key': `float-key-${++keyN}-${Date.now()}` });
  const ops = (tenant = 'ta') => ({
    authorization: 'Bearer service-token-checked-by-the-edge',
    'x-tenant-id': tenant,
    'x-principal-id': 'staff-ops-1',
    'x-roles': 'ops',
  });
  const posted = async (account: string) => {
    const { rows } = await h.tdb.db.query<{ v: string; held: string }>(
      'SELECT (credits_posted - debits_posted)::text AS v, pending_debits::text AS held FROM ledger_balances WHERE account_id = $1',
      [account],
    );
    return { v: Number(rows[0]?.v), held: Number(rows[0]?.held) };
  };

  before(async () => {
    h = await startAgentHarness();
    a = await h.agent('ta', 'AG3001', '+254711000031');
    b = await h.agent('ta', 'AG3002', '+254711000032');
    la = await h.login(a);
    lb = await h.login(b);
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
        fullName: 'Amina Otieno',
        idType: 'NATIONAL_ID',
        idNumber: 'F1000001',
        dateOfBirth: '1991-02-03',
      },
      bearer(la.accessToken, idem()),
    );
    assert.equal(kyc.status, 201, kyc.text);
  });
  after(() => h.close());

  let topup: Record<string, string> = {};
  it('top-up: PENDING, approved and settled by ops through the ledger, each step audited and idempotent', async () => {
    const key = idem();
    const r = await h.post(
      '/v1/float/topup',
      { amount: '5000.00', reference: 'SLIP-1' },
      bearer(la.accessToken, key),
    );
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.state, 'PENDING');
    const again = await h.post(
      '/v1/float/topup',
      { amount: '5000.00', reference: 'SLIP-1' },
      bearer(la.accessToken, key),
    );
    assert.equal(again.text, r.text);
    assert.equal(again.headers['idempotent-replayed'], 'true');
    assert.equal(again.headers['cache-control'], 'no-store', 'a replay may carry a secret: never cached');
    topup = r.json;
    assert.equal(
      (await h.get(`/v1/float/instructions/${topup.id}`, bearer(lb.accessToken))).status,
      404,
      "another agent's instruction",
    );
    const early = await h.post(`/v1/ops/float/instructions/${topup.id}/settle`, {}, { ...ops(), ...idem() });
    assert.equal(early.status, 409, early.text);
    assert.equal(early.json.code, 'FLOAT_INSTRUCTION_STATE');
    const notOps = await h.post(
      `/v1/ops/float/instructions/${topup.id}/approve`,
      {},
      { ...ops(), 'x-roles': 'readonly', ...idem() },
    );
    assert.equal(notOps.status, 403);
    assert.equal(
      (await h.post(`/v1/ops/float/instructions/${topup.id}/approve`, {}, { ...ops('tb'), ...idem() }))
        .status,
      404,
      'other tenant',
    );
    const ap = await h.post(`/v1/ops/float/instructions/${topup.id}/approve`, {}, { ...ops(), ...idem() });
    assert.equal(ap.status, 200, ap.text);
    assert.equal(ap.json.state, 'APPROVED');
    const list = await h.get('/v1/ops/float/instructions?state=APPROVED', ops());
    assert.deepEqual(
      list.json.items.map((i: { id: string }) => i.id),
      [topup.id],
    );
    const st = await h.post(`/v1/ops/float/instructions/${topup.id}/settle`, {}, { ...ops(), ...idem() });
    assert.equal(st.status, 200, st.text);
    assert.equal(st.json.state, 'SETTLED');
    assert.deepEqual(
      st.json.history.map((s: { state: string }) => s.state),
      ['PENDING', 'APPROVED', 'SETTLED'],
    );
    assert.equal((await posted(a.floatAccountId)).v, 5000);
    const { rows } = await h.tdb.db.query<{ type_code: string }>(
      'SELECT type_code FROM ledger_postings WHERE id = $1',
      [st.json.postingId],
    );
    assert.equal(rows[0]?.type_code, 'FLOAT_TOPUP');
    const audit = await h.tdb.db.query<{ action: string }>(
      `SELECT action FROM audit_log WHERE target->>'id' = $1 ORDER BY id`,
      [topup.id],
    );
    assert.deepEqual(
      audit.rows.map((x) => x.action),
      ['agent.float.topup.request', 'agent.float.approve', 'agent.float.settle'],
    );
    const twice = await h.post(`/v1/ops/float/instructions/${topup.id}/settle`, {}, { ...ops(), ...idem() });
    assert.equal(twice.json.code, 'FLOAT_INSTRUCTION_STATE');
    const f = await h.get('/v1/float', bearer(la.accessToken));
    assert.equal(f.status, 200, f.text);
    assert.equal(f.json.balance, '5000.00');
    assert.equal(f.json.available, '5000.00');
  });

  it('redeem: holds the amount at once, cancel and reject release it, settle captures it', async () => {
    const tooMuch = await h.post('/v1/float/redeem', { amount: '9000.00' }, bearer(la.accessToken, idem()));
    assert.equal(tooMuch.status, 422);
    assert.equal(tooMuch.json.code, 'INSUFFICIENT_FUNDS');
    const r1 = await h.post('/v1/float/redeem', { amount: '1000.00' }, bearer(la.accessToken, idem()));
    assert.equal(r1.status, 201, r1.text);
    assert.deepEqual(await posted(a.floatAccountId), { v: 5000, held: 1000 });
    assert.equal((await h.get('/v1/float', bearer(la.accessToken))).json.available, '4000.00');
    assert.equal(
      (await h.post(`/v1/float/instructions/${r1.json.id}/cancel`, {}, bearer(lb.accessToken, idem())))
        .status,
      404,
    );
    const c = await h.post(`/v1/float/instructions/${r1.json.id}/cancel`, {}, bearer(la.accessToken, idem()));
    assert.equal(c.json.state, 'CANCELLED');
    assert.deepEqual(await posted(a.floatAccountId), { v: 5000, held: 0 });
    const r2 = await h.post('/v1/float/redeem', { amount: '700.00' }, bearer(la.accessToken, idem()));
    const rej = await h.post(
      `/v1/ops/float/instructions/${r2.json.id}/reject`,
      { reason: 'no bank account on file' },
      { ...ops(), ...idem() },
    );
    assert.equal(rej.json.state, 'REJECTED');
    assert.equal(rej.json.history.at(-1).reason, 'no bank account on file');
    assert.equal(
      (await h.post(`/v1/float/instructions/${r2.json.id}/cancel`, {}, bearer(la.accessToken, idem()))).json
        .code,
      'FLOAT_INSTRUCTION_STATE',
    );
    const r3 = await h.post('/v1/float/redeem', { amount: '500.00' }, bearer(la.accessToken, idem()));
    await h.post(`/v1/ops/float/instructions/${r3.json.id}/approve`, {}, { ...ops(), ...idem() });
    const st = await h.post(`/v1/ops/float/instructions/${r3.json.id}/settle`, {}, { ...ops(), ...idem() });
    assert.equal(st.json.state, 'SETTLED', st.text);
    assert.deepEqual(await posted(a.floatAccountId), { v: 4500, held: 0 });
  });

  let txnId = '';
  it('commissions: accrued list, preview names the entries, accept pays once into the float', async () => {
    for (const amount of ['1000.00', '500.00']) {
      const r = await h.post(
        '/v1/txns/cashin',
        { customerPhone: phone, amount },
        bearer(la.accessToken, idem()),
      );
      assert.equal(r.status, 201, r.text);
      txnId = r.json.id;
    }
    const list = await h.get(`/v1/agents/${a.id}/commissions?state=ACCRUED`, bearer(la.accessToken));
    assert.equal(list.status, 200, list.text);
    assert.deepEqual(list.json.items.map((i: { amount: string }) => i.amount).sort(), ['2.00', '4.00']);
    assert.equal(list.json.totals.accrued, '6.00');
    assert.equal(
      (await h.get(`/v1/agents/${b.id}/commissions`, bearer(la.accessToken))).status,
      403,
      "another agent's commissions",
    );
    const page = await h.get(`/v1/agents/${a.id}/commissions?limit=1`, bearer(la.accessToken));
    const next = await h.get(
      `/v1/agents/${a.id}/commissions?limit=1&cursor=${page.json.next_cursor}`,
      bearer(la.accessToken),
    );
    assert.notEqual(next.json.items[0].id, page.json.items[0].id);
    assert.equal(page.json.nextCursor, page.json.next_cursor, 'the old name, for one more release');
    const pv = await h.post(
      `/v1/agents/${a.id}/commissions/payouts/preview`,
      {},
      bearer(la.accessToken, idem()),
    );
    assert.equal(pv.status, 201, pv.text);
    assert.equal(pv.json.amount, '6.00');
    assert.equal(pv.json.entries.length, 2);
    const floatBefore = (await posted(a.floatAccountId)).v;
    const key = idem();
    const ok = await h.post(
      `/v1/agents/${a.id}/commissions/payouts/accept`,
      { payoutId: pv.json.payoutId },
      bearer(la.accessToken, key),
    );
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.state, 'ACCEPTED');
    const replay = await h.post(
      `/v1/agents/${a.id}/commissions/payouts/accept`,
      { payoutId: pv.json.payoutId },
      bearer(la.accessToken, key),
    );
    assert.equal(replay.text, ok.text, 'same key: the first answer');
    const twice = await h.post(
      `/v1/agents/${a.id}/commissions/payouts/accept`,
      { payoutId: pv.json.payoutId },
      bearer(la.accessToken, idem()),
    );
    assert.equal(twice.status, 409);
    assert.equal(twice.json.code, 'PAYOUT_ALREADY_ACCEPTED');
    assert.equal((await posted(a.floatAccountId)).v, floatBefore + 6);
    assert.equal((await posted(a.commissionAccountId)).v, 0);
    const { rows } = await h.tdb.db.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM ledger_entries WHERE posting_id = $1',
      [ok.json.postingId],
    );
    assert.equal(rows[0]?.n, 2, 'one posting: commission wallet → float');
    const none = await h.post(
      `/v1/agents/${a.id}/commissions/payouts/preview`,
      {},
      bearer(la.accessToken, idem()),
    );
    assert.equal(none.json.code, 'NOTHING_TO_PAY');
  });

  it('a reversal after payout nets off the next payout; a preview made stale by a reversal is refused', async () => {
    const rev = await h.post(`/v1/txns/${txnId}/reverse`, {}, bearer(la.accessToken, idem()));
    assert.equal(rev.status, 200, rev.text);
    const r = await h.post(
      '/v1/txns/cashin',
      { customerPhone: phone, amount: '2500.00' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(r.json.commission, '10.00');
    const r2 = await h.post(
      '/v1/txns/cashin',
      { customerPhone: phone, amount: '250.00' },
      bearer(la.accessToken, idem()),
    );
    const stale = await h.post(
      `/v1/agents/${a.id}/commissions/payouts/preview`,
      {},
      bearer(la.accessToken, idem()),
    );
    assert.equal(stale.json.amount, '9.00', '10 + 1 − 2 clawed back');
    assert.equal(
      (await h.post(`/v1/txns/${r2.json.id}/reverse`, {}, bearer(la.accessToken, idem()))).status,
      200,
    );
    const refused = await h.post(
      `/v1/agents/${a.id}/commissions/payouts/accept`,
      { payoutId: stale.json.payoutId },
      bearer(la.accessToken, idem()),
    );
    assert.equal(refused.json.code, 'PAYOUT_STALE');
    const pv = await h.post(
      `/v1/agents/${a.id}/commissions/payouts/preview`,
      {},
      bearer(la.accessToken, idem()),
    );
    assert.equal(pv.json.amount, '8.00');
    const floatBefore = (await posted(a.floatAccountId)).v;
    const ok = await h.post(
      `/v1/agents/${a.id}/commissions/payouts/accept`,
      { payoutId: pv.json.payoutId },
      bearer(la.accessToken, idem()),
    );
    assert.equal(ok.status, 200, ok.text);
    assert.equal((await posted(a.floatAccountId)).v, floatBefore + 8);
    assert.equal(
      (await posted(a.commissionAccountId)).v,
      0,
      'commission wallet empty: clawback returned to expense',
    );
    const late = await h.post(
      `/v1/agents/${a.id}/commissions/payouts/accept`,
      { payoutId: stale.json.payoutId },
      bearer(la.accessToken, idem()),
    );
    assert.equal(late.status, 409);
  });
});
