/**
 * The fee-income consolidation of migration 0955 (issue 21 item 2): the audit record of each
 * move, and the reconciliation report. The migration posts the moves (SQL cannot extend the
 * hash-chained audit log, whose hashes are computed here), so every core, when it starts,
 * appends one `ledger.fee_income.move` record per move not yet audited, in the same
 * transaction that marks it audited: each move is audited exactly once, whichever core gets it.
 */
import { appendAudit } from '../../shared/audit.ts';
import type { Db, Queryable } from '../../shared/db/pool.ts';
import { format, fromDb, type Micro } from '../../shared/money.ts';
import { displayDecimals } from './currency.ts';
import { amountsOf } from './reads.ts';
import { postCmd } from './apply.ts';
import type { LedgerCommand } from './batcher.ts';

interface MoveRow {
  tenant_id: string;
  posting_id: string;
  currency: string;
  from_account: string;
  to_account: string;
  amount: string;
  from_before: string;
  to_before: string;
  moved_at: Date;
}

const moveColumns =
  'tenant_id, posting_id, currency, from_account, to_account, amount::text AS amount, from_before::text AS from_before, to_before::text AS to_before, moved_at';

/** Audit every move not yet audited; returns how many this call audited. */
export async function auditFeeIncomeMoves(db: Db, now: number): Promise<number> {
  return db.tx(async (q) => {
    const { rows } = await q.query<MoveRow>(
      `SELECT ${moveColumns} FROM ledger_fee_income_moves WHERE audited_at IS NULL
        ORDER BY moved_at, tenant_id, posting_id FOR UPDATE SKIP LOCKED`,
    );
    if (rows.length === 0) return 0;
    await appendAudit(
      q,
      rows.map((r) => ({
        tenantId: r.tenant_id,
        actor: { type: 'system', id: 'migration-0955' },
        action: 'ledger.fee_income.move',
        target: { type: 'posting', id: r.posting_id },
        attrs: {
          currency: r.currency,
          from_account: r.from_account,
          to_account: r.to_account,
          amount: r.amount,
          moved_at: r.moved_at.toISOString(),
        },
        ts: new Date(now),
      })),
    );
    await q.query(
      `UPDATE ledger_fee_income_moves SET audited_at = $2
        WHERE (tenant_id, posting_id) IN (SELECT * FROM unnest($1::text[], $3::uuid[]))`,
      [rows.map((r) => r.tenant_id), new Date(now), rows.map((r) => r.posting_id)],
    );
    return rows.length;
  });
}

export interface Balances {
  /** the platform-owned `fee-income-<currency>` account agents used */
  old_account: string;
  /** the tenant-owned account every fee goes to now */
  tenant_account: string;
  total: string;
}

export interface MoveReport {
  tenant_id: string;
  currency: string;
  posting_id: string;
  moved: string;
  before: Balances;
  after: Balances;
  /** The two accounts' posted balances now (later fees and reversals included). */
  now: Balances;
  /**
   * What the ledger's posting did (after = before + its entries) kept the total and emptied the
   * old account: the move neither made nor lost money.
   */
  balanced: boolean;
  audited: boolean;
}

function balances(old: Micro, tenant: Micro, minor: number): Balances {
  return {
    old_account: format(old, minor),
    tenant_account: format(tenant, minor),
    total: format(old + tenant, minor),
  };
}

/** Net credit (credits − debits) of one posting on each account it touched. */
async function postingEffect(q: Queryable, tenantId: string, postingId: string): Promise<Map<string, Micro>> {
  const { rows } = await q.query<{ account_id: string; net: string }>(
    `SELECT account_id, sum(CASE side WHEN 'credit' THEN amount ELSE -amount END)::text AS net
       FROM ledger_entries WHERE tenant_id = $1 AND posting_id = $2 GROUP BY account_id`,
    [tenantId, postingId],
  );
  return new Map(rows.map((r) => [r.account_id, fromDb(r.net)]));
}

/** Every move of migration 0955 (of one tenant, or all), with the balances before, after and now. */
export async function feeIncomeReconciliation(q: Queryable, tenantId?: string): Promise<MoveReport[]> {
  const { rows } = await q.query<MoveRow & { audited: boolean }>(
    `SELECT ${moveColumns}, audited_at IS NOT NULL AS audited FROM ledger_fee_income_moves
      WHERE ($1::text IS NULL OR tenant_id = $1) ORDER BY tenant_id, currency, moved_at, posting_id`,
    [tenantId ?? null],
  );
  const out: MoveReport[] = [];
  for (const r of rows) {
    const minor = displayDecimals(r.currency);
    const moved = fromDb(r.amount);
    const fromBefore = fromDb(r.from_before);
    const toBefore = fromDb(r.to_before);
    const effect = await postingEffect(q, r.tenant_id, r.posting_id);
    const oldAfter = fromBefore + (effect.get(r.from_account) ?? 0n);
    const before = balances(fromBefore, toBefore, minor);
    const after = balances(oldAfter, toBefore + (effect.get(r.to_account) ?? 0n), minor);
    const oldNow = await amountsOf(q, r.tenant_id, r.from_account);
    const tenantNow = await amountsOf(q, r.tenant_id, r.to_account);
    out.push({
      tenant_id: r.tenant_id,
      currency: r.currency,
      posting_id: r.posting_id,
      moved: format(moved, minor),
      before,
      after,
      now: balances(oldNow.posted, tenantNow.posted, minor),
      balanced: before.total === after.total && oldAfter === 0n,
      audited: r.audited,
    });
  }
  return out;
}

/**
 * What must go before reversing a posting made before migration 0955: the fee it credited to a
 * platform-owned fee-income account has since been moved (by posting) to the tenant's account,
 * so the old account cannot give it back and the reversal would be refused. A FEE posting returns
 * each such credit from the account it was moved to (tenant's → old), in the same batch and just
 * before the reversal, which then debits what the posting credited: the tenant's fee income ends
 * lower by the fee, as the reversal means, and the old account where it was.
 */
export async function feeReturnsBeforeReversal(
  q: Queryable,
  tenantId: string,
  postingId: string,
  now: number,
): Promise<LedgerCommand[]> {
  const { rows } = await q.query<{
    account_id: string;
    to_account: string;
    currency: string;
    amount: string;
  }>(
    `SELECT e.account_id, m.to_account, e.currency, e.amount::text AS amount
       FROM ledger_entries e
       JOIN (SELECT DISTINCT ON (from_account) from_account, to_account FROM ledger_fee_income_moves
              WHERE tenant_id = $1 ORDER BY from_account, moved_at DESC) m ON m.from_account = e.account_id
      WHERE e.tenant_id = $1 AND e.posting_id = $2 AND e.side = 'credit'
      ORDER BY e.leg`,
    [tenantId, postingId],
  );
  return rows.map((r) => {
    const amount = fromDb(r.amount);
    return postCmd(
      tenantId,
      'FEE',
      r.currency.trim(),
      [
        { account: r.to_account, side: 'debit', amount },
        { account: r.account_id, side: 'credit', amount },
      ],
      `fee income returned to reverse posting ${postingId} (booked before migration 0955)`,
      { reversal_of: postingId },
      now,
    );
  });
}
