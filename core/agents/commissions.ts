/**
 * Agent commissions (issue 9 item 7). Accruals (+) and clawbacks (−) are rows of
 * agent_commissions written by txns.ts; a payout preview names exactly the ACCRUED rows it
 * would pay and the net amount; accepting it moves that amount in one posting
 *   debit  agent commission wallet   Σ accruals
 *   credit agent float               net (Σ accruals − Σ clawbacks)
 *   credit commission expense        Σ clawbacks (commission already paid, clawed back)
 * and marks the rows PAID with the payout id. A preview pays at most once: the payout row is
 * locked and must be PREVIEWED, every named row must still be ACCRUED (else PAYOUT_STALE), and
 * the agent_commissions_paid_final trigger refuses any change to a PAID row.
 */
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { fromDb, toDb, type Micro } from '../../shared/money.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { requireDayOpen, wire } from './books.ts';
import { withLegacyName, type PageRequest } from '../http/cursor.ts';
import { actorOf, auditAgent, businessDate, type AgentCaller } from './context.ts';
import { applyInTx, postCmd } from '../ledger/apply.ts';
import { platformAccounts } from './ledger.ts';
import { lockAgent } from './txns.ts';

/** A preview older than this is stale: accrued rows may have changed since the agent saw it. */
export const payoutPreviewTtlMs = 15 * 60_000;

interface EntryRow {
  id: string;
  txn_id: string;
  kind: string;
  amount: string;
  currency: string;
  state: string;
  payout_id: string | null;
  created_at: Date;
}
interface PayoutRow {
  id: string;
  agent_id: string;
  amount: string;
  currency: string;
  entry_ids: string[];
  state: string;
  posting_id: string | null;
  created_at: Date;
  accepted_at: Date | null;
}

const entryView = (r: EntryRow) => ({
  id: r.id,
  txnId: r.txn_id,
  kind: r.kind,
  amount: wire(fromDb(r.amount), r.currency),
  currency: r.currency,
  state: r.state,
  payoutId: r.payout_id,
  createdAt: r.created_at.toISOString(),
});

function payoutView(p: PayoutRow, entries: EntryRow[]): Record<string, unknown> {
  return {
    payoutId: p.id,
    agentId: p.agent_id,
    state: p.state,
    amount: wire(fromDb(p.amount), p.currency),
    currency: p.currency,
    postingId: p.posting_id,
    createdAt: p.created_at.toISOString(),
    expiresAt: new Date(p.created_at.getTime() + payoutPreviewTtlMs).toISOString(),
    acceptedAt: p.accepted_at?.toISOString() ?? null,
    entries: entries.map(entryView),
  };
}

/** Agents see only their own commissions. */
export function ownAgent(c: AgentCaller, agentId: string): void {
  if (agentId !== c.agentId) throw new AppError('FORBIDDEN', 'an agent sees only its own commissions');
}

export async function listCommissions(
  q: Queryable,
  c: AgentCaller,
  state: string | undefined,
  page: PageRequest,
): Promise<Record<string, unknown>> {
  const after = page.after?.[0];
  const { rows } = await q.query<EntryRow>(
    `SELECT id, txn_id, kind, amount, currency, state, payout_id, created_at FROM agent_commissions
      WHERE tenant_id = $1 AND agent_id = $2 AND ($3::text IS NULL OR state = $3) AND ($4::uuid IS NULL OR id < $4)
      ORDER BY id DESC LIMIT $5`,
    [c.tenantId, c.agentId, state ?? null, after ?? null, page.limit + 1],
  );
  const { rows: sums } = await q.query<{ state: string; total: string; currency: string }>(
    `SELECT state, currency, sum(amount)::text AS total FROM agent_commissions WHERE tenant_id = $1 AND agent_id = $2 GROUP BY state, currency`,
    [c.tenantId, c.agentId],
  );
  const { items, next_cursor } = page.finish(rows, (r) => [r.id]);
  const totals: Record<string, string> = {};
  for (const s of sums) totals[s.state.toLowerCase()] = wire(fromDb(s.total), s.currency);
  return withLegacyName({ items: items.map(entryView), totals, next_cursor });
}

async function entries(q: Queryable, tenantId: string, ids: string[], lock: boolean): Promise<EntryRow[]> {
  const { rows } = await q.query<EntryRow>(
    `SELECT id, txn_id, kind, amount, currency, state, payout_id, created_at FROM agent_commissions WHERE tenant_id = $1 AND id = ANY($2::uuid[]) ORDER BY id${lock ? ' FOR UPDATE' : ''}`,
    [tenantId, ids],
  );
  return rows;
}

/** Name every ACCRUED row of the agent and the net amount; 422 NOTHING_TO_PAY when the net is not positive. */
export async function previewPayout(
  q: TxClient,
  c: AgentCaller,
  requestId: string,
  now: number,
): Promise<Record<string, unknown>> {
  const agent = await lockAgent(q, c.tenantId, c.agentId);
  const { rows } = await q.query<EntryRow>(
    `SELECT id, txn_id, kind, amount, currency, state, payout_id, created_at FROM agent_commissions
      WHERE tenant_id = $1 AND agent_id = $2 AND state = 'ACCRUED' AND currency = $3 ORDER BY id`,
    [c.tenantId, c.agentId, agent.currency],
  );
  const net = rows.reduce((s, r) => s + fromDb(r.amount), 0n);
  if (net <= 0n)
    throw new AppError(
      'NOTHING_TO_PAY',
      `no positive accrued commission to pay (net ${wire(net, agent.currency)})`,
    );
  const id = uuidv7(now);
  await q.query(
    `INSERT INTO agent_commission_payouts (tenant_id, id, agent_id, amount, currency, entry_ids, state, created_at)
     VALUES ($1, $2, $3, $4, $5, $6::uuid[], 'PREVIEWED', to_timestamp($7 / 1000.0))`,
    [c.tenantId, id, c.agentId, toDb(net), agent.currency, rows.map((r) => r.id), now],
  );
  await auditAgent(
    q,
    {
      tenantId: c.tenantId,
      actor: actorOf(c),
      action: 'agent.commission.preview',
      target: { type: 'commission_payout', id },
      attrs: { amount: toDb(net), entries: rows.length },
      requestId,
    },
    now,
  );
  return payoutView(await loadPayout(q, c, id, false), rows);
}

async function loadPayout(q: Queryable, c: AgentCaller, id: string, lock: boolean): Promise<PayoutRow> {
  const { rows } = await q.query<PayoutRow>(
    `SELECT id, agent_id, amount, currency, entry_ids::text[] AS entry_ids, state, posting_id, created_at, accepted_at FROM agent_commission_payouts
      WHERE tenant_id = $1 AND id = $2 AND agent_id = $3${lock ? ' FOR UPDATE' : ''}`,
    [c.tenantId, id, c.agentId],
  );
  if (!rows[0]) throw new AppError('PAYOUT_NOT_FOUND', `payout ${id} not found`);
  return rows[0];
}

/** Pay a PREVIEWED payout in one posting; a second accept is 409 PAYOUT_ALREADY_ACCEPTED. */
export async function acceptPayout(
  q: TxClient,
  c: AgentCaller,
  payoutId: string,
  requestId: string,
  now: number,
): Promise<Record<string, unknown>> {
  const agent = await lockAgent(q, c.tenantId, c.agentId);
  const p = await loadPayout(q, c, payoutId, true);
  if (p.state === 'ACCEPTED')
    throw new AppError(
      'PAYOUT_ALREADY_ACCEPTED',
      `payout ${p.id} was accepted at ${p.accepted_at?.toISOString() ?? ''}`,
    );
  if (p.state !== 'PREVIEWED') throw new AppError('PAYOUT_STALE', 'this preview is stale; ask for a new one');
  const rows = await entries(q, c.tenantId, p.entry_ids, true);
  const fresh = now - p.created_at.getTime() <= payoutPreviewTtlMs;
  if (!fresh || rows.length !== p.entry_ids.length || rows.some((r) => r.state !== 'ACCRUED')) {
    throw new AppError(
      'PAYOUT_STALE',
      'the accrued commission changed or the preview expired; ask for a new one',
    );
  }
  await requireDayOpen(q, c.tenantId, c.agentId, businessDate(now));
  let accrued: Micro = 0n;
  let clawed: Micro = 0n;
  for (const r of rows) {
    const v = fromDb(r.amount);
    if (v > 0n) accrued += v;
    else clawed -= v;
  }
  if (accrued - clawed !== fromDb(p.amount)) throw new Error('payout amount disagrees with its entries');
  const pa = await platformAccounts(q, c.tenantId, p.currency, now);
  const cmd = postCmd(
    c.tenantId,
    'COMMISSION_PAYOUT',
    p.currency,
    [
      { account: agent.commission_account_id, side: 'debit', amount: accrued },
      { account: agent.float_account_id, side: 'credit', amount: accrued - clawed },
      { account: pa.commissionExpense, side: 'credit', amount: clawed },
    ],
    `commission payout ${p.id}`,
    { payout_id: p.id, agent_id: c.agentId },
    now,
  );
  await applyInTx(q, [cmd]);
  const postingId = String(cmd.id);
  await q.query(
    `UPDATE agent_commissions SET state = 'PAID', payout_id = $3 WHERE tenant_id = $1 AND id = ANY($2::uuid[])`,
    [c.tenantId, p.entry_ids, p.id],
  );
  await q.query(
    `UPDATE agent_commission_payouts SET state = 'ACCEPTED', posting_id = $3, accepted_at = to_timestamp($4 / 1000.0) WHERE tenant_id = $1 AND id = $2`,
    [c.tenantId, p.id, postingId, now],
  );
  // Other open previews named some of these rows: they can never be paid now.
  await q.query(
    `UPDATE agent_commission_payouts SET state = 'STALE' WHERE tenant_id = $1 AND agent_id = $2 AND state = 'PREVIEWED' AND entry_ids && $3::uuid[]`,
    [c.tenantId, c.agentId, p.entry_ids],
  );
  await auditAgent(
    q,
    {
      tenantId: c.tenantId,
      actor: actorOf(c),
      action: 'agent.commission.payout',
      target: { type: 'commission_payout', id: p.id },
      attrs: { amount: p.amount, posting_id: postingId, entries: rows.length },
      requestId,
    },
    now,
  );
  return payoutView(await loadPayout(q, c, p.id, false), await entries(q, c.tenantId, p.entry_ids, false));
}
