import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { signRequest } from '../../shared/api-key-signing.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, type Res } from '../helpers/http.ts';

/**
 * Issue 13 item 5 through the gateway with real API keys: every route that moves money counts
 * its amount against the key's daily budget. The edge counts what the request names (postings,
 * holds); the ledger counts reversals and captures, which name only an id, in the transaction
 * that moves the money; both count in one row per key, day and currency.
 */
describe('API-key amount budgets count every movement (through the gateway)', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let settlement = '';
  let adminToken = '';
  let coreToken = '';
  let payer = '';
  let payee = '';

  interface Key {
    id: string;
    secret: string;
  }

  async function newKey(daily: string): Promise<Key> {
    const r = await call(gw, 'POST', '/api-keys', {
      json: {
        name: `budget-${daily}`,
        scopes: ['core:write'],
        budget: { daily_amount: daily, currency: 'KES' },
      },
      headers: { authorization: `Bearer ${adminToken}`, 'x-request-id': randomUUID() },
    });
    assert.equal(r.status, 201, r.text);
    return { id: r.json.id, secret: r.json.secret };
  }

  /** A request signed with the key (SPEC 5.4); `key` repeats an Idempotency-Key. */
  function signed(k: Key, path: string, json: unknown, idem = `k-${randomUUID()}`): Promise<Res> {
    const body = JSON.stringify(json);
    return call(gw, 'POST', path, {
      body,
      headers: {
        'content-type': 'application/json',
        'idempotency-key': idem,
        'x-request-id': randomUUID(),
        ...signRequest({ method: 'POST', path, body, keyId: k.id, secret: k.secret }),
      },
    });
  }

  /** A core client (no budget) writes: the fixtures the key then acts on. */
  async function asClient(path: string, json: unknown): Promise<Res> {
    const r = await call(gw, 'POST', path, {
      json,
      headers: {
        authorization: `Bearer ${coreToken}`,
        'idempotency-key': `c-${randomUUID()}`,
        'x-request-id': randomUUID(),
      },
    });
    assert.ok(r.status === 200 || r.status === 201, r.text);
    return r;
  }

  const legs = (from: string, to: string, amount: string) => ({
    currency: 'KES',
    entries: [
      { account_id: from, side: 'debit', amount },
      { account_id: to, side: 'credit', amount },
    ],
  });
  const posting = async (amount: string): Promise<string> =>
    (await asClient('/v1/core/postings', legs(payer, payee, amount))).json.id;
  const hold = async (amount: string): Promise<string> =>
    (
      await asClient('/v1/core/holds', {
        debit_account_id: payer,
        credit_account_id: payee,
        currency: 'KES',
        amount,
      })
    ).json.id;

  const open = async (owner: string): Promise<string> =>
    (
      await asClient('/v1/core/accounts', {
        owner_type: 'customer',
        owner_id: owner,
        product_code: 'WALLET_MAIN',
        currency: 'KES',
      })
    ).json.id;

  async function used(k: Key): Promise<string> {
    const { rows } = await tdb.db.query<{ amount: string }>(
      `SELECT coalesce(sum(amount_micros), 0)::text AS amount FROM api_key_usage WHERE key_id = $1 AND window_kind = 'day'`,
      [k.id],
    );
    return rows[0]?.amount ?? '0';
  }

  async function holdStatus(id: string): Promise<string> {
    const { rows } = await tdb.db.query<{ status: string }>(
      `SELECT status FROM ledger_holds WHERE tenant_id = 'demo' AND id = $1`,
      [id],
    );
    return rows[0]?.status ?? 'missing';
  }

  async function reversed(id: string): Promise<boolean> {
    const { rows } = await tdb.db.query(
      `SELECT 1 FROM ledger_postings WHERE tenant_id = 'demo' AND reverses_posting_id = $1`,
      [id],
    );
    return rows.length > 0;
  }

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-budgets-'));
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
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8'));
    adminToken = demo.serviceTokens.admin.token;
    settlement = demo.settlementAccounts.KES;
    const t = await call(gw, 'POST', '/oauth2/token', {
      json: {
        grant_type: 'client_credentials',
        client_id: demo.coreClient.clientId,
        client_secret: demo.coreClient.clientSecret,
        scope: 'core:write',
      },
    });
    assert.equal(t.status, 200, t.text);
    coreToken = t.json.access_token;
    payer = await open('budget-payer');
    payee = await open('budget-payee');
    await asClient('/v1/core/postings', legs(settlement, payer, '100000.00'));
  });
  after(async () => {
    await stack?.stop();
    await tdb?.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('refuses a 1000.00 reversal and a 1000.00 capture past a 10.00 budget, moving nothing', async () => {
    const k = await newKey('10.00');
    const p = await posting('1000.00');
    const rev = await signed(k, `/v1/core/postings/${p}/reverse`, {});
    assert.equal(rev.status, 429, rev.text);
    assert.equal(rev.json.code, 'BUDGET_EXCEEDED');
    assert.equal(await reversed(p), false, 'the reversal rolled back');
    const h = await hold('1000.00');
    const cap = await signed(k, `/v1/core/holds/${h}/capture`, {});
    assert.equal(cap.status, 429, cap.text);
    assert.equal(cap.json.code, 'BUDGET_EXCEEDED');
    assert.equal(await holdStatus(h), 'pending', 'the capture rolled back');
    // A partial capture within the budget still counts what it moves.
    const part = await signed(k, `/v1/core/holds/${h}/capture`, { amount: '10.01' });
    assert.equal(part.json.code, 'BUDGET_EXCEEDED', part.text);
    assert.equal(await used(k), '0', 'refusals consume nothing');
  });

  it('a key whose stored daily budget is no amount moves no money, at the edge or in the ledger', async () => {
    const h = await hold('1.00');
    // A daily_amount that is no amount, and budgets that are no object (encoded twice, wrapped, null).
    const shapes = [
      ...['10', '"abc"', '"NaN"'].map((v) => `jsonb_set(budget, '{daily_amount}', '${v}')`),
      'to_jsonb(budget::text)',
      'jsonb_build_array(budget)',
      `'null'::jsonb`,
    ];
    for (const legacy of shapes) {
      const k = await newKey('10.00');
      // Written before the guards refused such budgets (an operator's SQL); the edge reads the key
      // again at the NOTIFY its change sends.
      await tdb.db.tx(async (q) => {
        await q.query('ALTER TABLE api_keys DISABLE TRIGGER USER');
        await q.query(`UPDATE api_keys SET budget = ${legacy} WHERE id = $1`, [k.id]);
        await q.query('ALTER TABLE api_keys ENABLE TRIGGER USER');
        await q.query('SELECT pg_notify($1, $2)', ['api_keys_changed', k.id]);
      });
      const post = await signed(k, '/v1/core/postings', legs(payer, payee, '5.00'));
      assert.equal(post.status, 403, `${legacy}: ${post.text}`);
      assert.equal(post.json.code, 'POLICY_DENIED');
      assert.match(post.json.message, /budget_unreadable/);
      const cap = await signed(k, `/v1/core/holds/${h}/capture`, {});
      assert.equal(cap.status, 403, `${legacy}: ${cap.text}`);
      assert.match(cap.json.message, /budget_unreadable/);
      assert.equal(await holdStatus(h), 'pending', 'the capture moved nothing');
    }
  });

  it('a daily budget is at most 9e12: counted at the edge and in the ledger up to it, refused past it', async () => {
    const past = await call(gw, 'POST', '/api-keys', {
      json: {
        name: 'budget-past',
        scopes: ['core:write'],
        budget: { daily_amount: '9000000000000.01', currency: 'KES' },
      },
      headers: { authorization: `Bearer ${adminToken}`, 'x-request-id': randomUUID() },
    });
    assert.equal(past.status, 422, past.text);
    assert.equal(past.json.code, 'INVALID_AMOUNT');
    const k = await newKey('9000000000000.00');
    const post = await signed(k, '/v1/core/postings', legs(payer, payee, '5.00'));
    assert.equal(post.status, 201, post.text);
    const cap = await signed(k, `/v1/core/holds/${await hold('3.00')}/capture`, {});
    assert.equal(cap.status, 200, cap.text);
    assert.equal(await used(k), '8000000');
    // An operator's SQL is held to the same bound (migration 1118); a row stored before it (the
    // guard set aside) moves no money, answered 403 rather than 503 at the edge.
    await assert.rejects(
      tdb.db.query(
        `UPDATE api_keys SET budget = jsonb_set(budget, '{daily_amount}', '"99999999999999.99"') WHERE id = $1`,
        [k.id],
      ),
      (e: { code?: string }) => e.code === 'CU001',
    );
    await tdb.db.tx(async (q) => {
      await q.query('ALTER TABLE api_keys DISABLE TRIGGER api_key_budget_bound_guard');
      await q.query(
        `UPDATE api_keys SET budget = jsonb_set(budget, '{daily_amount}', '"99999999999999.99"') WHERE id = $1`,
        [k.id],
      );
      await q.query('ALTER TABLE api_keys ENABLE TRIGGER api_key_budget_bound_guard');
      await q.query('SELECT pg_notify($1, $2)', ['api_keys_changed', k.id]);
    });
    const h = await hold('1.00');
    for (const [path, body] of [
      ['/v1/core/postings', legs(payer, payee, '5.00')],
      [`/v1/core/holds/${h}/capture`, {}],
    ] as const) {
      const r = await signed(k, path, body);
      assert.equal(r.status, 403, `${path}: ${r.text}`);
      assert.match(r.json.message, /budget_unreadable/);
    }
    assert.equal(await holdStatus(h), 'pending', 'the capture moved nothing');
    assert.equal(await used(k), '8000000');
  });

  it('counts reversals and captures within the budget, in the same record as the edge counts postings', async () => {
    const k = await newKey('10.00');
    const rev = await signed(k, `/v1/core/postings/${await posting('4.00')}/reverse`, {});
    assert.equal(rev.status, 201, rev.text);
    assert.equal(await used(k), '4000000');
    const cap = await signed(k, `/v1/core/holds/${await hold('3.00')}/capture`, {});
    assert.equal(cap.status, 200, cap.text);
    assert.equal(cap.json.status, 'captured');
    assert.equal(await used(k), '7000000');
    // The edge counts a posting the key makes (its legs name the amount) in the same row...
    const post = await signed(k, '/v1/core/postings', legs(payer, payee, '2.00'));
    assert.equal(post.status, 201, post.text);
    assert.equal(await used(k), '9000000');
    // ...so a capture that would fit a budget of its own is refused with the posting counted.
    const h = await hold('2.00');
    const over = await signed(k, `/v1/core/holds/${h}/capture`, {});
    assert.equal(over.json.code, 'BUDGET_EXCEEDED', over.text);
    assert.equal(await holdStatus(h), 'pending');
    const { rows } = await tdb.db.query(
      `SELECT currency FROM api_key_usage WHERE key_id = $1 AND window_kind = 'day'`,
      [k.id],
    );
    assert.deepEqual(rows, [{ currency: 'KES' }], 'one row per key, day and currency');
  });

  it('a failed movement and a replayed one consume nothing', async () => {
    const k = await newKey('10.00');
    const p = await posting('1.00');
    const first = await signed(k, `/v1/core/postings/${p}/reverse`, {}, 'rev-once-0001');
    assert.equal(first.status, 201, first.text);
    const replay = await signed(k, `/v1/core/postings/${p}/reverse`, {}, 'rev-once-0001');
    assert.equal(replay.status, 201);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    const again = await signed(k, `/v1/core/postings/${p}/reverse`, {});
    assert.equal(again.json.code, 'POSTING_ALREADY_REVERSED', again.text);
    assert.equal(await used(k), '1000000', 'counted once');
    // Edge-counted: a posting the ledger refuses, and a replay of one it made, are given back.
    const refused = await signed(k, '/v1/core/postings', legs(await open('budget-empty'), payer, '9.00'));
    assert.equal(refused.json.code, 'INSUFFICIENT_FUNDS', refused.text);
    assert.equal(await used(k), '1000000');
    const made = await signed(k, '/v1/core/postings', legs(payer, payee, '2.00'), 'post-once-0001');
    assert.equal(made.status, 201, made.text);
    const replayed = await signed(k, '/v1/core/postings', legs(payer, payee, '2.00'), 'post-once-0001');
    assert.equal(replayed.headers['idempotent-replayed'], 'true', replayed.text);
    assert.equal(await used(k), '3000000');
  });

  it('a hold the key created is counted once, when created, not again when it captures it', async () => {
    const k = await newKey('10.00');
    const made = await signed(k, '/v1/core/holds', {
      debit_account_id: payer,
      credit_account_id: payee,
      currency: 'KES',
      amount: '6.00',
    });
    assert.equal(made.status, 201, made.text);
    assert.equal(await used(k), '6000000');
    const cap = await signed(k, `/v1/core/holds/${made.json.id}/capture`, {});
    assert.equal(cap.status, 200, cap.text);
    assert.equal(await used(k), '6000000');
    const over = await signed(k, '/v1/core/holds', {
      debit_account_id: payer,
      credit_account_id: payee,
      currency: 'KES',
      amount: '5.00',
    });
    assert.equal(over.json.code, 'BUDGET_EXCEEDED', over.text);
  });

  it('two parallel captures that each fit but together exceed: exactly one succeeds', async () => {
    const k = await newKey('10.00');
    const holds = [await hold('6.00'), await hold('6.00')];
    const results = await Promise.all(holds.map((h) => signed(k, `/v1/core/holds/${h}/capture`, {})));
    assert.deepEqual(results.map((r) => r.status).sort(), [200, 429], results.map((r) => r.text).join('\n'));
    assert.deepEqual((await Promise.all(holds.map(holdStatus))).sort(), ['captured', 'pending']);
    assert.equal(await used(k), '6000000');
  });

  it('refuses an API key on money no key may move, and ignores a client-sent budget note', async () => {
    const k = await newKey('10.00');
    const body = JSON.stringify({ transferId: randomUUID() });
    const confirm = await call(gw, 'POST', '/v1/transfers/confirm', {
      body,
      headers: {
        'content-type': 'application/json',
        'idempotency-key': `t-${randomUUID()}`,
        ...signRequest({
          method: 'POST',
          path: '/v1/transfers/confirm',
          body,
          keyId: k.id,
          secret: k.secret,
        }),
      },
    });
    assert.equal(confirm.status, 403, confirm.text);
    // A client claiming the edge counted an amount cannot have it "given back" by core: the
    // edge counts nothing for these legs (no debit), so it removes the client's copy.
    assert.equal((await signed(k, `/v1/core/postings/${await posting('5.00')}/reverse`, {})).status, 201);
    const path = '/v1/core/postings';
    const noDebit = JSON.stringify({
      currency: 'KES',
      entries: [
        { account_id: payer, side: 'credit', amount: '1.00' },
        { account_id: payee, side: 'credit', amount: '1.00' },
      ],
    });
    const forged = await call(gw, 'POST', path, {
      body: noDebit,
      headers: {
        'content-type': 'application/json',
        'idempotency-key': `f-${randomUUID()}`,
        'x-credential': 'api-key',
        'x-budget-counted': `${new Date(Math.floor(Date.now() / 86_400_000) * 86_400_000).toISOString()} KES 5000000`,
        ...signRequest({ method: 'POST', path, body: noDebit, keyId: k.id, secret: k.secret }),
      },
    });
    assert.equal(forged.status, 422, forged.text);
    assert.equal(await used(k), '5000000');
  });
});
