import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { putServiceToken } from '../../core/platform/service-tokens.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, type Res } from '../helpers/http.ts';
import { journey, type Customer, type Demo, type Journey } from '../helpers/journey.ts';

/**
 * Issue 20 item 4 through the dev gateway, nothing mocked: each staff purpose with its role
 * (service tokens until staff sign-in lands; AAL for people is covered by the policy tests),
 * the masking rule, the fraud hold enforced where money moves, the KYC reason, the analytics
 * group-size floor and a withdrawn consent refused at the edge.
 */
describe('staff purposes through the gateway', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let demo: Demo;
  let j: Journey;
  let alice: Customer;
  let bob: Customer;
  const tok: Record<string, string> = {};
  let alicePaysBob = '';

  const as =
    (who: string) =>
    (
      method: string,
      path: string,
      o: { json?: unknown; headers?: Record<string, string> } = {},
    ): Promise<Res> =>
      call(gw, method, path, {
        ...(o.json !== undefined ? { json: o.json } : {}),
        headers: { authorization: `Bearer ${tok[who]}`, 'x-request-id': randomUUID(), ...o.headers },
      });

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-staff-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    stack = await startStack(config, { checkTimeoutMs: 3000 });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8'));
    j = journey(gw, dataDir, tdb.db, demo);
    for (const [name, roles] of [
      ['support', ['support']],
      ['fraud1', ['fraud']],
      ['fraud2', ['fraud']],
      ['compliance', ['compliance']],
      ['analyst', ['analyst']],
      ['kycagent', ['agent']],
    ] as const) {
      tok[name] = await putServiceToken(tdb.db, 'demo', `e2e-${name}`, [...roles]);
    }
    alice = await j.signUp('+254711200001');
    bob = await j.signUp('+254711200002');
    await tdb.db.query(
      `INSERT INTO kyc_profiles (tenant_id, customer_id, level, status, full_name, id_type, id_number, date_of_birth, registered_by, expires_at, created_at, updated_at)
       VALUES ('demo', $1, 2, 'ACTIVE', 'Amina Wanjiru', 'NATIONAL_ID', 'E2E20001', '1990-02-03', $2, now() + interval '1 year', now(), now())`,
      [alice.id, randomUUID()],
    );
  });
  after(async () => {
    await stack?.stop();
    await tdb?.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('support sees a customer by phone masked (name, phone, card numbers); fraud sees the same in full; other roles are refused at the edge', async () => {
    await j.fund(alice.wallet, '500.00');
    const payee = await j.addPayee(alice, bob.phone);
    assert.equal(payee.status, 201, payee.text);
    alicePaysBob = payee.json.id;
    const t = await j.transfer(alice, payee.json.id, '10.00');
    assert.equal(t.final.status, 200, t.final.text);
    await tdb.db.query(`UPDATE transfers SET reference = 'card 4111 1111 1111 1234' WHERE id = $1`, [
      t.final.json.id,
    ]);

    const s = await as('support')('GET', `/v1/support/customers?phone=${encodeURIComponent(alice.phone)}`);
    assert.equal(s.status, 200, s.text);
    assert.equal(s.json.masking, 'masked');
    assert.equal(s.json.customer.name, 'A**** W******');
    assert.equal(s.json.customer.phone, '+254*******01');
    assert.equal(s.json.accounts[0].id, alice.wallet);
    assert.equal(s.json.transactions[0].counterparty.phone, '+254*******02');
    assert.equal(
      s.json.transactions[0].reference,
      'card ****1234',
      'the full card number is removed, the suffix kept',
    );
    assert.ok(!s.text.includes('4111'));

    const f = await as('fraud1')('GET', `/v1/fraud/customers?phone=${encodeURIComponent(alice.phone)}`);
    assert.equal(f.status, 200, f.text);
    assert.equal(f.json.masking, 'full');
    assert.equal(f.json.customer.name, 'Amina Wanjiru');
    assert.equal(f.json.customer.phone, alice.phone);

    const wrong = await as('support')('GET', `/v1/fraud/customers?phone=${encodeURIComponent(alice.phone)}`);
    assert.equal(wrong.status, 403, wrong.text);
    assert.equal(wrong.json.code, 'POLICY_DENIED', 'the edge refused: support is not a fraud role');
    assert.equal(
      (await as('analyst')('GET', `/v1/support/customers?phone=${encodeURIComponent(alice.phone)}`)).status,
      403,
      'analytics may not read rows',
    );
  });

  it('a fraud hold refuses a transfer out and a cash-out debit, lets a transfer in arrive, notifies the customer, and is lifted only by a second officer', async () => {
    const place = await as('fraud1')('POST', '/v1/fraud/holds', {
      json: { accountId: alice.wallet, reason: 'mule pattern' },
    });
    assert.equal(place.status, 201, place.text);
    assert.equal(
      (
        await as('support')('POST', '/v1/fraud/holds', {
          json: { accountId: bob.wallet, reason: 'not mine' },
        })
      ).status,
      403,
    );
    assert.equal(
      (await as('fraud2')('POST', '/v1/fraud/holds', { json: { accountId: alice.wallet, reason: 'again' } }))
        .json.code,
      'FRAUD_HOLD_EXISTS',
    );

    const out = await j.transfer(alice, alicePaysBob, '5.00');
    assert.equal(out.final.status, 422, out.final.text);
    assert.equal(out.final.json.code, 'ACCOUNT_FROZEN');

    // The ledger path an agent cash-out settles through (core/agents/ledger.ts): a debit of the wallet.
    const cashout = {
      op: 'post',
      tenant: 'demo',
      id: uuidv7(),
      transaction_id: uuidv7(),
      type: 'CASHOUT',
      currency: 'KES',
      entries: [
        { account_id: alice.wallet, side: 'debit', amount: '5.00', currency: 'KES' },
        { account_id: demo.settlementAccounts.KES, side: 'credit', amount: '5.00', currency: 'KES' },
      ],
    };
    const { rows } = await tdb.db.query<{ r: { ok: boolean; code?: string }[] }>(
      'SELECT ledger_apply($1::jsonb) AS r',
      [JSON.stringify([cashout])],
    );
    assert.equal(rows[0]?.r[0]?.code, 'ACCOUNT_FROZEN');

    await j.fund(bob.wallet, '100.00');
    const toAlice = await j.addPayee(bob, alice.phone);
    const inbound = await j.transfer(bob, toAlice.json.id, '7.00');
    assert.equal(inbound.final.status, 200, inbound.final.text);
    const before = await j.balance(alice.wallet);
    const confirm = await call(gw, 'POST', '/v1/transfers/confirm', {
      json: { transferId: inbound.final.json.id },
      headers: { ...j.bearer(bob, inbound.token), 'idempotency-key': `cf-${randomUUID()}` },
    });
    assert.equal(confirm.status, 200, confirm.text);
    assert.equal(await j.balance(alice.wallet), before + 7_000_000n, 'credits still arrive');

    const same = await as('fraud1')('POST', `/v1/fraud/holds/${place.json.id}:lift`, {
      json: { reason: 'cleared' },
    });
    assert.equal(same.status, 403, same.text);
    assert.equal(same.json.code, 'SECOND_OFFICER_REQUIRED');
    const lift = await as('fraud2')('POST', `/v1/fraud/holds/${place.json.id}:lift`, {
      json: { reason: 'cleared after call' },
    });
    assert.equal(lift.status, 200, lift.text);
    assert.equal(lift.json.active, false);
    const events = await tdb.db.query<{ event: string }>(
      `SELECT event FROM outbox WHERE aggregate = 'customer' AND aggregate_id = $1 ORDER BY created_at`,
      [alice.id],
    );
    assert.deepEqual(
      events.rows.map((e) => e.event),
      ['wallet.fraud_hold_placed', 'wallet.fraud_hold_lifted'],
    );
    const audits = await tdb.db.query<{
      action: string;
      actor: { id: string };
      decision: { purpose?: string; trace_id?: string };
    }>(
      `SELECT action, actor, decision FROM audit_log WHERE tenant_id = 'demo' AND action LIKE 'fraud_hold.%' ORDER BY id`,
    );
    assert.deepEqual(
      audits.rows.map((a) => a.action),
      ['fraud_hold.place', 'fraud_hold.lift'],
    );
    assert.notEqual(audits.rows[0]?.actor.id, audits.rows[1]?.actor.id);
    assert.equal(audits.rows[0]?.decision.purpose, 'fraud.review');
    assert.ok(audits.rows[0]?.decision.trace_id);
  });

  it('compliance reads KYC only with a stated reason, which the audit log records', async () => {
    const path = `/v1/compliance/customers/${alice.id}/kyc`;
    const none = await as('compliance')('GET', path);
    assert.equal(none.status, 400, none.text);
    assert.equal(none.json.code, 'ACCESS_REASON_REQUIRED');
    const ok = await as('compliance')('GET', path, {
      headers: { 'x-access-reason': 'periodic review case 4411' },
    });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.id_number, 'E2E20001');
    assert.equal(
      (await as('support')('GET', path, { headers: { 'x-access-reason': 'periodic review case 4411' } }))
        .status,
      403,
    );
    // The full record (kyc.review) is compliance's alone: an agent, who does KYC work at a desk
    // under the same purpose, is refused at the edge, and core checks the declared roles again.
    const agent = await as('kycagent')('GET', path, {
      headers: { 'x-access-reason': 'registration desk 12' },
    });
    assert.equal(agent.status, 403, agent.text);
    assert.equal(agent.json.code, 'POLICY_DENIED');
    const { rows } = await tdb.db.query<{ attrs: { reason: string } }>(
      `SELECT attrs FROM audit_log WHERE action = 'kyc.review' AND target->>'id' = $1 ORDER BY id`,
      [alice.id],
    );
    assert.deepEqual(
      rows.map((r) => r.attrs.reason),
      ['periodic review case 4411'],
    );
  });

  it('analytics answers aggregates only over at least 10 customers and refuses row requests', async () => {
    const small = await as('analyst')('GET', '/v1/analytics/aggregates?metric=transfers');
    assert.equal(small.status, 403, small.text);
    assert.equal(small.json.code, 'GROUP_TOO_SMALL');
    const raw = await as('analyst')(
      'GET',
      `/v1/analytics/aggregates?metric=transfers&customerId=${alice.id}`,
    );
    assert.equal(raw.json.code, 'RAW_ROWS_DENIED');
    assert.equal(
      (await as('support')('GET', '/v1/analytics/aggregates?metric=transfers')).status,
      403,
      'analyst role only',
    );
    // Ten more customers paying each other: the population reaches the floor.
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) {
      const { rows } = await tdb.db.query<{ id: string }>(
        `INSERT INTO customers (id, tenant_id, phone_e164) VALUES ($1, 'demo', $2) RETURNING id`,
        [randomUUID(), `+25471130${String(i).padStart(4, '0')}`],
      );
      ids.push(rows[0]?.id ?? '');
    }
    const sample = (await tdb.db.query('SELECT * FROM transfers WHERE status = $1 LIMIT 1', ['POSTED']))
      .rows[0] as Record<string, unknown>;
    for (let i = 0; i < 10; i++) {
      await tdb.db.query(
        `INSERT INTO transfers SELECT (jsonb_populate_record(NULL::transfers, $1::jsonb)).*`,
        [
          JSON.stringify({
            ...sample,
            id: randomUUID(),
            payer_customer_id: ids[i],
            payee_customer_id: ids[(i + 1) % 10],
            amount_hold_id: randomUUID(),
            intent_hash: `\\x${randomBytes(32).toString('hex')}`,
          }),
        ],
      );
    }
    const big = await as('analyst')('GET', '/v1/analytics/aggregates?metric=transfers&groupBy=currency');
    assert.equal(big.status, 200, big.text);
    assert.ok(big.json.groups.every((g: { customers: number }) => g.customers >= 10));
    assert.equal(big.json.groups[0].currency, 'KES');
  });

  it("marketing offers need the customer's recorded opt-in; a withdrawal is refused at the edge", async () => {
    const offers = () => call(gw, 'GET', '/v1/marketing/offers', { headers: j.bearer(bob) });
    // The edge learns of a consent change by notification: ask until it has (bounded), and never
    // see an offer served without a live consent (core checks it too).
    const settled = async (want: number) => {
      let r = await offers();
      for (let i = 0; i < 100 && r.status !== want; i++) {
        if (want === 403) assert.notEqual(r.status, 200, `served after the withdrawal: ${r.text}`);
        await new Promise((res) => setTimeout(res, 20));
        r = await offers();
      }
      return r;
    };
    const before = await offers();
    assert.equal(before.status, 403, before.text);
    assert.equal(before.json.code, 'POLICY_DENIED');
    const grant = await call(gw, 'PUT', '/v1/consents/marketing.personalize', {
      json: { termsVersion: '2026-11' },
      headers: j.bearer(bob),
    });
    assert.equal(grant.status, 200, grant.text);
    assert.equal(grant.json.terms_version, '2026-11');
    const served = await settled(200);
    assert.equal(served.status, 200, served.text);
    assert.equal(served.json.profile.phone, '+254*******02');
    const gone = await call(gw, 'DELETE', '/v1/consents/marketing.personalize', { headers: j.bearer(bob) });
    assert.equal(gone.status, 200, gone.text);
    assert.ok(gone.json.withdrawn_at);
    let after = await settled(403);
    for (let i = 0; i < 100 && after.json.code !== 'POLICY_DENIED'; i++) {
      await new Promise((res) => setTimeout(res, 20));
      after = await offers();
    }
    assert.equal(after.status, 403, after.text);
    assert.equal(
      after.json.code,
      'POLICY_DENIED',
      'refused by the edge (core answers CUSTOMER_CONSENT_REQUIRED)',
    );
    const list = await call(gw, 'GET', '/v1/consents', { headers: j.bearer(bob) });
    assert.equal(list.json.items.length, 1);
    assert.equal(
      (
        await call(gw, 'PUT', '/v1/consents/analytics.aggregate', {
          json: { termsVersion: '1' },
          headers: j.bearer(bob),
        })
      ).status,
      400,
    );
  });
});
