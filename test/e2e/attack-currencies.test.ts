/**
 * Attacks through the gateway on the currency table as the ledger's source of minor units: a
 * platform admin's write to it that does not commit must leave this core's snapshot
 * (core/ledger/currency.ts) as the table is. The commit is refused here by a deferred trigger the
 * test installs (as a lost connection, a failover or a full disk refuse one in production). Nor
 * may a re-scale leave an amount configured in the currency (a schedule's fee, a savings product's
 * min_balance, an API key's budget, a ledger limit) finer than its minor units.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { TestDb } from '../helpers/db.ts';
import { accountOpenedElsewhere } from '../helpers/ledger-rows.ts';
import { startE2eStack, type E2eStack } from '../helpers/e2e-stack.ts';
import { callRetrying } from '../helpers/gateway.ts';
import type { Res } from '../helpers/http.ts';
import type { Demo } from '../helpers/journey.ts';

type DemoFile = Demo & {
  serviceTokens: Record<'admin', { token: string }>;
  coreClient: { clientId: string; clientSecret: string };
};

const tenant = 'demo';

describe('attacks on the currency table through the gateway', () => {
  let e2e: E2eStack;
  let tdb: TestDb;
  let gw: string;
  let platform = '';
  let client = '';

  const as = (bearer: string, method: string, path: string, json?: unknown, more = {}): Promise<Res> => {
    const headers = {
      authorization: `Bearer ${bearer}`,
      'x-request-id': randomUUID(),
      'idempotency-key': `k-${randomUUID()}`,
      ...more,
    };
    return callRetrying(gw, method, path, json === undefined ? { headers } : { json, headers });
  };
  const move = (currency: string, from: string, to: string, amount: string) =>
    as(client, 'POST', '/v1/core/postings', {
      currency,
      entries: [
        { account_id: from, side: 'debit', amount },
        { account_id: to, side: 'credit', amount },
      ],
    });
  const openedElsewhere = (currency: string, floor: boolean) =>
    accountOpenedElsewhere(tdb.db, tenant, currency, floor);
  /** The platform tenant's active TRANSFER fee schedule in `currency`: fixed 0.125 plus 1%. */
  async function activeFeeSchedule(currency: string): Promise<(to: string) => Promise<Res>> {
    const fee = await as(platform, 'POST', '/v1/schedules', { kind: 'FEE', product: 'TRANSFER', currency });
    assert.equal(fee.status, 201, fee.text);
    const added = await as(platform, 'POST', `/v1/schedules/${fee.json.id}/fees`, {
      items: [{ min_amount: '0', fixed: '0.125', percent_bps: 100 }],
    });
    assert.equal(added.status, 200, added.text);
    const status = async (to: string) => {
      const etag = (await as(platform, 'GET', `/v1/schedules/${fee.json.id}`)).headers.etag ?? '';
      return as(platform, 'PATCH', `/v1/schedules/${fee.json.id}`, { status: to }, { 'if-match': etag });
    };
    const active = await status('ACTIVE');
    assert.equal(active.status, 200, active.text);
    return status;
  }
  const rescale = (code: string, minor: number) =>
    as(platform, 'PATCH', `/v1/currencies/${code}`, { minor_units: minor }, { 'if-match': '*' });
  /** The next write to `code`'s row fails at its COMMIT. */
  const refuseCommitOf = (code: string) =>
    tdb.db.query('INSERT INTO test_commit_refusals (code) VALUES ($1)', [code]);
  const commitAgain = (code: string) =>
    tdb.db.query('DELETE FROM test_commit_refusals WHERE code = $1', [code]);
  const failedAtCommit = (r: Res, what: string) => {
    assert.ok(r.status >= 500, `${what}: ${r.status} ${r.text}`);
    assert.doesNotMatch(r.text, /refused by the test|at Object|\.ts:/, `${what}: nothing internal told`);
  };

  before(async () => {
    e2e = await startE2eStack('atkcur');
    ({ tdb, gw } = e2e);
    const demo = e2e.demo as DemoFile;
    platform = demo.serviceTokens.admin.token;
    const t = await callRetrying(gw, 'POST', '/oauth2/token', {
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: demo.coreClient.clientId,
        client_secret: demo.coreClient.clientSecret,
        scope: 'core:read core:write',
      }).toString(),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    assert.equal(t.status, 200, t.text);
    client = t.json.access_token;
    await tdb.db.query(`
      CREATE TABLE test_commit_refusals (code text PRIMARY KEY);
      CREATE FUNCTION test_refuse_commit() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF EXISTS (SELECT 1 FROM test_commit_refusals WHERE code = coalesce(NEW.code, OLD.code)) THEN
          RAISE EXCEPTION 'commit refused by the test';
        END IF;
        RETURN NULL;
      END $$;
      CREATE CONSTRAINT TRIGGER test_refuse_commit AFTER INSERT OR UPDATE OR DELETE ON admin_currencies
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_refuse_commit();`);
  });
  after(() => e2e?.stop());

  it("a change of minor units that did not commit is not applied by this core's ledger", async () => {
    const made = await as(platform, 'POST', '/v1/currencies', { code: 'MUR', minor_units: 3 });
    assert.equal(made.status, 201, made.text);
    await refuseCommitOf('MUR');
    const changed = await as(
      platform,
      'PATCH',
      '/v1/currencies/MUR',
      { minor_units: 0 },
      { 'if-match': '*' },
    );
    failedAtCommit(changed, 'the re-scale');
    await commitAgain('MUR');
    assert.equal((await as(platform, 'GET', '/v1/currencies/MUR')).json.minor_units, 3);

    // Accounts opened in it since (by another instance): amounts are the table's 3 decimals.
    const [from, to] = [await openedElsewhere('MUR', false), await openedElsewhere('MUR', true)];
    const posted = await move('MUR', from, to, '1.5');
    assert.equal(posted.status, 201, `1.5 MUR is an amount of a 3-decimal currency: ${posted.text}`);
    assert.deepEqual(
      posted.json.entries.map((e: { amount: string }) => e.amount),
      ['1.500', '1.500'],
    );
    const balances = await as(client, 'GET', `/v1/core/accounts/${to}/balances`);
    assert.equal(balances.json.posted, '1.500', balances.text);
    const finer = await move('MUR', from, to, '0.0005');
    assert.equal(finer.status, 422, finer.text);
    assert.equal(finer.json.code, 'INVALID_AMOUNT');
    // Audited in the transaction of the change: the addition is, the re-scale that failed is not.
    const records = await tdb.db.query<{ action: string; actor: { type: string; id: string } }>(
      `SELECT action, actor FROM audit_log WHERE target->>'type' = 'currency' AND target->>'id' = 'MUR' ORDER BY id`,
    );
    assert.deepEqual(
      records.rows.map((r) => r.action),
      ['currency.create'],
    );
    assert.match(records.rows[0]?.actor.id ?? '', /^service-token:/, 'naming who made it');
  });

  it('a currency whose removal did not commit stays known; one whose addition did not commit stays unknown', async () => {
    const made = await as(platform, 'POST', '/v1/currencies', { code: 'BND', minor_units: 3 });
    assert.equal(made.status, 201, made.text);
    await refuseCommitOf('BND');
    failedAtCommit(await as(platform, 'DELETE', '/v1/currencies/BND'), 'the removal');
    await commitAgain('BND');
    const [from, to] = [await openedElsewhere('BND', false), await openedElsewhere('BND', true)];
    const posted = await move('BND', from, to, '2.25');
    assert.equal(posted.status, 201, `BND is still in the table: ${posted.text}`);
    const balances = await as(client, 'GET', `/v1/core/accounts/${to}/balances`);
    assert.equal(balances.json.posted, '2.250', `shown with its 3 decimals: ${balances.text}`);

    await refuseCommitOf('MOP');
    failedAtCommit(await as(platform, 'POST', '/v1/currencies', { code: 'MOP' }), 'the addition');
    const unknown = await move('MOP', randomUUID(), randomUUID(), '1');
    assert.equal(unknown.status, 422, `MOP is not in the table: ${unknown.text}`);
    assert.equal(unknown.json.code, 'UNKNOWN_CURRENCY');
  });
  it("keeps minor units an active fee schedule's amounts need; the schedule's quote stays a bookable fee", async () => {
    const made = await as(platform, 'POST', '/v1/currencies', { code: 'SCR', minor_units: 3 });
    assert.equal(made.status, 201, made.text);
    const status = await activeFeeSchedule('SCR');
    const quote = () =>
      as(platform, 'POST', '/v1/fees:quote', { product: 'TRANSFER', amount: '10', currency: 'SCR' });
    assert.equal((await quote()).json.fee, '0.225', 'fixed 0.125 and 1% of 10');

    // No account holds SCR, but every transfer in it would carry a fee of 0.225: at 2 minor
    // units the ledger refuses that amount, and each transfer with it.
    const fewer = await rescale('SCR', 2);
    assert.equal(fewer.status, 409, fewer.text);
    assert.equal(fewer.json.code, 'CURRENCY_MINOR_UNITS_LOCKED');
    assert.match(fewer.json.detail, /active .*schedule/);
    assert.equal((await as(platform, 'GET', '/v1/currencies/SCR')).json.minor_units, 3);
    assert.equal((await quote()).json.fee, '0.225');
    assert.equal((await rescale('SCR', 4)).status, 200, 'more decimals hold every amount it has');
    assert.equal((await rescale('SCR', 3)).status, 200, '0.125 still fits');

    // Deactivated, it is checked again when activated (SCHEDULE_PRECISION), not here.
    assert.equal((await status('INACTIVE')).status, 200);
    assert.equal((await rescale('SCR', 2)).status, 200);
    const again = await status('ACTIVE');
    assert.equal(again.status, 400, again.text);
    assert.equal(again.json.code, 'SCHEDULE_PRECISION');
  });

  it("adds no currency with fewer minor units than an active schedule's amounts in it have", async () => {
    // LYD is not in the table: its schedules were validated against ISO 4217's 3 minor units.
    await activeFeeSchedule('LYD');
    const fewer = await as(platform, 'POST', '/v1/currencies', { code: 'LYD', minor_units: 2 });
    assert.equal(fewer.status, 409, fewer.text);
    assert.equal(fewer.json.code, 'CURRENCY_MINOR_UNITS_LOCKED');
    const iso = await as(platform, 'POST', '/v1/currencies', { code: 'LYD' });
    assert.equal(iso.status, 201, iso.text);
    assert.equal(iso.json.minor_units, 3);
  });

  it("keeps minor units a savings product's min_balance needs, naming the product", async () => {
    const made = await as(platform, 'POST', '/v1/currencies', { code: 'MVR', minor_units: 3 });
    assert.equal(made.status, 201, made.text);
    const product = await as(client, 'POST', '/v1/core/savings-products', {
      code: 'SAVE_MVR',
      name: 'MVR saver',
      currency: 'MVR',
      interest_rate_bps: 300,
      min_balance: '10.125',
    });
    assert.equal(product.status, 201, product.text);
    // No account holds MVR: only the product's floor needs its third decimal.
    const fewer = await rescale('MVR', 2);
    assert.equal(fewer.status, 409, fewer.text);
    assert.equal(fewer.json.code, 'CURRENCY_MINOR_UNITS_LOCKED');
    assert.match(
      fewer.json.detail,
      /savings product SAVE_MVR of tenant demo has a min_balance of 10\.125 MVR/,
    );
    assert.equal((await as(platform, 'GET', '/v1/currencies/MVR')).json.minor_units, 3);
    assert.equal((await rescale('MVR', 4)).status, 200, 'more decimals hold every amount it has');
    assert.equal((await rescale('MVR', 3)).status, 200, '10.125 still fits');
    const gone = await as(platform, 'DELETE', '/v1/currencies/MVR');
    assert.equal(gone.status, 409, gone.text);
    assert.equal(gone.json.code, 'CURRENCY_IN_USE');
    assert.match(gone.json.detail, /savings product/);
    // Each re-scale that changed the table is audited naming who made it; the refused one is not.
    const records = await tdb.db.query<{ actor: { id: string } }>(
      `SELECT actor FROM audit_log WHERE action = 'currency.update' AND target->>'id' = 'MVR' ORDER BY id`,
    );
    assert.equal(records.rows.length, 2);
    for (const r of records.rows) assert.match(r.actor.id, /^service-token:/);
  });

  it("keeps minor units an API key's daily amount budget needs, without naming the key; a revoked key holds nothing", async () => {
    const made = await as(platform, 'POST', '/v1/currencies', { code: 'KYD', minor_units: 3 });
    assert.equal(made.status, 201, made.text);
    const key = await as(platform, 'POST', '/api-keys', {
      name: 'kyd-budget',
      scopes: ['core:write'],
      budget: { daily_amount: '5.125', currency: 'KYD' },
    });
    assert.equal(key.status, 201, key.text);
    const fewer = await rescale('KYD', 2);
    assert.equal(fewer.status, 409, fewer.text);
    assert.equal(fewer.json.code, 'CURRENCY_MINOR_UNITS_LOCKED');
    assert.match(fewer.json.detail, /an API key of tenant demo has a daily amount budget of 5\.125 KYD/);
    // Said to whoever can act on it: the platform's Admins cannot revoke another tenant's key.
    assert.match(fewer.json.detail, /that tenant's Admin revokes it first/);
    assert.ok(!fewer.text.includes(key.json.id) && !fewer.text.includes(key.json.secret), fewer.text);
    const revoked = await as(platform, 'DELETE', `/api-keys/${key.json.id}`);
    assert.equal(revoked.status, 204, revoked.text);
    assert.equal((await rescale('KYD', 2)).status, 200, 'a revoked key counts no budget again');
  });

  it('refuses a configured amount finer than its currency, or in a currency the table lacks, with a 422', async () => {
    const key = (budget: unknown) =>
      as(platform, 'POST', '/api-keys', { name: 'fine-budget', scopes: ['core:write'], budget });
    const finer = await key({ daily_amount: '5.125', currency: 'KES' });
    assert.equal(finer.status, 422, finer.text);
    assert.equal(finer.json.code, 'INVALID_AMOUNT');
    assert.match(
      finer.json.message,
      /budget\.daily_amount: 5\.125 has more decimals than the 2 minor units of KES/,
    );
    const unknown = await key({ daily_amount: '5', currency: 'XAU' });
    assert.equal(unknown.status, 422, unknown.text);
    assert.equal(unknown.json.code, 'UNKNOWN_CURRENCY');
    assert.equal((await key({ daily_amount: '5.12', currency: 'KES' })).status, 201);
  });

  it('stores no configured amount that is no amount, whoever writes it', async () => {
    // An operator's SQL, as migration 1104's guards promise to hold under every writer.
    const keyWith = (budget: string) =>
      tdb.db.query(
        `INSERT INTO api_keys (id, tenant_id, name, secret_enc, secret_hash, budget, created_by)
         VALUES ($1, $2, 'by-sql', '\\x00', '\\x00', $3::jsonb, 'operator')`,
        [`pk_test_${randomUUID().replaceAll('-', '')}`, tenant, budget],
      );
    // None of these is an amount the edge reads (shared/money.ts parseAmount): stored, the key
    // would move money with no daily budget applied at all.
    for (const amount of [
      '5',
      '5.12',
      'null',
      '"NaN"',
      '"Infinity"',
      '"-5"',
      '" 5 "',
      '"1e3"',
      '"05"',
      '{}',
    ]) {
      await assert.rejects(
        keyWith(`{"daily_amount": ${amount}, "currency": "KES"}`),
        { code: 'CU001', message: /budget\.daily_amount: must be a decimal string/ },
        `daily_amount ${amount}`,
      );
    }
    await assert.rejects(keyWith('{"daily_amount": "5"}'), {
      code: 'CU002',
      message: 'budget.daily_amount needs budget.currency',
    });
    await keyWith('{"daily_amount": "5.12", "currency": "KES", "per_minute": 10}');
    // A min_balance of NaN fits numeric(20,6) and its CHECK (>= 0); stored, every read of the
    // tenant's savings products failed.
    await assert.rejects(
      tdb.db.query(
        `INSERT INTO ledger_savings_products (tenant_id, code, name, currency, interest_rate_bps, min_balance)
         VALUES ($1, 'SAVE_NAN', 'by SQL', 'KES', 100, 'NaN')`,
        [tenant],
      ),
      { code: 'CU001', message: 'min_balance: NaN is not an amount' },
    );
    const products = await as(client, 'GET', '/v1/core/savings-products');
    assert.equal(products.status, 200, products.text);
    // Through the API, as before: the route's own checks answer first.
    const numeric = await as(platform, 'POST', '/api-keys', {
      name: 'numeric-budget',
      scopes: ['core:write'],
      budget: { daily_amount: 5, currency: 'KES' },
    });
    assert.equal(numeric.status, 400, numeric.text);
  });

  it('changes minor units past an API key budget stored before the guards that is no number; a finer number still holds', async () => {
    const made = await as(platform, 'POST', '/v1/currencies', { code: 'AWG', minor_units: 3 });
    assert.equal(made.status, 201, made.text);
    // Rows as an earlier release or an operator's SQL left them, before migrations 1104 and 1112.
    const legacy = async (budgets: string[]) => {
      await tdb.db.query('ALTER TABLE api_keys DISABLE TRIGGER api_key_budget_amount_guard');
      try {
        for (const budget of budgets)
          await tdb.db.query(
            `INSERT INTO api_keys (id, tenant_id, name, secret_enc, secret_hash, budget, created_by)
             VALUES ($1, $2, 'legacy', '\\x00', '\\x00', $3::jsonb, 'operator')`,
            [`pk_test_${randomUUID().replaceAll('-', '')}`, tenant, budget],
          );
      } finally {
        await tdb.db.query('ALTER TABLE api_keys ENABLE TRIGGER api_key_budget_amount_guard');
      }
    };
    await legacy(
      ['"abc"', '""', '{"x": 1}', '"1e999999"', '"NaN"', 'null'].map(
        (a) => `{"daily_amount": ${a}, "currency": "AWG"}`,
      ),
    );
    await legacy(['{"daily_amount": 5.125, "currency": "AWG"}']);
    // The finer number is found and named; the rest need no decimals, and fail nothing.
    const fewer = await rescale('AWG', 2);
    assert.equal(fewer.status, 409, fewer.text);
    assert.match(fewer.json.detail, /an API key of tenant demo has a daily amount budget of 5\.125 AWG/);
    await tdb.db.query(
      `UPDATE api_keys SET revoked_at = now() WHERE budget ->> 'currency' = 'AWG' AND budget ->> 'daily_amount' = '5.125'`,
    );
    const changed = await rescale('AWG', 2);
    assert.equal(changed.status, 200, changed.text);
    assert.equal(changed.json.minor_units, 2);
  });

  it('audits each change of the table with the minor units it leaves the ledger, naming who made it', async () => {
    assert.equal((await as(platform, 'POST', '/v1/currencies', { code: 'TOP', minor_units: 3 })).status, 201);
    assert.equal((await rescale('TOP', 4)).status, 200);
    const renamed = await as(
      platform,
      'PATCH',
      '/v1/currencies/TOP',
      { name: 'Paanga' },
      { 'if-match': '*' },
    );
    assert.equal(renamed.status, 200, renamed.text);
    assert.equal((await as(platform, 'DELETE', '/v1/currencies/TOP')).status, 204);
    const { rows } = await tdb.db.query<{
      action: string;
      actor: { id: string };
      attrs: { minor_units: unknown };
    }>(
      `SELECT action, actor, attrs FROM audit_log WHERE target->>'type' = 'currency' AND target->>'id' = 'TOP' ORDER BY id`,
    );
    assert.deepEqual(
      rows.map((r) => [r.action, r.attrs.minor_units]),
      [
        ['currency.create', 3],
        ['currency.update', { from: 3, to: 4 }],
        ['currency.update', { from: 4, to: 4 }],
        ['currency.delete', 4],
      ],
    );
    for (const r of rows) assert.match(r.actor.id, /^service-token:/);
  });

  it('keeps minor units an active ledger limit needs', async () => {
    const made = await as(platform, 'POST', '/v1/currencies', { code: 'BZD', minor_units: 3 });
    assert.equal(made.status, 201, made.text);
    // Written by an operator's SQL (the admin API writes these only from active limit schedules).
    await tdb.db.query(
      `INSERT INTO ledger_limit_rows (tenant_id, product_code, action, currency, period, max_amount)
       VALUES ($1, 'WALLET_MAIN', 'TRANSFER', 'BZD', 'day', 250.125)`,
      [tenant],
    );
    const fewer = await rescale('BZD', 2);
    assert.equal(fewer.status, 409, fewer.text);
    assert.match(fewer.json.detail, /active ledger limit \(WALLET_MAIN TRANSFER per day\) of tenant demo/);
    await tdb.db.query(`UPDATE ledger_limit_rows SET active = false WHERE currency = 'BZD'`);
    assert.equal((await rescale('BZD', 2)).status, 200, 'an inactive limit is not applied');
  });
});
