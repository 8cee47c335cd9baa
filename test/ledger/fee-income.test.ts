/**
 * One fee-income account per tenant and currency (issue 21 item 2): agents and transfers name
 * the same account, and migration 0955 moves what the platform-owned `fee-income-<currency>`
 * accounts held into it by posting, audited once, with a reconciliation report whose before and
 * after balances sum to the same totals. The migration ran on this database when it was empty;
 * its DO block is run again here over balances made the way agents made them before.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { verifyChain } from '../../shared/audit.ts';
import { ensureAgentLedger, platformAccounts } from '../../core/agents/ledger.ts';
import { openAccount } from '../../core/ledger/accounts.ts';
import { applyInTx, postCmd, reverseCmd } from '../../core/ledger/apply.ts';
import {
  auditFeeIncomeMoves,
  feeIncomeReconciliation,
  feeReturnsBeforeReversal,
} from '../../core/ledger/fee-income.ts';
import { amountsOf } from '../../core/ledger/reads.ts';
import { feeIncomeAccount, platformAccount } from '../../core/ledger/wallets.ts';
import { migrationsDir } from '../../core/db/migrate.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import type { Queryable } from '../../shared/db/pool.ts';

const now = Date.UTC(2026, 0, 5, 9);
const migration = readFileSync(`${migrationsDir}0955_one_fee_income_account.sql`, 'utf8');
const moveBlock = migration.slice(migration.indexOf('DO $$'));

async function tenant(q: Queryable, id: string): Promise<void> {
  await q.query(`INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`, [id]);
  await ensureAgentLedger(q, id);
}

/** The platform-owned account agents booked fees to before this release. */
async function oldFeeAccount(q: Queryable, tenantId: string): Promise<string> {
  const a = await openAccount(
    q,
    {
      tenantId,
      ownerType: 'platform',
      ownerId: 'fee-income-KES',
      productCode: 'FEE_INCOME',
      currency: 'KES',
      viaApi: false,
    },
    now,
  );
  return a.id;
}

async function fund(q: Queryable, tenantId: string, account: string, amount: bigint): Promise<string> {
  const settlement = await platformAccount(q, tenantId, 'SETTLEMENT', 'settlement-KES', 'KES', now);
  const legs = [
    { account: settlement, side: 'debit' as const, amount },
    { account, side: 'credit' as const, amount },
  ];
  const cmd = postCmd(tenantId, 'FEE', 'KES', legs, 'fee', {}, now);
  await applyInTx(q, [cmd]);
  return String(cmd.id);
}

describe('one fee-income account per tenant and currency', () => {
  let tdb: TestDb;
  before(async () => {
    tdb = await freshDatabase();
  });
  after(() => tdb.drop());

  it('agent operations and transfers book fees to the same tenant-owned account', async () => {
    await tdb.db.tx(async (q) => {
      await tenant(q, 't-same');
      const agents = await platformAccounts(q, 't-same', 'KES', now);
      assert.equal(agents.feeIncome, await feeIncomeAccount(q, 't-same', 'KES', now));
      const { rows } = await q.query<{ owner_type: string; owner_id: string }>(
        'SELECT owner_type, owner_id FROM ledger_accounts WHERE tenant_id = $1 AND id = $2',
        ['t-same', agents.feeIncome],
      );
      assert.deepEqual(rows[0], { owner_type: 'tenant', owner_id: 't-same' });
    });
  });

  it('moves old balances by posting, reports before and after with equal totals, audits each move once', async () => {
    const q = tdb.db;
    await tenant(q, 't-both');
    await tenant(q, 't-old');
    const oldBoth = await tdb.db.tx((c) => oldFeeAccount(c, 't-both'));
    const newBoth = await tdb.db.tx((c) => feeIncomeAccount(c, 't-both', 'KES', now));
    const oldOnly = await tdb.db.tx((c) => oldFeeAccount(c, 't-old'));
    await tdb.db.tx(async (c) => {
      await fund(c, 't-both', oldBoth, 150_500_000n);
      await fund(c, 't-both', newBoth, 20_000_000n);
      await fund(c, 't-old', oldOnly, 7_000_000n);
    });

    await tdb.db.tx((c) => c.query(moveBlock));

    assert.equal((await amountsOf(q, 't-both', oldBoth)).posted, 0n);
    assert.equal((await amountsOf(q, 't-both', newBoth)).posted, 170_500_000n);
    assert.equal((await amountsOf(q, 't-old', oldOnly)).posted, 0n);
    const opened = await tdb.db.tx((c) => feeIncomeAccount(c, 't-old', 'KES', now));
    assert.equal(
      (await amountsOf(q, 't-old', opened)).posted,
      7_000_000n,
      'a tenant account opened for the move',
    );

    const [both] = await feeIncomeReconciliation(q, 't-both');
    assert.deepEqual(
      { moved: both?.moved, before: both?.before, after: both?.after, now: both?.now },
      {
        moved: '150.50',
        before: { old_account: '150.50', tenant_account: '20.00', total: '170.50' },
        after: { old_account: '0.00', tenant_account: '170.50', total: '170.50' },
        now: { old_account: '0.00', tenant_account: '170.50', total: '170.50' },
      },
    );
    assert.equal(both?.balanced, true);
    assert.equal(both?.audited, false);
    const { rows: posting } = await q.query<{ type_code: string }>(
      'SELECT type_code FROM ledger_postings WHERE tenant_id = $1 AND id = $2',
      ['t-both', both?.posting_id],
    );
    assert.equal(posting[0]?.type_code, 'FEE', 'moved by a ledger posting');

    assert.equal(await auditFeeIncomeMoves(tdb.db, now), 2);
    assert.equal(await auditFeeIncomeMoves(tdb.db, now), 0, 'each move is audited once');
    const { rows: audits } = await q.query<{ actor: { type: string; id: string }; target: { id: string } }>(
      `SELECT actor, target FROM audit_log WHERE tenant_id = 't-both' AND action = 'ledger.fee_income.move'`,
    );
    assert.deepEqual(audits, [
      { actor: { type: 'system', id: 'migration-0955' }, target: { type: 'posting', id: both?.posting_id } },
    ]);
    assert.equal((await verifyChain(q, 't-both')).ok, true);
    assert.equal((await feeIncomeReconciliation(q, 't-both'))[0]?.audited, true);

    await tdb.db.tx((c) => c.query(moveBlock));
    assert.equal((await feeIncomeReconciliation(q)).length, 2, 'running it again moves nothing more');
  });

  it('a posting that booked its fee to the old account is reversed after the move: the fee comes back from the tenant account', async () => {
    const q = tdb.db;
    await tenant(q, 't-rev');
    const old = await tdb.db.tx((c) => oldFeeAccount(c, 't-rev'));
    const fresh = await tdb.db.tx((c) => feeIncomeAccount(c, 't-rev', 'KES', now));
    const posting = await tdb.db.tx((c) => fund(c, 't-rev', old, 5_000_000n));
    await tdb.db.tx((c) => c.query(moveBlock));
    assert.equal((await amountsOf(q, 't-rev', fresh)).posted, 5_000_000n);
    await assert.rejects(
      tdb.db.tx((c) => applyInTx(c, [reverseCmd('t-rev', posting, 'reversal', now)])),
      'alone, the reversal would overdraw the emptied old account',
    );
    await tdb.db.tx(async (c) => {
      const returns = await feeReturnsBeforeReversal(c, 't-rev', posting, now);
      assert.equal(returns.length, 1);
      await applyInTx(c, [...returns, reverseCmd('t-rev', posting, 'reversal', now)]);
    });
    assert.equal((await amountsOf(q, 't-rev', old)).posted, 0n);
    assert.equal(
      (await amountsOf(q, 't-rev', fresh)).posted,
      0n,
      'the reversed fee leaves the tenant fee income',
    );
    // Only postings that credited a moved account need a return.
    const other = await tdb.db.tx((c) => fund(c, 't-rev', fresh, 1_000_000n));
    assert.equal((await tdb.db.tx((c) => feeReturnsBeforeReversal(c, 't-rev', other, now))).length, 0);
  });
});
