/**
 * Float top-up and redeem instructions (issue 9 item 6; states in FLOAT.md). An agent asks,
 * ops approve, ops settle through the ledger against the tenant settlement account:
 *   TOPUP  settle: settlement → agent float (one FLOAT_TOPUP posting);
 *   REDEEM request: hold agent float → settlement; settle captures it, reject/cancel voids it.
 * Every step runs in the caller's transaction with its idempotency key, the ledger command,
 * the instruction row (history appended) and an audit record.
 */
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { amountOf } from '../ledger/commands.ts';
import { fromDb, toDb } from '../../shared/money.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { wire, requireDayOpen } from './books.ts';
import { actorOf, auditAgent, businessDate, type AgentCaller, type OpsCaller } from './context.ts';
import { requireCapability } from './capabilities.ts';
import { applyInTx, captureCmd, holdCmd, postCmd, voidCmd } from '../ledger/apply.ts';
import { holdLive, holdStates } from '../ledger/reads.ts';
import { platformAccounts } from './ledger.ts';
import { lockAgent } from './txns.ts';

export type FloatKind = 'TOPUP' | 'REDEEM';
export type FloatState = 'PENDING' | 'APPROVED' | 'SETTLED' | 'REJECTED' | 'CANCELLED';
/** A redeem's hold outlives any sane approval queue; an expired hold can only be rejected. */
export const redeemHoldMs = 30 * 24 * 60 * 60_000;

export interface InstructionRow {
  id: string;
  agent_id: string;
  kind: FloatKind;
  state: FloatState;
  amount: string;
  currency: string;
  reference: string;
  posting_id: string | null;
  hold_id: string | null;
  history: unknown;
  created_at: Date;
  updated_at: Date;
}

const cols =
  'id, agent_id, kind, state, amount, currency, reference, posting_id, hold_id, history, created_at, updated_at';

export function instructionView(r: InstructionRow): Record<string, unknown> {
  return {
    id: r.id,
    agentId: r.agent_id,
    kind: r.kind,
    state: r.state,
    amount: wire(fromDb(r.amount), r.currency),
    currency: r.currency,
    reference: r.reference,
    postingId: r.posting_id,
    holdId: r.hold_id,
    history: r.history,
    createdAt: r.created_at.toISOString(),
    updatedAt: r.updated_at.toISOString(),
  };
}

/** One instruction of the tenant; an agent sees only its own (another's is 404, not 403). */
export async function loadInstruction(
  q: Queryable,
  tenantId: string,
  id: string,
  agentId?: string,
  lock = false,
): Promise<InstructionRow> {
  const { rows } = await q.query<InstructionRow>(
    `SELECT ${cols} FROM agent_float_instructions WHERE tenant_id = $1 AND id = $2${lock ? ' FOR UPDATE' : ''}`,
    [tenantId, id],
  );
  const r = rows[0];
  if (!r || (agentId !== undefined && r.agent_id !== agentId))
    throw new AppError('FLOAT_INSTRUCTION_NOT_FOUND', `float instruction ${id} not found`);
  return r;
}

export async function listInstructions(
  q: Queryable,
  tenantId: string,
  f: { agentId?: string; state?: FloatState; limit: number },
): Promise<InstructionRow[]> {
  const { rows } = await q.query<InstructionRow>(
    `SELECT ${cols} FROM agent_float_instructions WHERE tenant_id = $1 AND ($2::uuid IS NULL OR agent_id = $2) AND ($3::text IS NULL OR state = $3)
      ORDER BY created_at DESC, id DESC LIMIT $4`,
    [tenantId, f.agentId ?? null, f.state ?? null, f.limit],
  );
  return rows;
}

async function transition(
  q: Queryable,
  tenantId: string,
  r: InstructionRow,
  to: FloatState,
  who: AgentCaller | OpsCaller,
  now: number,
  extra: { postingId?: string; reason?: string } = {},
): Promise<InstructionRow> {
  const step = {
    state: to,
    at: new Date(now).toISOString(),
    by: actorOf(who),
    ...(extra.reason ? { reason: extra.reason } : {}),
  };
  await q.query(
    `UPDATE agent_float_instructions SET state = $3, posting_id = coalesce($4, posting_id), history = history || $5::jsonb, updated_at = to_timestamp($6 / 1000.0)
      WHERE tenant_id = $1 AND id = $2`,
    [tenantId, r.id, to, extra.postingId ?? null, JSON.stringify([step]), now],
  );
  return loadInstruction(q, tenantId, r.id);
}

/** PENDING instruction of the calling agent; a redeem places its hold now (INSUFFICIENT_FUNDS if the float cannot cover it). */
export async function requestFloat(
  q: TxClient,
  c: AgentCaller,
  kind: FloatKind,
  input: { amount: string; reference?: string | undefined },
  requestId: string,
  now: number,
): Promise<InstructionRow> {
  const agent = await lockAgent(q, c.tenantId, c.agentId);
  await requireCapability(q, c.tenantId, c.agentId, kind === 'REDEEM' ? 'float.redeem' : 'float.topup');
  const amount = amountOf(input.amount, agent.currency, 'amount');
  const id = uuidv7(now);
  let holdId: string | null = null;
  if (kind === 'REDEEM') {
    const pa = await platformAccounts(q, c.tenantId, agent.currency, now);
    holdId = uuidv7(now);
    await applyInTx(q, [
      holdCmd(
        c.tenantId,
        {
          id: holdId,
          type: 'FLOAT_REDEEM',
          debit: agent.float_account_id,
          credit: pa.settlement,
          currency: agent.currency,
          amount,
          description: `float redeem ${id}`,
          metadata: { float_instruction_id: id, agent_id: c.agentId },
          expiresAt: new Date(now + redeemHoldMs),
        },
        now,
      ),
    ]);
  }
  const step = { state: 'PENDING', at: new Date(now).toISOString(), by: actorOf(c) };
  await q.query(
    `INSERT INTO agent_float_instructions (tenant_id, id, agent_id, kind, state, amount, currency, reference, hold_id, history, created_at, updated_at)
     VALUES ($1, $2, $3, $4, 'PENDING', $5, $6, $7, $8, $9::jsonb, to_timestamp($10 / 1000.0), to_timestamp($10 / 1000.0))`,
    [
      c.tenantId,
      id,
      c.agentId,
      kind,
      toDb(amount),
      agent.currency,
      input.reference ?? '',
      holdId,
      JSON.stringify([step]),
      now,
    ],
  );
  await auditAgent(
    q,
    {
      tenantId: c.tenantId,
      actor: actorOf(c),
      action: `agent.float.${kind.toLowerCase()}.request`,
      target: { type: 'float_instruction', id },
      attrs: { amount: toDb(amount), hold_id: holdId },
      requestId,
    },
    now,
  );
  return loadInstruction(q, c.tenantId, id);
}

/** Void a redeem's hold if it is still pending (an expired one has released the amount already). */
async function releaseHold(q: Queryable, tenantId: string, r: InstructionRow, now: number): Promise<void> {
  if (!r.hold_id) return;
  const [h] = await holdStates(q, tenantId, [r.hold_id]);
  if (holdLive(h, now)) await applyInTx(q, [voidCmd(tenantId, r.hold_id, now)]);
}

function expect(r: InstructionRow, from: FloatState[], what: string): void {
  if (!from.includes(r.state))
    throw new AppError('FLOAT_INSTRUCTION_STATE', `cannot ${what} a ${r.state} instruction`);
}

/** The agent withdraws its own PENDING instruction. */
export async function cancelFloat(
  q: TxClient,
  c: AgentCaller,
  id: string,
  requestId: string,
  now: number,
): Promise<InstructionRow> {
  await lockAgent(q, c.tenantId, c.agentId);
  const r = await loadInstruction(q, c.tenantId, id, c.agentId, true);
  expect(r, ['PENDING'], 'cancel');
  await releaseHold(q, c.tenantId, r, now);
  const out = await transition(q, c.tenantId, r, 'CANCELLED', c, now);
  await auditAgent(
    q,
    {
      tenantId: c.tenantId,
      actor: actorOf(c),
      action: 'agent.float.cancel',
      target: { type: 'float_instruction', id },
      requestId,
    },
    now,
  );
  return out;
}

/** Ops: PENDING → APPROVED, APPROVED → SETTLED (ledger), PENDING|APPROVED → REJECTED. */
export async function opsFloat(
  q: TxClient,
  o: OpsCaller,
  id: string,
  action: 'approve' | 'settle' | 'reject',
  reason: string | undefined,
  requestId: string,
  now: number,
): Promise<InstructionRow> {
  const r0 = await loadInstruction(q, o.tenantId, id);
  // Lock order of every agent operation: agent row, then its rows, then balances (the ledger's apply).
  const agent = await lockAgent(q, o.tenantId, r0.agent_id);
  const r = await loadInstruction(q, o.tenantId, id, undefined, true);
  let out: InstructionRow;
  let postingId: string | undefined;
  if (action === 'approve') {
    expect(r, ['PENDING'], 'approve');
    out = await transition(q, o.tenantId, r, 'APPROVED', o, now);
  } else if (action === 'reject') {
    expect(r, ['PENDING', 'APPROVED'], 'reject');
    await releaseHold(q, o.tenantId, r, now);
    out = await transition(q, o.tenantId, r, 'REJECTED', o, now, reason ? { reason } : {});
  } else {
    expect(r, ['APPROVED'], 'settle');
    await requireDayOpen(q, o.tenantId, r.agent_id, businessDate(now));
    postingId = uuidv7(now);
    if (r.kind === 'TOPUP') {
      const pa = await platformAccounts(q, o.tenantId, r.currency, now);
      const cmd = postCmd(
        o.tenantId,
        'FLOAT_TOPUP',
        r.currency,
        [
          { account: pa.settlement, side: 'debit', amount: fromDb(r.amount) },
          { account: agent.float_account_id, side: 'credit', amount: fromDb(r.amount) },
        ],
        `float top-up ${r.id}`,
        { float_instruction_id: r.id, agent_id: r.agent_id },
        now,
      );
      cmd.id = postingId;
      await applyInTx(q, [cmd]);
    } else {
      // A redeem places its hold when requested (requestFloat), so it always has one.
      if (!r.hold_id) throw new Error(`redeem instruction ${r.id} has no hold`);
      await applyInTx(q, [captureCmd(o.tenantId, r.hold_id, postingId, now)]);
    }
    out = await transition(q, o.tenantId, r, 'SETTLED', o, now, { postingId });
  }
  await auditAgent(
    q,
    {
      tenantId: o.tenantId,
      actor: actorOf(o),
      action: `agent.float.${action}`,
      target: { type: 'float_instruction', id },
      attrs: {
        kind: r.kind,
        amount: r.amount,
        ...(postingId ? { posting_id: postingId } : {}),
        ...(reason ? { reason } : {}),
      },
      requestId,
    },
    now,
  );
  return out;
}
