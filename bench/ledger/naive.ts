/**
 * The naive baseline the issue asks for: one interactive transaction per posting, the same
 * durable work as the batched path (idempotency key, domain transaction + history, header,
 * entries, outbox, audit), each step a round trip: SELECT ... FOR UPDATE in account order,
 * a funds check in TypeScript, the inserts (the entries trigger updates the balances).
 */
import { appendAudit } from '../../shared/audit.ts';
import type { Db } from '../../shared/db/pool.ts';
import { fromDb } from '../../shared/money.ts';
import { uuidv7 } from '../../shared/uuid.ts';

export async function naivePost(
  db: Db,
  tenant: string,
  from: string,
  to: string,
  amount: string,
  key: string,
): Promise<boolean> {
  return db.tx(async (c) => {
    const claimed = await c.query(
      `INSERT INTO idempotency_keys (tenant_id, key, principal, method, path, request_hash) VALUES ($1, $2, 'client:bench', 'POST', '/v1/core/postings', 'naive') ON CONFLICT DO NOTHING`,
      [tenant, key],
    );
    if (claimed.rowCount === 0) return false;
    const ids = [from, to].sort();
    const { rows } = await c.query<{ account_id: string; avail: string; floor: boolean }>(
      `SELECT account_id, (credits_posted - debits_posted - pending_debits + overdraft_limit)::text AS avail, debits_must_not_exceed_credits AS floor
         FROM ledger_balances WHERE tenant_id = $1 AND account_id = ANY($2::uuid[]) ORDER BY account_id FOR UPDATE`,
      [tenant, ids],
    );
    const src = rows.find((r) => r.account_id === from);
    if (!src || rows.length !== 2) throw new Error('account missing');
    const ok = !src.floor || fromDb(src.avail) >= fromDb(amount);
    let body = '{"code":"INSUFFICIENT_FUNDS"}';
    if (ok) {
      const id = uuidv7();
      const txn = uuidv7();
      await c.query(
        `INSERT INTO ledger_transactions (tenant_id, id, type_code, status) VALUES ($1, $2, 'TRANSFER', 'POSTED')`,
        [tenant, txn],
      );
      await c.query(
        `INSERT INTO ledger_transaction_history (tenant_id, transaction_id, to_status) VALUES ($1, $2, 'POSTED')`,
        [tenant, txn],
      );
      await c.query(
        `INSERT INTO ledger_postings (tenant_id, id, transaction_id, type_code, kind, currency, entry_count) VALUES ($1, $2, $3, 'TRANSFER', 'posting', 'KES', 2)`,
        [tenant, id, txn],
      );
      await c.query(
        `INSERT INTO ledger_entries (tenant_id, posting_id, leg, account_id, side, amount, currency) VALUES ($1, $2, 1, $3, 'debit', $5, 'KES'), ($1, $2, 2, $4, 'credit', $5, 'KES')`,
        [tenant, id, from, to, amount],
      );
      await c.query(
        `INSERT INTO outbox (id, tenant_id, aggregate, aggregate_id, event, payload) VALUES ($1, $2, 'posting', $3, 'posting.created', '{}')`,
        [uuidv7(), tenant, id],
      );
      body = JSON.stringify({ id });
    }
    await c.query(
      "UPDATE idempotency_keys SET response_status = $3, response_body = $4 WHERE tenant_id = $1 AND key = $2 AND principal = 'client:bench'",
      [tenant, key, ok ? 201 : 422, body],
    );
    await appendAudit(c, [
      {
        tenantId: tenant,
        actor: { type: 'client', id: 'bench' },
        action: 'posting.create',
        target: { type: 'posting', id: key },
        attrs: { outcome: ok ? 'ok' : 'INSUFFICIENT_FUNDS' },
      },
    ]);
    return ok;
  });
}
