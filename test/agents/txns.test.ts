import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { bearer, startAgentHarness, type AgentHarness, type AgentLogin, type TestAgent } from './harness.ts';

describe('agent KYC and transactions through the ledger', () => {
  let h: AgentHarness;
  let a: TestAgent;
  let b: TestAgent;
  let la: AgentLogin;
  let lb: AgentLogin;
  const phone = '+254722000001';
  let keyN = 0;
  const idem = () => ({ 'idempotency-key': `test-key-${++keyN}-${Date.now()}` });
  const balance = async (account: string) => {
    const { rows } = await h.tdb.db.query<{ v: string }>(
      'SELECT (credits_posted - debits_posted)::text AS v FROM ledger_balances WHERE account_id = $1',
      [account],
    );
    return Number(rows[0]?.v);
  };
  const wallet = async () =>
    (
      await h.tdb.db.query<{ id: string }>(
        `SELECT a.id FROM ledger_accounts a JOIN customers c ON c.id::text = a.owner_id WHERE c.phone_e164 = $1`,
        [phone],
      )
    ).rows[0]?.id ?? '';

  before(async () => {
    h = await startAgentHarness();
    a = await h.agent('ta', 'AG2001', '+254711000011');
    b = await h.agent('ta', 'AG2002', '+254711000012');
    la = await h.login(a);
    lb = await h.login(b);
    await h.fundFloat(a, '10000.00');
    assert.equal((await h.post('/customers/auth/otp/send', { tenantId: 'ta', phone })).status, 202);
    assert.equal(
      (await h.post('/customers/auth/otp/verify', { tenantId: 'ta', phone, otp: h.sms.lastCode(phone) }))
        .status,
      200,
    );
    await h.tdb.db.query(
      `INSERT INTO kyc_watchlist (tenant_id, id, name_norm, reason) VALUES ('ta', gen_random_uuid(), 'osama example', 'sanctions')`,
    );
  });
  after(() => h.close());

  it('refuses cash-in before KYC; screens the watch-list; registers level 1', async () => {
    const early = await h.post(
      '/v1/txns/cashin',
      { customerPhone: phone, amount: '100.00' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(early.status, 422);
    assert.equal(early.json.code, 'KYC_REQUIRED');
    const kyc = {
      phone,
      fullName: 'Osama Example',
      idType: 'NATIONAL_ID',
      idNumber: 'A1234567',
      dateOfBirth: '1990-05-01',
    };
    const hit = await h.post('/v1/kyc/customers', kyc, bearer(la.accessToken, idem()));
    assert.equal(hit.status, 422);
    assert.equal(hit.json.code, 'WATCHLIST_MATCH');
    const unverified = await h.post(
      '/v1/kyc/customers',
      { ...kyc, phone: '+254799999999', fullName: 'Jane Wanjiru' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(unverified.json.code, 'PHONE_NOT_VERIFIED');
    const ok = await h.post(
      '/v1/kyc/customers',
      { ...kyc, fullName: 'Jane Wanjiru' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(ok.status, 201, ok.text);
    assert.equal(ok.json.level, 1);
    const st = await h.get(`/v1/kyc/customers/${ok.json.customerId}/status`, bearer(la.accessToken));
    assert.equal(st.json.status, 'ACTIVE');
  });

  let cashin: Record<string, string> = {};
  it('cash-in posts at once, accrues commission and replays by Idempotency-Key', async () => {
    const key = idem();
    const r = await h.post(
      '/v1/txns/cashin',
      { customerPhone: phone, amount: '1000.00' },
      bearer(la.accessToken, key),
    );
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.state, 'POSTED');
    assert.equal(r.json.commission, '4.00');
    const again = await h.post(
      '/v1/txns/cashin',
      { customerPhone: phone, amount: '1000.00' },
      bearer(la.accessToken, key),
    );
    assert.equal(again.text, r.text);
    assert.equal(again.headers['idempotent-replayed'], 'true');
    cashin = r.json;
    assert.equal(await balance(a.floatAccountId), 9000);
    assert.equal(await balance(await wallet()), 1000);
    const tooBig = await h.post(
      '/v1/txns/cashin',
      { customerPhone: phone, amount: '20000.00' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(tooBig.status, 422);
    assert.equal(tooBig.json.code, 'INSUFFICIENT_FUNDS', 'agent float too low');
  });

  let cashout: Record<string, string> = {};
  it('cash-out waits for the customer code; wrong code refused; right code posts with the fee', async () => {
    const r = await h.post(
      '/v1/txns/cashout',
      { customerPhone: phone, amount: '500.00' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(r.status, 202, r.text);
    assert.equal(r.json.state, 'AWAITING_CUSTOMER');
    assert.equal(r.json.fee, '10.00');
    const code = h.sms.lastCode(phone);
    const wrong = await h.post(
      `/v1/txns/${r.json.id}/authorize`,
      { customerCode: code === '000000' ? '111111' : '000000' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(wrong.status, 401);
    assert.equal(wrong.json.code, 'CUSTOMER_CODE_INVALID');
    const other = await h.post(
      `/v1/txns/${r.json.id}/authorize`,
      { customerCode: code },
      bearer(lb.accessToken, idem()),
    );
    assert.equal(other.status, 404, "another agent's transaction");
    const ok = await h.post(
      `/v1/txns/${r.json.id}/authorize`,
      { customerCode: code },
      bearer(la.accessToken, idem()),
    );
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.state, 'POSTED');
    cashout = ok.json;
    assert.equal(await balance(a.floatAccountId), 9500);
    assert.equal(await balance(await wallet()), 490);
    assert.equal(await balance(a.commissionAccountId), 8);
    const reuse = await h.post(
      `/v1/txns/${r.json.id}/authorize`,
      { customerCode: code },
      bearer(la.accessToken, idem()),
    );
    assert.equal(reuse.json.code, 'TXN_NOT_AWAITING');
  });

  it('refuses a cash-out above the balance (at authorisation) and above the KYC level-1 limit', async () => {
    const r = await h.post(
      '/v1/txns/cashout',
      { customerPhone: phone, amount: '900.00' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(r.status, 202);
    const ok = await h.post(
      `/v1/txns/${r.json.id}/authorize`,
      { customerCode: h.sms.lastCode(phone) },
      bearer(la.accessToken, idem()),
    );
    assert.equal(ok.json.code, 'INSUFFICIENT_FUNDS');
    const g = await h.get(`/v1/txns/${r.json.id}`, bearer(la.accessToken));
    assert.equal(g.json.state, 'FAILED');
    const limit = await h.post(
      '/v1/txns/cashout',
      { customerPhone: phone, amount: '60000.00' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(limit.json.code, 'LIMIT_EXCEEDED');
  });

  it('expires an unanswered code', async () => {
    const r = await h.post(
      '/v1/txns/cashout',
      { customerPhone: phone, amount: '10.00' },
      bearer(la.accessToken, idem()),
    );
    h.clock.t += 6 * 60_000;
    const late = await h.post(
      `/v1/txns/${r.json.id}/authorize`,
      { customerCode: h.sms.lastCode(phone) },
      bearer(la.accessToken, idem()),
    );
    assert.equal(late.json.code, 'TXN_EXPIRED');
    assert.equal((await h.get(`/v1/txns/${r.json.id}`, bearer(la.accessToken))).json.state, 'EXPIRED');
  });

  it('fails a cash-out at the fifth wrong customer code; the right one no longer posts it', async () => {
    const r = await h.post(
      '/v1/txns/cashout',
      { customerPhone: phone, amount: '10.00' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(r.status, 202, r.text);
    const code = h.sms.lastCode(phone);
    const wrong = code === '000000' ? '111111' : '000000';
    for (let i = 1; i <= 5; i++) {
      const bad = await h.post(
        `/v1/txns/${r.json.id}/authorize`,
        { customerCode: wrong },
        bearer(la.accessToken, idem()),
      );
      assert.equal(bad.json.code, 'CUSTOMER_CODE_INVALID', `attempt ${i}`);
      assert.equal(
        (await h.get(`/v1/txns/${r.json.id}`, bearer(la.accessToken))).json.state,
        i < 5 ? 'AWAITING_CUSTOMER' : 'FAILED',
        `after attempt ${i}`,
      );
    }
    const { rows } = await h.tdb.db.query<{ failure_code: string }>(
      'SELECT failure_code FROM agent_txns WHERE id = $1',
      [r.json.id],
    );
    assert.equal(rows[0]?.failure_code, 'TOO_MANY_CODE_ATTEMPTS');
    assert.equal(
      (
        await h.post(
          `/v1/txns/${r.json.id}/authorize`,
          { customerCode: code },
          bearer(la.accessToken, idem()),
        )
      ).json.code,
      'TXN_NOT_AWAITING',
    );
  });

  it('reverses only own POSTED transactions, once, within the window; commission clawed back', async () => {
    assert.equal(
      (await h.post(`/v1/txns/${cashout.id}/reverse`, {}, bearer(lb.accessToken, idem()))).status,
      404,
    );
    assert.equal((await h.get(`/v1/txns/${cashout.id}`, bearer(lb.accessToken))).status, 404);
    const rev = await h.post(`/v1/txns/${cashout.id}/reverse`, {}, bearer(la.accessToken, idem()));
    assert.equal(rev.status, 200, rev.text);
    assert.equal(rev.json.state, 'REVERSED');
    assert.ok(rev.json.reversalPostingId);
    assert.equal(await balance(a.floatAccountId), 9000);
    assert.equal(await balance(await wallet()), 1000);
    assert.equal(await balance(a.commissionAccountId), 4, 'cash-out commission clawed back');
    const twice = await h.post(`/v1/txns/${cashout.id}/reverse`, {}, bearer(la.accessToken, idem()));
    assert.equal(twice.json.code, 'TXN_ALREADY_REVERSED');
    const { rows } = await h.tdb.db.query(`SELECT reverses_posting_id FROM ledger_postings WHERE id = $1`, [
      rev.json.reversalPostingId,
    ]);
    assert.equal(rows[0]?.reverses_posting_id, cashout.postingId);
    h.clock.t += 25 * 60 * 60_000;
    la = await h.login(a);
    const late = await h.post(`/v1/txns/${cashin.id}/reverse`, {}, bearer(la.accessToken, idem()));
    assert.equal(late.json.code, 'REVERSAL_WINDOW_CLOSED');
  });

  // Routes no test called before (issue 21 item 6).
  const ops = (tenant = 'ta', roles = 'ops') => ({
    authorization: 'Bearer service-token-checked-by-the-edge',
    'x-tenant-id': tenant,
    'x-principal-id': 'staff-ops-1',
    'x-roles': roles,
  });

  it("ops reverse any agent's POSTED transaction of the tenant, once, audited as ops; not without the role, not another tenant's", async () => {
    const r = await h.post(
      '/v1/txns/cashin',
      { customerPhone: phone, amount: '100.00' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(r.status, 201, r.text);
    const float = await balance(a.floatAccountId);
    const notOps = await h.post(
      `/v1/ops/txns/${r.json.id}/reverse`,
      {},
      { ...ops('ta', 'readonly'), ...idem() },
    );
    assert.equal(notOps.status, 403, notOps.text);
    assert.equal(
      (await h.post(`/v1/ops/txns/${r.json.id}/reverse`, {}, { ...ops('tb'), ...idem() })).json.code,
      'TXN_NOT_FOUND',
    );
    assert.equal(await balance(a.floatAccountId), float, 'nothing moved');
    const rev = await h.post(`/v1/ops/txns/${r.json.id}/reverse`, {}, { ...ops(), ...idem() });
    assert.equal(rev.status, 200, rev.text);
    assert.equal(rev.json.state, 'REVERSED');
    assert.equal(await balance(a.floatAccountId), float + 100);
    assert.equal(
      (await h.post(`/v1/ops/txns/${r.json.id}/reverse`, {}, { ...ops(), ...idem() })).json.code,
      'TXN_ALREADY_REVERSED',
    );
    const { rows } = await h.tdb.db.query<{ actor: { type: string; id: string } }>(
      `SELECT actor FROM audit_log WHERE tenant_id = 'ta' AND action = 'agent.txn.reverse' AND target->>'id' = $1`,
      [r.json.id],
    );
    assert.deepEqual(
      rows.map((x) => x.actor),
      [{ type: 'ops', id: 'staff-ops-1' }],
    );
  });

  it("a cash-in waiting for a balance row does not hold the tenant's audit chain head (the ledger batch's lock order: balance rows, then the audit head)", async () => {
    const locker = await h.tdb.db.pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query('SELECT 1 FROM ledger_balances WHERE account_id = $1 FOR UPDATE', [
        a.floatAccountId,
      ]);
      const pending = h.post(
        '/v1/txns/cashin',
        { customerPhone: phone, amount: '5.00' },
        bearer(la.accessToken, idem()),
      );
      // Poll (not a timed wait) until the cash-in's backend waits on a lock the locker holds.
      const lockerPid = (await locker.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
      const blocked = async () =>
        (
          await h.tdb.db.query<{ n: number }>(
            'SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))',
            [lockerPid],
          )
        ).rows[0]?.n ?? 0;
      for (let i = 0; i < 1000 && (await blocked()) === 0; i++) await new Promise((r) => setTimeout(r, 5));
      assert.equal(await blocked(), 1, 'the cash-in waits on the float balance row');
      await locker.query(`SELECT 1 FROM audit_chain_heads WHERE tenant_id = 'ta' FOR UPDATE NOWAIT`);
      await locker.query('ROLLBACK');
      const r = await pending;
      assert.equal(r.status, 201, r.text);
      const { rows } = await h.tdb.db.query<{ action: string }>(
        `SELECT action FROM audit_log WHERE tenant_id = 'ta' AND target->>'id' = $1 ORDER BY id`,
        [r.json.id],
      );
      assert.deepEqual(
        rows.map((x) => x.action),
        ['agent.txn.cashin.initiate', 'agent.txn.post'],
        'the audit records keep their order',
      );
    } finally {
      await locker.query('ROLLBACK').catch(() => undefined);
      locker.release();
    }
  });

  it('KYC upgrade to level 2 needs an ID image and a selfie; an expired record is renewed by re-KYC with the same ID number only', async () => {
    const { rows } = await h.tdb.db.query<{ id: string }>(
      `SELECT id FROM customers WHERE tenant_id = 'ta' AND phone_e164 = $1`,
      [phone],
    );
    const customer = rows[0]?.id ?? '';
    const sha = (c: string) => c.repeat(64);
    const noSelfie = await h.post(
      `/v1/kyc/customers/${customer}/upgrade`,
      {
        documents: [
          { kind: 'ID_FRONT', sha256: sha('a') },
          { kind: 'PROOF_OF_ADDRESS', sha256: sha('b') },
        ],
      },
      bearer(la.accessToken, idem()),
    );
    assert.equal(noSelfie.status, 422, noSelfie.text);
    const up = await h.post(
      `/v1/kyc/customers/${customer}/upgrade`,
      {
        documents: [
          { kind: 'ID_FRONT', sha256: sha('a') },
          { kind: 'SELFIE', sha256: sha('c') },
        ],
      },
      bearer(la.accessToken, idem()),
    );
    assert.equal(up.status, 200, up.text);
    assert.equal(up.json.level, 2);
    const docs = await h.tdb.db.query<{ kind: string }>(
      `SELECT kind FROM kyc_documents WHERE tenant_id = 'ta' AND customer_id = $1 ORDER BY kind`,
      [customer],
    );
    assert.deepEqual(
      docs.rows.map((d) => d.kind),
      ['ID_FRONT', 'SELFIE'],
    );
    // Two years on, the record has lapsed: no money moves for the customer until re-KYC.
    h.clock.t += 2 * 365 * 24 * 60 * 60_000 + 60_000;
    la = await h.login(a);
    const lapsed = await h.get(`/v1/kyc/customers/${customer}/status`, bearer(la.accessToken));
    assert.equal(lapsed.json.status, 'EXPIRED');
    assert.equal(lapsed.json.reKycDue, true);
    assert.equal(
      (
        await h.post(
          '/v1/txns/cashin',
          { customerPhone: phone, amount: '10.00' },
          bearer(la.accessToken, idem()),
        )
      ).json.code,
      'KYC_REQUIRED',
    );
    assert.equal(
      (
        await h.post(
          `/v1/kyc/customers/${customer}/upgrade`,
          {
            documents: [
              { kind: 'ID_BACK', sha256: sha('d') },
              { kind: 'SELFIE', sha256: sha('e') },
            ],
          },
          bearer(la.accessToken, idem()),
        )
      ).json.code,
      'KYC_REQUIRED',
    );
    const wrongId = await h.post(
      `/v1/kyc/customers/${customer}/rekcy`,
      { idNumber: 'B7654321' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(wrongId.status, 422, wrongId.text);
    const renewed = await h.post(
      `/v1/kyc/customers/${customer}/rekcy`,
      { idNumber: 'A1234567' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(renewed.status, 200, renewed.text);
    assert.equal(renewed.json.status, 'ACTIVE');
    assert.equal(renewed.json.level, 2, 're-KYC keeps the level');
    assert.equal(renewed.json.expiresAt, new Date(h.clock.t + 2 * 365 * 24 * 60 * 60_000).toISOString());
    const cashinAgain = await h.post(
      '/v1/txns/cashin',
      { customerPhone: phone, amount: '10.00' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(cashinAgain.status, 201, cashinAgain.text);
    const audits = await h.tdb.db.query<{ action: string }>(
      `SELECT action FROM audit_log WHERE tenant_id = 'ta' AND target->>'id' = $1 AND action LIKE 'kyc.%' ORDER BY id`,
      [customer],
    );
    assert.deepEqual(
      audits.rows.map((x) => x.action),
      ['kyc.screen', 'kyc.register', 'kyc.upgrade', 'kyc.rekyc'],
    );
  });
});
