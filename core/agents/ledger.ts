/**
 * Agent money through the ledger. Each agent operation runs `ledger_apply` (the ledger's one
 * write function: balance-row locks in global order, result codes of INVARIANTS.md, the
 * DB-enforced guarantees G1–G6, outbox events) inside the same transaction as the agent
 * operation's own rows, idempotency key and audit record, so the posting and the state that
 * refers to it commit together or not at all. (The ledger's batcher runs its own transaction
 * per batch, which would split them.) Lock order stays the ledger's: agent row, then balance
 * rows (inside ledger_apply), then the audit head — the batcher takes balance rows, then the
 * audit head, so no cycle exists.
 */
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError, isErrorCode } from '../../shared/errors.ts';
import { checkMoneyMovement } from '../http/money.ts';
import type { ApplyResult, LedgerCommand } from '../ledger/batcher.ts';
import { ensureTenantLedger } from '../ledger/catalog.ts';
import { openAccount } from '../ledger/accounts.ts';
import { toDb, type Micro } from '../../shared/money.ts';
import { uuidv7 } from '../../shared/uuid.ts';

export interface Leg {
  account: string;
  side: 'debit' | 'credit';
  amount: Micro;
}

/** Platform accounts of a tenant and currency the agent operations post against. */
export interface PlatformAccounts {
  settlement: string;
  feeIncome: string;
  commissionExpense: string;
}

const agentAccountTypes = [
  // Commission earned by an agent, paid out into its float.
  { code: 'AGENT_COMMISSION', description: 'Agent commission wallet', debitsMustNotExceedCredits: true },
  // What commissions cost the platform: an expense account, naturally debit-balanced.
  { code: 'COMMISSION_EXPENSE', description: 'Commission expense', debitsMustNotExceedCredits: false },
];
const agentTransactionTypes = ['COMMISSION', 'COMMISSION_PAYOUT', 'FLOAT_TOPUP', 'FLOAT_REDEEM'];

/** Reference rows agent operations need beyond the ledger defaults (idempotent). */
export async function ensureAgentLedger(q: Queryable, tenantId: string): Promise<void> {
  await ensureTenantLedger(q, tenantId);
  for (const t of agentAccountTypes) {
    await q.query(
      `INSERT INTO ledger_account_types (tenant_id, code, description, debits_must_not_exceed_credits, open_via_api)
       VALUES ($1, $2, $3, $4, false) ON CONFLICT DO NOTHING`,
      [tenantId, t.code, t.description, t.debitsMustNotExceedCredits],
    );
  }
  for (const code of agentTransactionTypes) {
    await q.query(
      `INSERT INTO ledger_transaction_types (tenant_id, code, description, requires_two_factor) VALUES ($1, $2, $3, false) ON CONFLICT DO NOTHING`,
      [tenantId, code, `Agent ${code.toLowerCase().replace('_', ' ')}`],
    );
  }
}

async function platformAccount(
  q: Queryable,
  tenantId: string,
  product: string,
  ownerId: string,
  currency: string,
  now: number,
): Promise<string> {
  const { rows } = await q.query<{ id: string }>(
    `SELECT id FROM ledger_accounts WHERE tenant_id = $1 AND owner_type = 'platform' AND owner_id = $2 AND product_code = $3 AND currency = $4 ORDER BY created_at LIMIT 1`,
    [tenantId, ownerId, product, currency],
  );
  if (rows[0]) return rows[0].id;
  return (
    await openAccount(
      q,
      { tenantId, ownerType: 'platform', ownerId, productCode: product, currency, viaApi: false },
      now,
    )
  ).id;
}

/** The tenant's settlement, fee-income and commission-expense accounts (opened on first use). */
export async function platformAccounts(
  q: Queryable,
  tenantId: string,
  currency: string,
  now: number,
): Promise<PlatformAccounts> {
  await ensureAgentLedger(q, tenantId);
  return {
    // Same owner id as the ledger's demo seed, so the seeded settlement account is reused.
    settlement: await platformAccount(q, tenantId, 'SETTLEMENT', `settlement-${currency}`, currency, now),
    feeIncome: await platformAccount(q, tenantId, 'FEE_INCOME', `fee-income-${currency}`, currency, now),
    commissionExpense: await platformAccount(
      q,
      tenantId,
      'COMMISSION_EXPENSE',
      `commission-expense-${currency}`,
      currency,
      now,
    ),
  };
}

/** Open a customer's main wallet, or return the existing one. */
export async function walletOf(
  q: Queryable,
  tenantId: string,
  customerId: string,
  currency: string,
  now: number,
): Promise<string> {
  const { rows } = await q.query<{ id: string }>(
    `SELECT id FROM ledger_accounts WHERE tenant_id = $1 AND owner_type = 'customer' AND owner_id = $2 AND product_code = 'WALLET_MAIN' AND currency = $3 AND status = 'active'
      ORDER BY created_at LIMIT 1`,
    [tenantId, customerId, currency],
  );
  if (rows[0]) return rows[0].id;
  await ensureTenantLedger(q, tenantId);
  return (
    await openAccount(
      q,
      {
        tenantId,
        ownerType: 'customer',
        ownerId: customerId,
        productCode: 'WALLET_MAIN',
        currency,
        viaApi: false,
      },
      now,
    )
  ).id;
}

function unwrap(r: unknown): ApplyResult {
  if (typeof r !== 'object' || r === null || typeof (r as { ok?: unknown }).ok !== 'boolean')
    throw new Error('ledger_apply answered an unexpected result');
  return r as ApplyResult;
}

/** Run commands through ledger_apply in the caller's transaction; a refused command throws its AppError. */
export async function apply(q: Queryable, cmds: LedgerCommand[]): Promise<ApplyResult[]> {
  checkMoneyMovement(cmds.map((c) => c.op));
  const { rows } = await q.query<{ r: unknown }>('SELECT ledger_apply($1::jsonb) AS r', [
    JSON.stringify(cmds),
  ]);
  const results = rows[0]?.r;
  if (!Array.isArray(results) || results.length !== cmds.length)
    throw new Error('ledger_apply answered an unexpected shape');
  const out = results.map(unwrap);
  for (const r of out) {
    if (!r.ok)
      throw new AppError(
        isErrorCode(r.code) ? r.code : 'INTERNAL',
        isErrorCode(r.code) ? r.message : 'internal error',
      );
  }
  return out;
}

/** A post command for balanced legs (zero legs dropped); the caller checks balance by construction. */
export function postCmd(
  tenantId: string,
  type: string,
  currency: string,
  legs: Leg[],
  description: string,
  metadata: Record<string, unknown>,
  now: number,
): LedgerCommand {
  const live = legs.filter((l) => l.amount > 0n);
  let net = 0n;
  for (const l of live) net += l.side === 'debit' ? l.amount : -l.amount;
  if (net !== 0n || live.length < 2) throw new Error('agent posting is not balanced');
  return {
    op: 'post',
    tenant: tenantId,
    id: uuidv7(now),
    transaction_id: uuidv7(now),
    type,
    currency,
    entries: live.map((l) => ({ account_id: l.account, side: l.side, amount: toDb(l.amount), currency })),
    description,
    metadata,
  };
}

export function reverseCmd(
  tenantId: string,
  postingId: string,
  description: string,
  now: number,
): LedgerCommand {
  return {
    op: 'reverse',
    tenant: tenantId,
    id: uuidv7(now),
    transaction_id: uuidv7(now),
    posting_id: postingId,
    description,
  };
}
