/**
 * Two cores as separate OS processes (production mode) on one database, as operators run N behind
 * a load balancer: a currency added or re-scaled through core A's admin API is applied by core B
 * within moments (NOTIFY `currencies_changed`, migration 1101; core/admin/reference/currency-sync.ts),
 * not at B's next periodic reload (every 30 s, counted from B's start: this test is done well before).
 * Each core keeps the snapshot in its own process, so only the database can tell B of A's change.
 * Accounts are opened through A: opening one through B would read the currency's row there.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { ensureTenantLedger } from '../../core/ledger/catalog.ts';
import { openSettlement } from '../ledger/tenant-db.ts';
import { clientToken } from '../helpers/core-client.ts';
import { freePort } from '../../shared/net.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, type Res } from '../helpers/http.ts';
import { productionEnv, runService, until, untilServing, type Service } from '../helpers/services.ts';

const tenantId = 'cur';
/** How long B may take to apply a change made through A: a NOTIFY's round trip, with room for a loaded machine. */
const appliedWithinMs = 5_000;

describe('a currency changed through one core is applied by another at once', { timeout: 180_000 }, () => {
  let tdb: TestDb;
  let env: Record<string, string>;
  const procs: Record<string, Service> = {};
  const origin: Record<'A' | 'B', string> = { A: '', B: '' };
  let token = '';

  /** A request to core `at` as the edge forwards it for the platform operator's Admin. */
  const admin = (at: 'A' | 'B', method: string, path: string, json?: unknown, headers = {}) =>
    call(origin[at], method, path, {
      ...(json !== undefined ? { json } : {}),
      headers: {
        'x-edge-auth': env.EDGE_SHARED_SECRET as string,
        'x-request-id': randomUUID(),
        'x-tenant-id': tenantId,
        'x-principal-id': 'staff:cur-admin',
        'x-roles': 'admin',
        'x-client-ip': '10.0.0.1',
        'idempotency-key': randomUUID(),
        ...headers,
      },
    });
  /** A ledger request to core `at` with the tenant's core client token. */
  const ledger = (at: 'A' | 'B', method: string, path: string, json?: unknown): Promise<Res> =>
    call(origin[at], method, path, {
      ...(json !== undefined ? { json } : {}),
      headers: {
        authorization: `Bearer ${token}`,
        'x-request-id': randomUUID(),
        ...(method === 'POST' ? { 'idempotency-key': randomUUID() } : {}),
      },
    });
  const move = (at: 'A' | 'B', currency: string, from: string, to: string, amount: string) =>
    ledger(at, 'POST', '/v1/core/postings', {
      currency,
      entries: [
        { account_id: from, side: 'debit', amount },
        { account_id: to, side: 'credit', amount },
      ],
    });

  /** A settlement account (not opened through the API) and a wallet opened through core A, in `currency`. */
  async function accountsIn(currency: string): Promise<{ settlement: string; wallet: string }> {
    const settlement = await openSettlement(tdb.db, tenantId, currency);
    const w = await ledger('A', 'POST', '/v1/core/accounts', {
      owner_type: 'customer',
      owner_id: `cust-${currency}`,
      product_code: 'WALLET_MAIN',
      currency,
    });
    assert.equal(w.status, 201, w.text);
    return { settlement, wallet: w.json.id as string };
  }

  before(async () => {
    tdb = await freshDatabase();
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`,
      [tenantId],
    );
    // Its Admins are the platform admins: the only ones who may change the currency table.
    await tdb.db.query('INSERT INTO platform_operator (tenant_id) VALUES ($1)', [tenantId]);
    await ensureTenantLedger(tdb.db, tenantId);
    env = productionEnv(tdb.url);
    for (const name of ['A', 'B'] as const) {
      const port = await freePort();
      origin[name] = `http://127.0.0.1:${port}`;
      procs[name] = runService('core', { ...env, CORE_PORT: String(port) });
    }
    await Promise.all(
      (['A', 'B'] as const).map((n) => untilServing(origin[n], '/v1/ready', 120_000, procs, procs[n])),
    );
    token = await clientToken(tdb.db, origin.A, tenantId, ['core:read', 'core:write']);
  });

  after(async () => {
    for (const p of Object.values(procs)) if (p.child.exitCode === null) p.child.kill('SIGTERM');
    await Promise.all(Object.values(procs).map((p) => p.exited));
    await tdb?.drop();
  });

  it('accepts an amount in a currency added through the other core, with its minor units', async () => {
    const made = await admin('A', 'POST', '/v1/currencies', { code: 'MUR', minor_units: 3 });
    assert.equal(made.status, 201, made.text);
    const { settlement, wallet } = await accountsIn('MUR');

    // Each attempt is a new posting (a refused key stays refused); the first B accepts is the one.
    const refusals = new Set<string>();
    const posted = await until(
      async () => {
        const r = await move('B', 'MUR', settlement, wallet, '12.5');
        if (r.status === 201) return r;
        refusals.add(`${r.status} ${r.json?.code}`);
        return undefined;
      },
      appliedWithinMs,
      () => `core B to accept MUR (it answered ${[...refusals].join(', ')})`,
    );
    assert.deepEqual(
      posted.json.entries.map((e: { amount: string }) => e.amount),
      ['12.500', '12.500'],
      'shown with its 3 minor units',
    );
    const balances = await ledger('B', 'GET', `/v1/core/accounts/${wallet}/balances`);
    assert.equal(balances.status, 200, balances.text);
    assert.equal(balances.json.posted, '12.500');
    const finer = await move('B', 'MUR', settlement, wallet, '0.0005');
    assert.equal(finer.status, 422, finer.text);
    assert.equal(finer.json.code, 'INVALID_AMOUNT');
  });

  it('applies minor units changed through the other core while no account held the currency', async () => {
    const made = await admin('A', 'POST', '/v1/currencies', { code: 'SCR', minor_units: 2 });
    assert.equal(made.status, 201, made.text);
    // B knows SCR (with the 2 it was added with) once an amount in it passes B's currency check
    // and reaches the ledger, which finds no such accounts; before, B refuses the currency.
    const [nowhere, nobody] = [randomUUID(), randomUUID()];
    await until(
      async () => ((await move('B', 'SCR', nowhere, nobody, '1.50')).status === 404 ? true : undefined),
      appliedWithinMs,
      'core B to know SCR',
    );

    const changed = await admin('A', 'PATCH', '/v1/currencies/SCR', { minor_units: 0 }, { 'if-match': '*' });
    assert.equal(changed.status, 200, changed.text);
    assert.equal(changed.json.minor_units, 0);
    const { settlement, wallet } = await accountsIn('SCR');
    const posted = await move('B', 'SCR', settlement, wallet, '7');
    assert.equal(posted.status, 201, posted.text);
    // Shown with B's minor units: 7.00 while B still had 2, 7 once it applied 0.
    const shown = await until(
      async () => {
        const r = await ledger('B', 'GET', `/v1/core/accounts/${wallet}/balances`);
        return r.status === 200 && r.json.posted === '7' ? r : undefined;
      },
      appliedWithinMs,
      'core B to show SCR with 0 minor units',
    );
    assert.equal(shown.json.currency, 'SCR');
    const fraction = await move('B', 'SCR', settlement, wallet, '0.5');
    assert.equal(fraction.status, 422, fraction.text);
    assert.equal(fraction.json.code, 'INVALID_AMOUNT');
  });
});
