/**
 * A tenant's ledger catalogue (account types, transaction types, limit rows) is inserted on first
 * use, in the caller's transaction, and remembered per process so later uses skip it. A
 * transaction that inserted it may roll back (a failed record, a pool that gave out, a deadlock
 * that Db.tx retries): remembered anyway, the rows were gone and every later account of the
 * tenant was refused 422 UNKNOWN_PRODUCT, a wallet, an agent's float, a tenant's settlement
 * account alike, until the process restarted.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { openAccount } from '../../core/ledger/accounts.ts';
import {
  defaultAccountTypes,
  defaultLimitRows,
  defaultTransactionTypes,
  ensureTenantLedger,
} from '../../core/ledger/catalog.ts';
import type { Queryable } from '../../shared/db/pool.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { poolTimeout } from '../helpers/outage.ts';

describe('the ledger catalogue of a tenant whose first use rolled back', () => {
  let tdb: TestDb;
  const wallet = (q: Queryable, tenantId: string) =>
    openAccount(
      q,
      {
        tenantId,
        ownerType: 'customer',
        ownerId: randomUUID(),
        productCode: 'WALLET_MAIN',
        currency: 'KES',
        viaApi: false,
      },
      Date.now(),
    );
  const tenant = async (id: string) =>
    tdb.db.query(`INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`, [id]);

  before(async () => {
    tdb = await freshDatabase();
  });
  after(async () => tdb?.drop());

  it('a transaction that inserted it and rolled back leaves it to be inserted again', async () => {
    await tenant('tcat1');
    const failure = poolTimeout();
    await assert.rejects(
      tdb.db.tx(async (q) => {
        await ensureTenantLedger(q, 'tcat1');
        // Twice in one transaction: the second finds the first's rows, still uncommitted.
        await ensureTenantLedger(q, 'tcat1');
        throw failure;
      }),
      (err) => err === failure,
    );
    const opened = await tdb.db.tx(async (q) => {
      await ensureTenantLedger(q, 'tcat1');
      return wallet(q, 'tcat1');
    });
    assert.equal(opened.product_code, 'WALLET_MAIN');
  });

  it('a deadlock Db.tx retries runs its first use again', async () => {
    await tenant('tcat2');
    let attempts = 0;
    const opened = await tdb.db.tx(async (q) => {
      await ensureTenantLedger(q, 'tcat2');
      if (attempts++ === 0) throw Object.assign(new Error('deadlock detected'), { code: '40P01' });
      return wallet(q, 'tcat2');
    });
    assert.equal(attempts, 2);
    assert.equal(opened.product_code, 'WALLET_MAIN');
  });

  it('first uses raced with one that inserted it and rolls back: every other opens its account, each row once', async () => {
    await tenant('tcat4');
    let inserted!: () => void;
    const insertedNow = new Promise<void>((r) => {
      inserted = r;
    });
    const failure = poolTimeout();
    const doomed = tdb.db.tx(async (q) => {
      await ensureTenantLedger(q, 'tcat4');
      inserted();
      // The others meet its rows uncommitted and wait for it.
      await new Promise((r) => setTimeout(r, 300));
      throw failure;
    });
    await insertedNow;
    const raced = Array.from({ length: 6 }, () =>
      tdb.db.tx(async (q) => {
        await ensureTenantLedger(q, 'tcat4');
        return wallet(q, 'tcat4');
      }),
    );
    await assert.rejects(doomed, (err) => err === failure);
    for (const opened of await Promise.all(raced)) assert.equal(opened.product_code, 'WALLET_MAIN');
    assert.equal((await wallet(tdb.db, 'tcat4')).product_code, 'WALLET_MAIN', 'and later ones');
    const { rows } = await tdb.db.query<{ types: number; txn: number; limits: number }>(
      `SELECT (SELECT count(*)::int FROM ledger_account_types WHERE tenant_id = $1) AS types,
              (SELECT count(*)::int FROM ledger_transaction_types WHERE tenant_id = $1) AS txn,
              (SELECT count(*)::int FROM ledger_limit_rows WHERE tenant_id = $1) AS limits`,
      ['tcat4'],
    );
    assert.deepEqual(rows[0], {
      types: defaultAccountTypes.length,
      txn: defaultTransactionTypes.length,
      limits: defaultLimitRows.length,
    });
  });

  it('once seen committed, it costs no statement', async () => {
    await tenant('tcat3');
    await tdb.db.tx((q) => ensureTenantLedger(q, 'tcat3'));
    // Another transaction finds every row there: committed.
    await tdb.db.tx((q) => ensureTenantLedger(q, 'tcat3'));
    let statements = 0;
    await tdb.db.tx(async (q) => {
      const counted = new Proxy(q, {
        get: (target, prop, receiver) =>
          prop === 'query'
            ? (...args: Parameters<Queryable['query']>) => {
                statements++;
                return target.query(...args);
              }
            : Reflect.get(target, prop, receiver),
      });
      await ensureTenantLedger(counted, 'tcat3');
    });
    assert.equal(statements, 0);
  });
});
