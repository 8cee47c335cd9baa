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
import { ensureTenantLedger } from '../../core/ledger/catalog.ts';
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
