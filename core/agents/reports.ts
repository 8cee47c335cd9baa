/**
 * End-of-day report and close (issue 9 item 9; FLOAT.md "End of day"). A close freezes the
 * agent's period (the day after the previous close through the closed date): transaction
 * counts and amounts by type, and for the float and commission wallets the opening balance
 * (the previous close's closing), every ledger movement since the previous close's watermark
 * (the ledger's entry sequence) by posting type, and the closing balance read from the ledger. Opening +
 * movements = closing is checked, not assumed (`reconciled`). Once closed, the summary is
 * stored and immutable (trigger), and agent_txns_day_open refuses new or backdated rows.
 */
import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { fromDb, type Micro } from '../../shared/money.ts';
import { movementsByType } from '../ledger/reads.ts';
import { balanceOf, wire } from './books.ts';
import { auditAgent, businessDate, type AgentCaller } from './context.ts';
import { lockAgent, type AgentRow } from './txns.ts';

/** What a later close reads back from an earlier one. */
const FrozenSchema = Type.Object({
  float: Type.Object({ closing: Type.String(), ledgerSeq: Type.String() }),
  commissions: Type.Object({ closing: Type.String(), ledgerSeq: Type.String() }),
});
const Frozen = TypeCompiler.Compile(FrozenSchema);
type FrozenT = Static<typeof FrozenSchema>;

interface CloseRow {
  business_date: string;
  summary: unknown;
  closed_at: Date;
}

export async function agentRow(q: Queryable, tenantId: string, agentId: string): Promise<AgentRow> {
  const { rows } = await q.query<AgentRow>(
    'SELECT id, status, currency, float_account_id, commission_account_id, txn_max_amount, day_max_amount FROM agents WHERE tenant_id = $1 AND id = $2',
    [tenantId, agentId],
  );
  if (!rows[0]) throw new AppError('FORBIDDEN', 'agent is not active');
  return rows[0];
}

/** The latest close on or before `day` (or the latest of all), and the earliest on or after it. */
async function closes(
  q: Queryable,
  tenantId: string,
  agentId: string,
  day: string,
): Promise<{ before: CloseRow | undefined; covering: CloseRow | undefined }> {
  const sel = `SELECT to_char(business_date, 'YYYY-MM-DD') AS business_date, summary, closed_at FROM agent_eod_closes WHERE tenant_id = $1 AND agent_id = $2`;
  const before = (
    await q.query<CloseRow>(`${sel} AND business_date < $3::date ORDER BY business_date DESC LIMIT 1`, [
      tenantId,
      agentId,
      day,
    ])
  ).rows[0];
  const covering = (
    await q.query<CloseRow>(`${sel} AND business_date >= $3::date ORDER BY business_date LIMIT 1`, [
      tenantId,
      agentId,
      day,
    ])
  ).rows[0];
  return { before, covering };
}

function frozen(c: CloseRow | undefined): FrozenT | undefined {
  if (!c) return undefined;
  if (!Frozen.Check(c.summary)) throw new Error('stored end-of-day summary has an unexpected shape');
  return c.summary;
}

/** One wallet over the period: opening, movements by posting type since `sinceSeq`, closing (the ledger's balance). */
async function walletPeriod(
  q: Queryable,
  tenantId: string,
  accountId: string,
  currency: string,
  opening: Micro,
  sinceSeq: string,
) {
  const rows = await movementsByType(q, tenantId, accountId, sinceSeq);
  const bal = await balanceOf(q, tenantId, accountId);
  let net = 0n;
  let seq = BigInt(sinceSeq);
  const movements = rows.map((r) => {
    const inn = fromDb(r.credits);
    const out = fromDb(r.debits);
    net += inn - out;
    if (BigInt(r.last_seq) > seq) seq = BigInt(r.last_seq);
    return { type: r.type_code, entries: r.n, in: wire(inn, currency), out: wire(out, currency) };
  });
  return {
    accountId,
    opening: wire(opening, currency),
    movements,
    closing: wire(bal.posted, currency),
    held: wire(bal.held, currency),
    ledgerSeq: seq.toString(),
    reconciled: opening + net === bal.posted,
  };
}

async function txnTotals(
  q: Queryable,
  tenantId: string,
  agentId: string,
  from: string | null,
  to: string,
  currency: string,
) {
  const { rows } = await q.query<{
    kind: string;
    state: string;
    n: number;
    amount: string;
    fee: string;
    commission: string;
  }>(
    `SELECT kind, state, count(*)::int AS n, sum(amount)::text AS amount, sum(fee)::text AS fee, sum(commission)::text AS commission FROM agent_txns
      WHERE tenant_id = $1 AND agent_id = $2 AND ($3::date IS NULL OR business_date > $3::date) AND business_date <= $4::date GROUP BY kind, state ORDER BY kind, state`,
    [tenantId, agentId, from, to],
  );
  const byType: Record<string, { count: number; amount: string; fees: string; commission: string }> = {};
  for (const k of ['CASHIN', 'CASHOUT', 'P2P'])
    byType[k] = {
      count: 0,
      amount: wire(0n, currency),
      fees: wire(0n, currency),
      commission: wire(0n, currency),
    };
  const reversed = { count: 0, amount: 0n };
  const other: Record<string, number> = { FAILED: 0, EXPIRED: 0, AWAITING_CUSTOMER: 0, INITIATED: 0 };
  let commission = 0n;
  let fees = 0n;
  for (const r of rows) {
    if (r.state === 'POSTED') {
      byType[r.kind] = {
        count: r.n,
        amount: wire(fromDb(r.amount), currency),
        fees: wire(fromDb(r.fee), currency),
        commission: wire(fromDb(r.commission), currency),
      };
      commission += fromDb(r.commission);
      fees += fromDb(r.fee);
    } else if (r.state === 'REVERSED') {
      reversed.count += r.n;
      reversed.amount += fromDb(r.amount);
    } else {
      other[r.state] = (other[r.state] ?? 0) + r.n;
    }
  }
  return {
    byType,
    reversed: { count: reversed.count, amount: wire(reversed.amount, currency) },
    notPosted: other,
    fees: wire(fees, currency),
    commissionEarned: wire(commission, currency),
  };
}

/** The live summary of the open period ending `day` (or the stored one when `day` is closed). */
export async function eodSummary(
  q: Queryable,
  tenantId: string,
  agentId: string,
  day: string,
  now: number,
): Promise<Record<string, unknown>> {
  if (day > businessDate(now)) throw new AppError('DAY_NOT_STARTED', `business day ${day} has not started`);
  const agent = await agentRow(q, tenantId, agentId);
  const { before, covering } = await closes(q, tenantId, agentId, day);
  if (covering && typeof covering.summary === 'object' && covering.summary !== null)
    return { ...covering.summary, requestedDate: day };
  const prev = frozen(before);
  const cur = agent.currency;
  return {
    agentId,
    businessDate: day,
    requestedDate: day,
    periodStart: before ? nextDay(before.business_date) : null,
    periodEnd: day,
    currency: cur,
    closed: false,
    closedAt: null,
    asOf: new Date(now).toISOString(),
    transactions: await txnTotals(q, tenantId, agentId, before?.business_date ?? null, day, cur),
    float: await walletPeriod(
      q,
      tenantId,
      agent.float_account_id,
      cur,
      prev ? fromDb(prev.float.closing) : 0n,
      prev?.float.ledgerSeq ?? '0',
    ),
    commissions: await walletPeriod(
      q,
      tenantId,
      agent.commission_account_id,
      cur,
      prev ? fromDb(prev.commissions.closing) : 0n,
      prev?.commissions.ledgerSeq ?? '0',
    ),
  };
}

function nextDay(d: string): string {
  return new Date(Date.parse(`${d}T00:00:00Z`) + 86_400_000).toISOString().slice(0, 10);
}

/**
 * Close the agent's period through `day`. Locks the agent row and both wallets' balance rows
 * first, so no posting on them is in flight while the watermark is read; codes still awaiting
 * the customer expire (they could never post on a closed day).
 */
export async function closeDay(
  q: TxClient,
  c: AgentCaller,
  day: string,
  requestId: string,
  now: number,
): Promise<Record<string, unknown>> {
  if (day > businessDate(now)) throw new AppError('DAY_NOT_STARTED', `business day ${day} has not started`);
  const agent = await lockAgent(q, c.tenantId, c.agentId);
  const { covering } = await closes(q, c.tenantId, c.agentId, day);
  if (covering)
    throw new AppError(
      'DAY_ALREADY_CLOSED',
      `business day ${day} is already closed (close of ${covering.business_date})`,
    );
  // The float section runs to now: closing an earlier day under later activity would mix days.
  const { rows: later } = await q.query(
    'SELECT 1 FROM agent_txns WHERE tenant_id = $1 AND agent_id = $2 AND business_date > $3::date LIMIT 1',
    [c.tenantId, c.agentId, day],
  );
  if (later.length > 0)
    throw new AppError(
      'CONFLICT',
      `transactions after ${day} exist: close the latest business day instead (it closes every earlier one)`,
    );
  await balanceOf(q, c.tenantId, agent.float_account_id, true);
  await balanceOf(q, c.tenantId, agent.commission_account_id, true);
  const { rows: expired } = await q.query<{ id: string }>(
    `UPDATE agent_txns SET state = 'EXPIRED', failure_code = 'DAY_CLOSED', updated_at = to_timestamp($4 / 1000.0)
      WHERE tenant_id = $1 AND agent_id = $2 AND business_date <= $3::date AND state IN ('INITIATED', 'AWAITING_CUSTOMER') RETURNING id`,
    [c.tenantId, c.agentId, day, now],
  );
  const { requestedDate: _, ...live } = await eodSummary(q, c.tenantId, c.agentId, day, now);
  const summary = {
    ...live,
    closed: true,
    closedAt: new Date(now).toISOString(),
    expiredAtClose: expired.map((r) => r.id),
  };
  await q.query(
    `INSERT INTO agent_eod_closes (tenant_id, agent_id, business_date, summary, closed_at) VALUES ($1, $2, $3::date, $4::jsonb, to_timestamp($5 / 1000.0))`,
    [c.tenantId, c.agentId, day, JSON.stringify(summary), now],
  );
  await auditAgent(
    q,
    {
      tenantId: c.tenantId,
      actor: { type: 'agent', id: c.agentId },
      action: 'agent.eod.close',
      target: { type: 'agent_eod', id: `${c.agentId}:${day}` },
      attrs: { expired: expired.length },
      requestId,
    },
    now,
  );
  return summary;
}
