/**
 * The ledger reference rows and accounts agent operations need. Agent money moves through the
 * ledger's command API (core/ledger/apply.ts: `applyInTx` in the agent operation's own
 * transaction); the accounts are found and opened by core/ledger/wallets.ts, so an agent's fee
 * lands in the same tenant fee-income account as a transfer's (issue 21 item 2).
 */
import type { Queryable } from '../../shared/db/pool.ts';
import { ensureAccountTypes, ensureTenantLedger, ensureTransactionTypes } from '../ledger/catalog.ts';
import { feeIncomeAccount, platformAccount } from '../ledger/wallets.ts';

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
const agentTransactionTypes = ['COMMISSION', 'COMMISSION_PAYOUT', 'FLOAT_TOPUP', 'FLOAT_REDEEM'].map(
  (code) => ({ code, description: `Agent ${code.toLowerCase().replace('_', ' ')}` }),
);

/** Reference rows agent operations need beyond the ledger defaults (idempotent). */
export async function ensureAgentLedger(q: Queryable, tenantId: string): Promise<void> {
  await ensureTenantLedger(q, tenantId);
  await ensureAccountTypes(q, tenantId, agentAccountTypes);
  await ensureTransactionTypes(q, tenantId, agentTransactionTypes);
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
    feeIncome: await feeIncomeAccount(q, tenantId, currency, now),
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
