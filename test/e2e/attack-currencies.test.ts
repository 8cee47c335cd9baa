/**
 * Attacks through the gateway on the currency table as the ledger's source of minor units: a
 * platform admin's write to it that does not commit must leave this core's snapshot
 * (core/ledger/currency.ts) as the table is. The commit is refused here by a deferred trigger the
 * test installs (as a lost connection, a failover or a full disk refuse one in production).
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
    const rescale = (minor: number) =>
      as(platform, 'PATCH', '/v1/currencies/SCR', { minor_units: minor }, { 'if-match': '*' });
    const fewer = await rescale(2);
    assert.equal(fewer.status, 409, fewer.text);
    assert.equal(fewer.json.code, 'CURRENCY_MINOR_UNITS_LOCKED');
    assert.match(fewer.json.detail, /active .*schedule/);
    assert.equal((await as(platform, 'GET', '/v1/currencies/SCR')).json.minor_units, 3);
    assert.equal((await quote()).json.fee, '0.225');
    assert.equal((await rescale(4)).status, 200, 'more decimals hold every amount it has');
    assert.equal((await rescale(3)).status, 200, '0.125 still fits');

    // Deactivated, it is checked again when activated (SCHEDULE_PRECISION), not here.
    assert.equal((await status('INACTIVE')).status, 200);
    assert.equal((await rescale(2)).status, 200);
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
});
