/** Every ledger route: happy path, its error codes, tenant isolation, and the issue's bad inputs. */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { call } from '../helpers/http.ts';
import { LedgerFixture, type Tenant } from './fixture.ts';
import { Ledger } from '../../core/ledger/service.ts';
import { createLogger } from '../../shared/log.ts';

describe('ledger routes', () => {
  let f: LedgerFixture;
  let t: Tenant;
  let other: Tenant;
  before(async () => {
    f = await LedgerFixture.start();
    t = await f.tenant(['KES', 'USD']);
    other = await f.tenant();
  });
  after(() => f.close());

  const post = (token: string, body: unknown, headers: Record<string, string> = {}) =>
    f.req(token, 'POST', '/v1/core/postings', body, headers);
  const legs = (from: string, to: string, amount: string) => [
    { account_id: from, side: 'debit', amount },
    { account_id: to, side: 'credit', amount },
  ];

  it('OAuth: form, JSON and Basic; wrong secret 401; bad grant 400; scope not granted 400', async () => {
    const { createClient } = await import('../../core/oauth/clients.ts');
    const c = await createClient(f.db, { tenantId: t.id, scopes: ['core:read'] });
    const json = await call(f.origin, 'POST', '/oauth2/token', {
      json: { grant_type: 'client_credentials', client_id: c.clientId, client_secret: c.clientSecret },
    });
    assert.equal(json.status, 200);
    assert.equal(json.json.token_type, 'Bearer');
    assert.equal(json.json.scope, 'core:read');
    assert.ok(json.json.expires_in >= 300 && json.json.expires_in <= 600);
    const basic = await call(f.origin, 'POST', '/oauth2/token', {
      body: 'grant_type=client_credentials',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        authorization: `Basic ${Buffer.from(`${c.clientId}:${c.clientSecret}`).toString('base64')}`,
      },
    });
    assert.equal(basic.status, 200);
    const wrong = await call(f.origin, 'POST', '/oauth2/token', {
      json: { grant_type: 'client_credentials', client_id: c.clientId, client_secret: 'nope' },
    });
    assert.equal(wrong.status, 401);
    assert.equal(wrong.json.code, 'INVALID_CLIENT');
    assert.equal(wrong.json.error, 'invalid_client');
    assert.ok(!wrong.text.includes(c.clientSecret));
    const grant = await call(f.origin, 'POST', '/oauth2/token', {
      json: { grant_type: 'password', client_id: c.clientId, client_secret: c.clientSecret },
    });
    assert.equal(grant.json.code, 'UNSUPPORTED_GRANT_TYPE');
    const scope = await call(f.origin, 'POST', '/oauth2/token', {
      json: {
        grant_type: 'client_credentials',
        client_id: c.clientId,
        client_secret: c.clientSecret,
        scope: 'core:write',
      },
    });
    assert.equal(scope.json.code, 'INVALID_SCOPE');
    const stored = await f.db.query<{ secret_hash: Buffer }>(
      'SELECT secret_hash FROM oauth_clients WHERE client_id = $1',
      [c.clientId],
    );
    assert.ok(!stored.rows[0]?.secret_hash.toString('utf8').includes(c.clientSecret), 'secret stored hashed');
  });

  it('bearer: missing/invalid 401, bare JWT accepted, core:read on a write 403', async () => {
    const a = await f.account(t);
    assert.equal((await call(f.origin, 'GET', `/v1/core/accounts/${a}`)).status, 401);
    assert.equal(
      (
        await call(f.origin, 'GET', `/v1/core/accounts/${a}`, {
          headers: { authorization: 'Bearer abc.def.ghi' },
        })
      ).status,
      401,
    );
    const bare = await call(f.origin, 'GET', `/v1/core/accounts/${a}`, {
      headers: { authorization: t.read },
    });
    assert.equal(bare.status, 200);
    const r = await f.req(t.read, 'POST', '/v1/core/accounts', {
      owner_type: 'customer',
      owner_id: 'x',
      product_code: 'WALLET_MAIN',
      currency: 'KES',
    });
    assert.equal(r.status, 403);
    assert.equal(r.json.code, 'INSUFFICIENT_SCOPE');
  });

  it('accounts: create 201 (SPEC 2.1 fields), get, balances; unknown product/currency 422; settlement not via API', async () => {
    const r = await f.req(
      t.write,
      'POST',
      '/v1/core/accounts',
      { owner_type: 'customer', owner_id: 'c-1', product_code: 'WALLET_MAIN', currency: 'KES' },
      { 'x-request-id': 'req-123' },
    );
    assert.equal(r.status, 201);
    assert.equal(r.headers['x-request-id'], 'req-123');
    for (const k of ['id', 'owner_type', 'owner_id', 'product_code', 'status', 'currency', 'created_at'])
      assert.ok(k in r.json, k);
    assert.equal(r.json.status, 'active');
    const g = await f.req(t.read, 'GET', `/v1/core/accounts/${r.json.id}`);
    assert.deepEqual(g.json, r.json);
    assert.deepEqual(await f.balances(t, r.json.id), {
      account_id: r.json.id,
      currency: 'KES',
      posted: '0.00',
      pending_debits: '0.00',
      pending_credits: '0.00',
      available: '0.00',
      overdraft_limit: '0.00',
    });
    const cur = await f.req(t.write, 'POST', '/v1/core/accounts', {
      owner_type: 'customer',
      owner_id: 'c',
      product_code: 'WALLET_MAIN',
      currency: 'XYZ',
    });
    assert.equal(cur.json.code, 'UNKNOWN_CURRENCY');
    const prod = await f.req(t.write, 'POST', '/v1/core/accounts', {
      owner_type: 'customer',
      owner_id: 'c',
      product_code: 'NOPE',
      currency: 'KES',
    });
    assert.equal(prod.json.code, 'UNKNOWN_PRODUCT');
    const settle = await f.req(t.write, 'POST', '/v1/core/accounts', {
      owner_type: 'customer',
      owner_id: 'c',
      product_code: 'SETTLEMENT',
      currency: 'KES',
    });
    assert.equal(settle.json.code, 'PRODUCT_NOT_ALLOWED');
    assert.equal(
      (await f.req(t.read, 'GET', '/v1/core/accounts/0190a0a0-0000-7000-8000-000000000000')).json.code,
      'ACCOUNT_NOT_FOUND',
    );
  });

  it('idempotency: replay byte for byte, different body 409, missing/malformed key 400, failed stays failed', async () => {
    const a = await f.account(t);
    const b = await f.account(t);
    await f.fund(t, a, '10.00');
    const key = 'replay-key-0001';
    const first = await f.transfer(t, a, b, '4.00', 'KES', key);
    const again = await f.transfer(t, a, b, '4.00', 'KES', key);
    assert.equal(first.status, 201);
    assert.equal(first.json.status, 'POSTED');
    assert.equal(again.status, 201);
    assert.equal(again.text, first.text);
    assert.equal(again.headers['idempotent-replayed'], 'true');
    assert.equal((await f.balances(t, a)).posted, '6.00');
    const conflict = await f.transfer(t, a, b, '5.00', 'KES', key);
    assert.equal(conflict.status, 409);
    assert.equal(conflict.json.code, 'IDEMPOTENCY_CONFLICT');
    const missing = await post(
      t.write,
      { currency: 'KES', entries: legs(a, b, '1.00') },
      { 'idempotency-key': '' },
    );
    assert.equal(missing.json.code, 'IDEMPOTENCY_KEY_REQUIRED');
    const bad = await post(
      t.write,
      { currency: 'KES', entries: legs(a, b, '1.00') },
      { 'idempotency-key': 'has spaces!' },
    );
    assert.equal(bad.json.code, 'IDEMPOTENCY_KEY_INVALID');
    const failKey = 'fail-key-00001';
    const fail = await f.transfer(t, a, b, '100.00', 'KES', failKey);
    assert.equal(fail.json.code, 'INSUFFICIENT_FUNDS');
    await f.fund(t, a, '1000.00');
    const still = await f.transfer(t, a, b, '100.00', 'KES', failKey);
    assert.equal(still.status, 422);
    assert.equal(still.text, fail.text);
    // Account creation is idempotent too.
    const body = { owner_type: 'customer', owner_id: 'idem', product_code: 'WALLET_MAIN', currency: 'KES' };
    const c1 = await f.req(t.write, 'POST', '/v1/core/accounts', body, {
      'idempotency-key': 'acct-key-0001',
    });
    const c2 = await f.req(t.write, 'POST', '/v1/core/accounts', body, {
      'idempotency-key': 'acct-key-0001',
    });
    assert.equal(c2.text, c1.text);
  });

  it('bad amounts: float, exponent, NaN, negative, zero, >6 decimals, > minor units', async () => {
    const a = await f.account(t);
    const b = await f.account(t);
    for (const amount of [
      '10.1234567',
      '1e3',
      'NaN',
      '-5.00',
      '0',
      '0.00',
      '10.123',
      ' 1.00',
      '1,000.00',
      '',
      '0x10',
      '100000000000000',
    ]) {
      const r = await post(t.write, { currency: 'KES', entries: legs(a, b, amount) });
      assert.equal(r.status, 422, `${amount}: ${r.text}`);
      assert.equal(r.json.code, 'INVALID_AMOUNT', amount);
    }
    const num = await post(t.write, {
      currency: 'KES',
      entries: [
        { account_id: a, side: 'debit', amount: 10.5 },
        { account_id: b, side: 'credit', amount: 10.5 },
      ],
    });
    assert.equal(num.status, 400, 'a JSON number is refused by the schema');
  });

  it('posting errors: unknown currency, mismatch, unbalanced, one leg, other tenant, unknown, closed account', async () => {
    const a = await f.account(t);
    const b = await f.account(t);
    const usd = await f.account(t, 'USD');
    await f.fund(t, a, '50.00');
    assert.equal(
      (await post(t.write, { currency: 'ABC', entries: legs(a, b, '1.00') })).json.code,
      'UNKNOWN_CURRENCY',
    );
    const mismatch = await post(t.write, { currency: 'KES', entries: legs(a, usd, '1.00') });
    assert.equal(mismatch.json.code, 'CURRENCY_MISMATCH');
    const unbalanced = await post(t.write, {
      currency: 'KES',
      entries: [
        { account_id: a, side: 'debit', amount: '2.00' },
        { account_id: b, side: 'credit', amount: '1.00' },
      ],
    });
    assert.equal(unbalanced.json.code, 'UNBALANCED_POSTING');
    assert.equal(unbalanced.status, 422);
    assert.equal(
      (await post(t.write, { currency: 'KES', entries: [{ account_id: a, side: 'debit', amount: '1.00' }] }))
        .json.code,
      'TOO_FEW_ENTRIES',
    );
    const foreign = await f.account(other);
    const cross = await post(t.write, { currency: 'KES', entries: legs(a, foreign, '1.00') });
    assert.equal(cross.status, 404);
    assert.equal(cross.json.code, 'ACCOUNT_NOT_FOUND');
    assert.equal((await f.req(t.read, 'GET', `/v1/core/accounts/${foreign}`)).status, 404);
    assert.equal((await f.req(t.read, 'GET', `/v1/core/accounts/${foreign}/balances`)).status, 404);
    assert.equal(
      (
        await post(t.write, {
          currency: 'KES',
          entries: legs(a, '0190a0a0-0000-7000-8000-000000000001', '1.00'),
        })
      ).json.code,
      'ACCOUNT_NOT_FOUND',
    );
    const closing = await f.account(t);
    const closed = await f.req(t.write, 'POST', `/v1/core/accounts/${closing}/close`);
    assert.equal(closed.status, 200, closed.text);
    assert.equal(closed.json.status, 'closed');
    assert.equal(
      (await post(t.write, { currency: 'KES', entries: legs(a, closing, '1.00') })).json.code,
      'ACCOUNT_CLOSED',
    );
    assert.equal(
      (await f.req(t.write, 'POST', `/v1/core/accounts/${a}/close`)).json.code,
      'ACCOUNT_NOT_EMPTY',
    );
    assert.equal((await f.transfer(t, a, b, '50.01')).json.code, 'INSUFFICIENT_FUNDS');
    const unknownType = await post(t.write, {
      currency: 'KES',
      transaction_type: 'NOPE',
      entries: legs(a, b, '1.00'),
    });
    assert.equal(unknownType.json.code, 'UNKNOWN_TRANSACTION_TYPE');
  });

  // INVARIANTS.md "Result codes, in the order they are checked": each request fails two checks and gets the earlier one's code.
  it('result codes come in the documented order when a request fails several checks', async () => {
    const [a, b, usd, closing] = [
      await f.account(t),
      await f.account(t),
      await f.account(t, 'USD'),
      await f.account(t),
    ];
    await f.fund(t, a, '5.00');
    assert.equal((await f.req(t.write, 'POST', `/v1/core/accounts/${closing}/close`)).status, 200);
    const code = async (token: string, body: unknown, headers: Record<string, string> = {}) =>
      (await post(token, body, headers)).json.code as string;
    const noAuth = await call(f.origin, 'POST', '/v1/core/postings', { json: { currency: 'KES' } });
    assert.equal(
      noAuth.json.code,
      'VALIDATION_FAILED',
      '3 (body schema) is checked by core before 1 (the edge has already authenticated)',
    );
    assert.equal(
      (
        await call(f.origin, 'POST', '/v1/core/postings', {
          json: { currency: 'KES', entries: legs(a, b, '1.00') },
        })
      ).json.code,
      'UNAUTHENTICATED',
    );
    assert.equal(
      await code(t.read, { currency: 'KES', entries: legs(a, b, '1.00') }, { 'idempotency-key': '' }),
      'INSUFFICIENT_SCOPE',
    );
    assert.equal(
      await code(t.write, { currency: 'XYZ', entries: legs(a, b, '1.00') }, { 'idempotency-key': '' }),
      'IDEMPOTENCY_KEY_REQUIRED',
    );
    assert.equal(await code(t.write, { currency: 'XYZ', entries: legs(a, b, '1.001') }), 'UNKNOWN_CURRENCY');
    assert.equal(
      await code(t.write, { currency: 'KES', entries: [{ account_id: a, side: 'debit', amount: '1.001' }] }),
      'INVALID_AMOUNT',
    );
    assert.equal(
      await code(t.write, { currency: 'KES', entries: [{ account_id: a, side: 'debit', amount: '1.00' }] }),
      'TOO_FEW_ENTRIES',
    );
    await f.transfer(t, a, b, '1.00', 'KES', 'order-key-00001');
    assert.equal(
      await code(
        t.write,
        { currency: 'KES', transaction_type: 'NOPE', entries: legs(a, b, '1.00') },
        { 'idempotency-key': 'order-key-00001' },
      ),
      'IDEMPOTENCY_CONFLICT',
    );
    const unknown = '0190a0a0-0000-7000-8000-00000000abcd';
    assert.equal(
      await code(t.write, { currency: 'KES', transaction_type: 'NOPE', entries: legs(unknown, b, '1.00') }),
      'UNKNOWN_TRANSACTION_TYPE',
    );
    assert.equal(
      await code(t.write, {
        currency: 'KES',
        entries: [...legs(closing, b, '1.00'), ...legs(a, unknown, '1.00')],
      }),
      'ACCOUNT_NOT_FOUND',
    );
    assert.equal(
      await code(t.write, {
        currency: 'KES',
        entries: [...legs(usd, b, '1.00'), ...legs(a, closing, '1.00')],
      }),
      'ACCOUNT_CLOSED',
    );
    assert.equal(
      await code(t.write, { currency: 'KES', entries: [...legs(b, usd, '1.00'), ...legs(a, b, '9.00')] }),
      'CURRENCY_MISMATCH',
    );
    // A fraud hold (migration 0860) is checked before 8: the command answers ACCOUNT_FROZEN whatever else is wrong with it.
    await f.db.query(
      `INSERT INTO wallet_fraud_holds (tenant_id, id, account_id, reason, placed_by, placed_at) VALUES ($1, gen_random_uuid(), $2, 'order test', 'staff:fraud-1', now())`,
      [t.id, a],
    );
    const frozen = await post(
      t.write,
      { currency: 'KES', transaction_type: 'NOPE', entries: legs(a, b, '100.00') },
      { 'idempotency-key': 'order-frozen-01' },
    );
    assert.equal(frozen.json.code, 'ACCOUNT_FROZEN');
    await f.db.query(
      `UPDATE wallet_fraud_holds SET lifted_by = 'staff:fraud-2', lifted_at = now() WHERE tenant_id = $1 AND account_id = $2`,
      [t.id, a],
    );
    const replayed = await post(
      t.write,
      { currency: 'KES', transaction_type: 'NOPE', entries: legs(a, b, '100.00') },
      { 'idempotency-key': 'order-frozen-01' },
    );
    assert.equal(
      replayed.text,
      frozen.text,
      'the refusal is stored under the key and replayed after the hold is lifted',
    );
    assert.equal(
      await code(t.write, { currency: 'KES', entries: legs(a, b, '100.00') }),
      'INSUFFICIENT_FUNDS',
    );
  });

  it('multi-leg and multi-currency postings; GET posting; outbox and audit in the same transaction', async () => {
    const a = await f.account(t);
    const b = await f.account(t);
    const fee = await f.account(t, 'KES', 'FEE_INCOME');
    const ua = await f.account(t, 'USD');
    await f.fund(t, a, '100.00');
    await f.fund(t, ua, '10.00', 'USD');
    const r = await post(t.write, {
      currency: 'KES',
      description: 'pay with fee',
      metadata: { ref: 'x' },
      entries: [
        { account_id: a, side: 'debit', amount: '10.50' },
        { account_id: b, side: 'credit', amount: '10.00' },
        { account_id: fee, side: 'credit', amount: '0.50' },
        { account_id: ua, side: 'debit', amount: '1.00', currency: 'USD' },
        { account_id: t.settlement.USD as string, side: 'credit', amount: '1.00', currency: 'USD' },
      ],
    });
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.entries.length, 5);
    const g = await f.req(t.read, 'GET', `/v1/core/postings/${r.json.id}`);
    assert.deepEqual(g.json, r.json);
    assert.equal((await f.balances(t, fee)).posted, '0.50');
    assert.equal((await f.balances(t, ua)).posted, '9.00');
    const ev = await f.db.query(
      'SELECT 1 FROM outbox WHERE tenant_id = $1 AND aggregate_id = $2 AND event = $3',
      [t.id, r.json.id, 'posting.created'],
    );
    assert.equal(ev.rowCount, 1);
    const au = await f.db.query(
      `SELECT 1 FROM audit_log WHERE tenant_id = $1 AND action = 'posting.create' AND target->>'id' = $2`,
      [t.id, r.json.id],
    );
    assert.equal(au.rowCount, 1);
    assert.equal((await f.req(other.read, 'GET', `/v1/core/postings/${r.json.id}`)).status, 404);
  });

  it('reversal: inverse entries, at most once, not of a reversal, not into negative', async () => {
    const a = await f.account(t);
    const b = await f.account(t);
    await f.fund(t, a, '20.00');
    const p = await f.transfer(t, a, b, '5.00');
    const r = await f.req(t.write, 'POST', `/v1/core/postings/${p.json.id}/reverse`);
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.reverses_posting_id, p.json.id);
    assert.deepEqual(
      r.json.entries.map((e: { side: string }) => e.side),
      ['credit', 'debit'],
    );
    assert.equal((await f.balances(t, a)).posted, '20.00');
    const twice = await f.req(t.write, 'POST', `/v1/core/postings/${p.json.id}/reverse`);
    assert.equal(twice.status, 409);
    assert.equal(twice.json.code, 'POSTING_ALREADY_REVERSED');
    assert.equal(
      (await f.req(t.write, 'POST', `/v1/core/postings/${r.json.id}/reverse`)).json.code,
      'POSTING_NOT_REVERSIBLE',
    );
    assert.equal(
      (await f.req(other.write, 'POST', `/v1/core/postings/${p.json.id}/reverse`)).json.code,
      'POSTING_NOT_FOUND',
    );
    const p2 = await f.transfer(t, a, b, '5.00');
    await f.transfer(t, b, a, '5.00');
    await f.transfer(t, b, a, '5.00').then((x) => assert.equal(x.status, 422));
    const spentB = await f.transfer(t, b, a, '0.01');
    assert.equal(spentB.status, 422);
    const rev = await f.req(t.write, 'POST', `/v1/core/postings/${p2.json.id}/reverse`);
    assert.equal(rev.json.code, 'INSUFFICIENT_FUNDS', 'b already spent what the reversal would take back');
  });

  it('holds: create, partial capture, void, capture voided 409, over-capture 422, expiry', async () => {
    const a = await f.account(t);
    const m = await f.account(t, 'KES', 'MERCHANT');
    await f.fund(t, a, '100.00');
    const h = await f.req(t.write, 'POST', '/v1/core/holds', {
      debit_account_id: a,
      credit_account_id: m,
      currency: 'KES',
      amount: '30.00',
    });
    assert.equal(h.status, 201, h.text);
    assert.equal(h.json.status, 'pending');
    assert.deepEqual(await f.balances(t, a), {
      account_id: a,
      currency: 'KES',
      posted: '100.00',
      pending_debits: '30.00',
      pending_credits: '0.00',
      available: '70.00',
      overdraft_limit: '0.00',
    });
    assert.equal((await f.balances(t, m)).pending_credits, '30.00');
    assert.equal(
      (await f.transfer(t, a, m, '70.01')).json.code,
      'INSUFFICIENT_FUNDS',
      'held money is not available',
    );
    const over = await f.req(t.write, 'POST', `/v1/core/holds/${h.json.id}/capture`, { amount: '30.01' });
    assert.equal(over.json.code, 'CAPTURE_EXCEEDS_HOLD');
    const cap = await f.req(t.write, 'POST', `/v1/core/holds/${h.json.id}/capture`, { amount: '20.00' });
    assert.equal(cap.status, 200, cap.text);
    assert.equal(cap.json.status, 'captured');
    assert.equal(cap.json.captured_amount, '20.00');
    assert.deepEqual(await f.balances(t, a), {
      account_id: a,
      currency: 'KES',
      posted: '80.00',
      pending_debits: '0.00',
      pending_credits: '0.00',
      available: '80.00',
      overdraft_limit: '0.00',
    });
    assert.equal((await f.balances(t, m)).posted, '20.00');
    assert.equal(
      (await f.req(t.write, 'POST', `/v1/core/holds/${h.json.id}/capture`)).json.code,
      'HOLD_NOT_PENDING',
    );
    const h2 = await f.req(t.write, 'POST', '/v1/core/holds', {
      debit_account_id: a,
      credit_account_id: m,
      currency: 'KES',
      amount: '10.00',
    });
    const v = await f.req(t.write, 'POST', `/v1/core/holds/${h2.json.id}/void`);
    assert.equal(v.json.status, 'voided');
    const capVoided = await f.req(t.write, 'POST', `/v1/core/holds/${h2.json.id}/capture`);
    assert.equal(capVoided.status, 409);
    assert.equal(capVoided.json.code, 'HOLD_NOT_PENDING');
    assert.equal(
      (
        await f.req(t.write, 'POST', '/v1/core/holds', {
          debit_account_id: a,
          credit_account_id: m,
          currency: 'KES',
          amount: '81.00',
        })
      ).json.code,
      'INSUFFICIENT_FUNDS',
    );
    assert.equal(
      (
        await f.req(t.write, 'POST', '/v1/core/holds', {
          debit_account_id: a,
          credit_account_id: a,
          currency: 'KES',
          amount: '1.00',
        })
      ).json.code,
      'SAME_ACCOUNT',
    );
    assert.equal(
      (await f.req(other.write, 'POST', `/v1/core/holds/${h2.json.id}/void`)).json.code,
      'HOLD_NOT_FOUND',
    );
    const h3 = await f.req(t.write, 'POST', '/v1/core/holds', {
      debit_account_id: a,
      credit_account_id: m,
      currency: 'KES',
      amount: '5.00',
      expires_in_s: 60,
    });
    assert.equal((await f.balances(t, a)).pending_debits, '5.00');
    // The sweeper of another instance whose clock reads 61 s later (the same code every core runs).
    const later = new Ledger({ db: f.db, log: createLogger('silent'), now: () => Date.now() + 61_000 });
    assert.equal((await f.req(t.read, 'GET', `/v1/core/holds/${h3.json.id}`)).json.status, 'pending');
    assert.ok((await later.sweepExpiredHolds()) >= 1);
    const g = await f.req(t.read, 'GET', `/v1/core/holds/${h3.json.id}`);
    assert.equal(g.json.status, 'expired', 'the sweeper expired it');
    assert.equal((await f.balances(t, a)).pending_debits, '0.00');
    const tx = await f.db.query<{ status: string }>(
      'SELECT status FROM ledger_transactions WHERE tenant_id = $1 AND id = $2',
      [t.id, g.json.transaction_id],
    );
    assert.equal(tx.rows[0]?.status, 'FAILED');
  });

  it('overdraft line: lets the account go below zero up to the line; closing in use 422', async () => {
    const a = await f.account(t);
    const b = await f.account(t);
    const line = await f.req(t.write, 'POST', '/v1/core/overdraft-lines', { account_id: a, limit: '50.00' });
    assert.equal(line.status, 201, line.text);
    assert.equal((await f.balances(t, a)).available, '50.00');
    assert.equal((await f.transfer(t, a, b, '40.00')).status, 201);
    assert.equal((await f.balances(t, a)).posted, '-40.00');
    assert.equal((await f.transfer(t, a, b, '10.01')).json.code, 'INSUFFICIENT_FUNDS');
    assert.equal(
      (await f.req(t.write, 'POST', '/v1/core/overdraft-lines', { account_id: a, limit: '10.00' })).json.code,
      'OVERDRAFT_LINE_EXISTS',
    );
    assert.equal(
      (await f.req(t.write, 'POST', `/v1/core/overdraft-lines/${line.json.id}/close`)).json.code,
      'OVERDRAFT_IN_USE',
    );
    await f.transfer(t, b, a, '40.00');
    const closed = await f.req(t.write, 'POST', `/v1/core/overdraft-lines/${line.json.id}/close`);
    assert.equal(closed.json.status, 'closed');
    assert.equal((await f.balances(t, a)).available, '0.00');
    assert.equal((await f.req(other.read, 'GET', `/v1/core/overdraft-lines/${line.json.id}`)).status, 404);
  });

  it('savings products: create, duplicate 409, list per tenant', async () => {
    const r = await f.req(t.write, 'POST', '/v1/core/savings-products', {
      code: 'SAVE_90',
      name: '90-day saver',
      currency: 'KES',
      interest_rate_bps: 650,
      min_balance: '100.00',
    });
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.min_balance, '100.00');
    assert.equal(
      (
        await f.req(t.write, 'POST', '/v1/core/savings-products', {
          code: 'SAVE_90',
          name: 'x',
          currency: 'KES',
          interest_rate_bps: 1,
        })
      ).json.code,
      'SAVINGS_PRODUCT_EXISTS',
    );
    assert.equal((await f.req(t.read, 'GET', '/v1/core/savings-products')).json.items.length, 1);
    assert.equal((await f.req(other.read, 'GET', '/v1/core/savings-products')).json.items.length, 0);
  });

  it('limits: per transaction and per day from the schedule; no schedule fails closed', async () => {
    const a = await f.account(t);
    const b = await f.account(t);
    await f.fund(t, a, '600000.00');
    const ok = await f.req(t.read, 'POST', '/v1/core/limits/check', {
      account_id: a,
      action: 'TRANSFER',
      amount: '1000.00',
    });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.allowed, true);
    assert.deepEqual(
      ok.json.checks.map((c: { period: string }) => c.period),
      ['transaction', 'day', 'month'],
    );
    const big = await f.req(t.read, 'POST', '/v1/core/limits/check', {
      account_id: a,
      action: 'TRANSFER',
      amount: '250000.01',
    });
    assert.equal(big.json.allowed, false);
    assert.equal(big.json.reason, 'LIMIT_EXCEEDED');
    await f.transfer(t, a, b, '250000.00');
    await f.transfer(t, a, b, '200000.00');
    const day = await f.req(t.read, 'POST', '/v1/core/limits/check', {
      account_id: a,
      action: 'TRANSFER',
      amount: '60000.00',
    });
    assert.equal(day.json.allowed, false);
    assert.equal(day.json.checks[1].used_amount, '450000.00');
    const none = await f.req(t.read, 'POST', '/v1/core/limits/check', {
      account_id: a,
      action: 'FEE',
      amount: '1.00',
    });
    assert.equal(none.json.allowed, false);
    assert.equal(none.json.reason, 'NO_LIMIT_SCHEDULE');
    assert.equal(
      (
        await f.req(other.read, 'POST', '/v1/core/limits/check', {
          account_id: a,
          action: 'TRANSFER',
          amount: '1.00',
        })
      ).status,
      404,
    );
  });

  it('statements: opening, running balance, closing; CSV on Accept; bad period 422', async () => {
    const a = await f.account(t);
    const b = await f.account(t);
    await f.fund(t, a, '10.00');
    const from = new Date(Date.now() + 5).toISOString();
    await new Promise((r) => setTimeout(r, 20));
    await f.transfer(t, a, b, '3.00');
    await f.transfer(t, b, a, '1.25');
    const to = new Date(Date.now() + 1000).toISOString();
    const s = await f.req(t.read, 'POST', '/v1/core/statements', { account_id: a, from, to });
    assert.equal(s.status, 200, s.text);
    assert.equal(s.json.opening_balance, '10.00');
    assert.deepEqual(
      s.json.entries.map((e: { balance: string }) => e.balance),
      ['7.00', '8.25'],
    );
    assert.equal(s.json.closing_balance, '8.25');
    const csv = await f.req(
      t.read,
      'POST',
      '/v1/core/statements',
      { account_id: a, from, to },
      { accept: 'text/csv' },
    );
    assert.match(csv.headers['content-type'] ?? '', /^text\/csv/);
    const lines = csv.text.trim().split('\r\n');
    assert.equal(lines.length, 5);
    assert.match(lines[4] ?? '', /,8\.25$/);
    assert.equal(
      (await f.req(t.read, 'POST', '/v1/core/statements', { account_id: a, from: to, to: from })).json.code,
      'INVALID_PERIOD',
    );
    assert.equal(
      (await f.req(other.read, 'POST', '/v1/core/statements', { account_id: a, from, to })).status,
      404,
    );
  });

  it('database refuses edits of entries and direct balance updates', async () => {
    await assert.rejects(f.db.query('UPDATE ledger_entries SET amount = amount + 1'), /append-only/);
    await assert.rejects(f.db.query('DELETE FROM ledger_postings'), /append-only/);
    await assert.rejects(
      f.db.query('UPDATE ledger_balances SET credits_posted = credits_posted + 1'),
      /change only through/,
    );
  });

  // INVARIANTS.md G2, G6 and G7 as the database enforces them, had a check in the ledger been skipped.
  it('database refuses a second reversal, a hold re-opened, resized or over-captured, a deleted hold and truncated entries', async () => {
    const [a, b] = [await f.account(t), await f.account(t)];
    await f.fund(t, a, '10.00');
    const h = await f.req(t.write, 'POST', '/v1/core/holds', {
      debit_account_id: a,
      credit_account_id: b,
      currency: 'KES',
      amount: '3.00',
    });
    assert.equal(h.status, 201, h.text);
    const p = await f.transfer(t, a, b, '2.00');
    const r = await f.req(t.write, 'POST', `/v1/core/postings/${p.json.id}/reverse`);
    await assert.rejects(
      f.db.query(
        `INSERT INTO ledger_postings (tenant_id, id, transaction_id, type_code, kind, currency, entry_count, reverses_posting_id)
       VALUES ($1, gen_random_uuid(), $2, 'REVERSAL', 'reversal', 'KES', 2, $3)`,
        [t.id, r.json.transaction_id, p.json.id],
      ),
      /ledger_postings_reverses_idx/,
    );
    await assert.rejects(
      f.db.query('UPDATE ledger_holds SET amount = 1 WHERE tenant_id = $1 AND id = $2', [t.id, h.json.id]),
      /may only leave pending once/,
    );
    await assert.rejects(
      f.db.query(
        `UPDATE ledger_holds SET status = 'captured', captured_amount = 3.5 WHERE tenant_id = $1 AND id = $2`,
        [t.id, h.json.id],
      ),
      /check constraint/,
    );
    assert.equal((await f.req(t.write, 'POST', `/v1/core/holds/${h.json.id}/void`)).status, 200);
    await assert.rejects(
      f.db.query(`UPDATE ledger_holds SET status = 'pending' WHERE tenant_id = $1 AND id = $2`, [
        t.id,
        h.json.id,
      ]),
      /may only leave pending once/,
    );
    await assert.rejects(
      f.db.query('DELETE FROM ledger_holds WHERE tenant_id = $1 AND id = $2', [t.id, h.json.id]),
      /append-only/,
    );
    await assert.rejects(f.db.query('TRUNCATE ledger_entries'), /append-only/);
    assert.deepEqual(await f.balances(t, a), {
      account_id: a,
      currency: 'KES',
      posted: '10.00',
      pending_debits: '0.00',
      pending_credits: '0.00',
      available: '10.00',
      overdraft_limit: '0.00',
    });
  });
});
