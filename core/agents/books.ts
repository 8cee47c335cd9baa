/**
 * What float, commissions, wallets and reports share: ledger balances of one account, the
 * open-day check for postings outside agent_txns, money on the wire, and the idempotent write
 * wrapper (one transaction per Idempotency-Key, its response stored with the effect).
 */
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { scopeOf, toReply, withIdempotency } from '../idempotency/idempotency.ts';
import type { Reply } from '../http/route.ts';
import { displayDecimals } from '../ledger/currency.ts';
import { amountsOf } from '../ledger/reads.ts';
import { format, type Micro } from '../../shared/money.ts';
import { keyOwnerOf, type AgentCaller, type AgentDeps, type AnyCtx, type OpsCaller } from './context.ts';

export interface Balance {
  posted: Micro;
  held: Micro;
  available: Micro;
}

/** Posted (credits − debits), held (pending debits) and available balance of one ledger account. */
export async function balanceOf(
  q: Queryable,
  tenantId: string,
  accountId: string,
  lock = false,
): Promise<Balance> {
  const a = await amountsOf(q, tenantId, accountId, lock);
  return { posted: a.posted, held: a.held, available: a.posted - a.held + a.overdraft };
}

/** Wire text of an amount in the currency's minor units ("12.50"). */
export function wire(micro: Micro, currency: string): string {
  return format(micro, displayDecimals(currency));
}

export function balanceView(
  b: Balance,
  currency: string,
): { balance: string; held: string; available: string } {
  return {
    balance: wire(b.posted, currency),
    held: wire(b.held, currency),
    available: wire(b.available, currency),
  };
}

/**
 * 409 DAY_CLOSED when the agent's business day `day` (or a later one) is closed. Float
 * settlements and commission payouts move the agent's float too, so a closed day refuses them
 * exactly as the agent_txns_day_open trigger refuses transactions.
 */
export async function requireDayOpen(
  q: Queryable,
  tenantId: string,
  agentId: string,
  day: string,
): Promise<void> {
  const { rows } = await q.query(
    'SELECT 1 FROM agent_eod_closes WHERE tenant_id = $1 AND agent_id = $2 AND business_date >= $3::date LIMIT 1',
    [tenantId, agentId, day],
  );
  if (rows.length > 0) throw new AppError('DAY_CLOSED', `business day ${day} is closed for this agent`);
}

/** Run `fn` once per Idempotency-Key in one transaction; its result or domain error is the stored response. */
export async function idempotent(
  deps: AgentDeps,
  ctx: AnyCtx,
  caller: AgentCaller | OpsCaller,
  fn: (q: TxClient) => Promise<{ status: number; body: unknown }>,
): Promise<Reply> {
  return toReply(await withIdempotency(deps, scopeOf(ctx, keyOwnerOf(caller)), fn));
}
