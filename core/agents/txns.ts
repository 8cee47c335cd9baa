/**
 * Agent transactions (issue 9 item 4); state machine in STATES.md. Every operation runs in one
 * transaction with its idempotency key (core/idempotency), the ledger postings (ledger.ts),
 * the agent_txns row and an audit record.
 */
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { checkOtp, issueOtp, otpTtlMs } from '../identity/otp.ts';
import { lookupKey, type TenantSecrets } from '../identity/secrets.ts';
import { amountOf } from '../ledger/commands.ts';
import { displayDecimals } from '../ledger/currency.ts';
import { format, fromDb, toDb, type Micro } from '../../shared/money.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import {
  actorOf,
  auditAgent,
  businessDate,
  type AgentCaller,
  type AgentDeps,
  type OpsCaller,
} from './context.ts';
import { requireCapability } from './capabilities.ts';
import { applyInTx, postCmd, reverseCmd, type Leg } from '../ledger/apply.ts';
import { feeReturnsBeforeReversal } from '../ledger/fee-income.ts';
import { openWallet } from '../ledger/wallets.ts';
import { platformAccounts } from './ledger.ts';
import { agentLimits, customerLimits, enforce, priceOf, type TxnKind } from './pricing.ts';

/** How long a customer has to authorise a cash-out or P2P with the code sent to their phone. */
export const customerCodeTtlMs = otpTtlMs;
/** Issue 9: reversal only "within a configurable window". */
export const defaultReversalWindowMs = 24 * 60 * 60_000;

export interface AgentRow {
  id: string;
  status: string;
  currency: string;
  float_account_id: string;
  commission_account_id: string;
  txn_max_amount: string | null;
  day_max_amount: string | null;
}
export interface TxnRow {
  id: string;
  kind: TxnKind;
  state: string;
  agent_id: string;
  customer_id: string;
  counterparty_id: string | null;
  currency: string;
  amount: string;
  fee: string;
  commission: string;
  business_date: string;
  posting_id: string | null;
  commission_posting_id: string | null;
  reversal_posting_id: string | null;
  failure_code: string | null;
  expires_at: Date | null;
  created_at: Date;
  updated_at: Date;
  posted_at: Date | null;
  reversed_at: Date | null;
}

export function txnView(r: TxnRow): Record<string, unknown> {
  const minor = displayDecimals(r.currency);
  return {
    id: r.id,
    kind: r.kind,
    state: r.state,
    agentId: r.agent_id,
    customerId: r.customer_id,
    counterpartyId: r.counterparty_id,
    currency: r.currency,
    amount: format(fromDb(r.amount), minor),
    fee: format(fromDb(r.fee), minor),
    commission: format(fromDb(r.commission), minor),
    businessDate: r.business_date,
    postingId: r.posting_id,
    commissionPostingId: r.commission_posting_id,
    reversalPostingId: r.reversal_posting_id,
    failureCode: r.failure_code,
    expiresAt: r.expires_at?.toISOString() ?? null,
    createdAt: r.created_at.toISOString(),
    postedAt: r.posted_at?.toISOString() ?? null,
    reversedAt: r.reversed_at?.toISOString() ?? null,
  };
}

const txnCols = `id, kind, state, agent_id, customer_id, counterparty_id, currency, amount, fee, commission, to_char(business_date, 'YYYY-MM-DD') AS business_date,
  posting_id, commission_posting_id, reversal_posting_id, failure_code, expires_at, created_at, updated_at, posted_at, reversed_at`;

export async function loadTxn(q: Queryable, tenantId: string, id: string, lock = false): Promise<TxnRow> {
  const { rows } = await q.query<TxnRow>(
    `SELECT ${txnCols} FROM agent_txns WHERE tenant_id = $1 AND id = $2${lock ? ' FOR UPDATE' : ''}`,
    [tenantId, id],
  );
  if (!rows[0]) throw new AppError('TXN_NOT_FOUND', `transaction ${id} not found`);
  return rows[0];
}

export async function lockAgent(q: Queryable, tenantId: string, agentId: string): Promise<AgentRow> {
  const { rows } = await q.query<AgentRow>(
    'SELECT id, status, currency, float_account_id, commission_account_id, txn_max_amount, day_max_amount FROM agents WHERE tenant_id = $1 AND id = $2 FOR UPDATE',
    [tenantId, agentId],
  );
  const a = rows[0];
  if (!a || a.status !== 'active') throw new AppError('FORBIDDEN', 'agent is not active');
  return a;
}

async function dayOpen(q: Queryable, tenantId: string, agentId: string, day: string): Promise<void> {
  const { rows } = await q.query(
    'SELECT 1 FROM agent_eod_closes WHERE tenant_id = $1 AND agent_id = $2 AND business_date >= $3::date',
    [tenantId, agentId, day],
  );
  if (rows.length > 0) throw new AppError('DAY_CLOSED', `business day ${day} is closed for this agent`);
}

/** The KYC'd, active customer with this phone: id and KYC level. */
export async function kycCustomer(
  q: Queryable,
  tenantId: string,
  phone: string,
  now: number,
): Promise<{ id: string; phone: string; level: number }> {
  const { rows } = await q.query<{
    id: string;
    phone_e164: string;
    level: number | null;
    status: string | null;
    expires_at: Date | null;
  }>(
    `SELECT c.id, c.phone_e164, k.level, k.status, k.expires_at FROM customers c
       LEFT JOIN kyc_profiles k ON k.tenant_id = c.tenant_id AND k.customer_id = c.id
      WHERE c.tenant_id = $1 AND c.phone_e164 = $2 AND c.status = 'active'`,
    [tenantId, phone],
  );
  const r = rows[0];
  if (!r) throw new AppError('CUSTOMER_NOT_FOUND', 'no active customer with this phone');
  if (r.level === null || r.status !== 'ACTIVE' || (r.expires_at !== null && r.expires_at.getTime() <= now))
    throw new AppError('KYC_REQUIRED', 'the customer has no active KYC record (register or re-KYC first)');
  return { id: r.id, phone: r.phone_e164, level: r.level };
}

async function usage(
  q: Queryable,
  tenantId: string,
  col: 'customer_id' | 'agent_id',
  id: string,
  kind: TxnKind | undefined,
  day: string,
): Promise<{ amount: Micro; count: number }> {
  const { rows } = await q.query<{ amount: string; n: number }>(
    `SELECT coalesce(sum(amount), 0)::text AS amount, count(*)::int AS n FROM agent_txns
      WHERE tenant_id = $1 AND ${col} = $2 AND business_date = $3::date AND state IN ('AWAITING_CUSTOMER', 'POSTED') AND ($4::text IS NULL OR kind = $4)`,
    [tenantId, id, day, kind ?? null],
  );
  return { amount: fromDb(rows[0]?.amount ?? '0'), count: rows[0]?.n ?? 0 };
}

export interface StartInput {
  customerPhone: string;
  amount: string;
  counterpartyPhone?: string | undefined;
  reference?: string | undefined;
}

/** Cash-in posts at once; cash-out and P2P wait for the customer's code (AWAITING_CUSTOMER). */
/** The capability (core/agents/capabilities.ts) each kind of transaction needs. */
const capabilityOf: Record<TxnKind, string> = {
  CASHIN: 'cashin.create',
  CASHOUT: 'cashout.create',
  P2P: 'p2p.assist',
};

/**
 * The customer's one-time code for a transaction that awaits them (cash-out, P2P), bound to the
 * transaction id and sent by SMS to the customer's phone with what it authorises.
 */
async function sendCustomerCode(
  deps: AgentDeps,
  q: Queryable,
  x: { tenantId: string; txnId: string; customer: { id: string; phone: string }; what: string; fee: Micro },
  secrets: TenantSecrets,
  t: number,
): Promise<void> {
  const code = await issueOtp(
    q,
    {
      tenantId: x.tenantId,
      phoneKey: customerCodeKey(secrets, x.tenantId, x.customer.id),
      purpose: 'stepup',
      challengeJti: x.txnId,
    },
    secrets.otp,
    t,
  );
  await deps.identity.sms.send(
    q,
    {
      tenantId: x.tenantId,
      to: x.customer.phone,
      code,
      text: `Code ${code} authorises agent to ${x.what} (fee ${format(x.fee)}). Never share it with anyone else.`,
      purpose: 'agent-txn',
    },
    t,
  );
}

export async function startTxn(
  deps: AgentDeps,
  q: TxClient,
  c: AgentCaller,
  kind: TxnKind,
  input: StartInput,
  requestId: string,
  secrets: TenantSecrets,
): Promise<TxnRow> {
  const t = deps.now();
  const day = businessDate(t);
  const agent = await lockAgent(q, c.tenantId, c.agentId);
  await requireCapability(q, c.tenantId, c.agentId, capabilityOf[kind]);
  await dayOpen(q, c.tenantId, c.agentId, day);
  const amount = amountOf(input.amount, agent.currency, 'amount');
  const customer = await kycCustomer(q, c.tenantId, input.customerPhone, t);
  const counterparty =
    kind === 'P2P' ? await kycCustomer(q, c.tenantId, input.counterpartyPhone ?? '', t) : undefined;
  if (counterparty && counterparty.id === customer.id)
    throw new AppError('VALIDATION_FAILED', 'sender and recipient must differ');
  enforce(
    await customerLimits(q, c.tenantId, kind, agent.currency, customer.level),
    amount,
    await usage(q, c.tenantId, 'customer_id', customer.id, kind, day),
    'customer',
  );
  enforce(
    agentLimits(agent.txn_max_amount, agent.day_max_amount),
    amount,
    await usage(q, c.tenantId, 'agent_id', c.agentId, undefined, day),
    'agent',
  );
  const price = await priceOf(q, c.tenantId, kind, amount, agent.currency);
  const id = uuidv7(t);
  const awaiting = kind !== 'CASHIN';
  await q.query(
    `INSERT INTO agent_txns (tenant_id, id, kind, state, agent_id, customer_id, counterparty_id, currency, amount, fee, commission, business_date, reference, expires_at, created_at, updated_at)
     VALUES ($1, $2, $3, 'INITIATED', $4, $5, $6, $7, $8, $9, $10, $11::date, $12, $13, to_timestamp($14 / 1000.0), to_timestamp($14 / 1000.0))`,
    [
      c.tenantId,
      id,
      kind,
      c.agentId,
      customer.id,
      counterparty?.id ?? null,
      agent.currency,
      toDb(amount),
      toDb(price.fee),
      toDb(price.commission),
      day,
      input.reference ?? null,
      awaiting ? new Date(t + customerCodeTtlMs) : null,
      t,
    ],
  );
  const initiated: AgentAudit = {
    tenantId: c.tenantId,
    actor: actorOf(c),
    action: `agent.txn.${kind.toLowerCase()}.initiate`,
    target: { type: 'agent_txn', id },
    attrs: { amount: toDb(amount) },
    requestId,
  };
  if (!awaiting)
    return post(deps, q, c.tenantId, await loadTxn(q, c.tenantId, id, true), agent, requestId, [initiated]);
  await auditAgent(q, initiated, t);
  const what =
    kind === 'CASHOUT'
      ? `withdraw ${input.amount} ${agent.currency}`
      : `send ${input.amount} ${agent.currency}`;
  await sendCustomerCode(
    deps,
    q,
    { tenantId: c.tenantId, txnId: id, customer, what, fee: price.fee },
    secrets,
    t,
  );
  await q.query(`UPDATE agent_txns SET state = 'AWAITING_CUSTOMER' WHERE tenant_id = $1 AND id = $2`, [
    c.tenantId,
    id,
  ]);
  return loadTxn(q, c.tenantId, id);
}

/** Customer codes live under their own HMAC namespace, bound to the transaction id. */
function customerCodeKey(s: TenantSecrets, tenantId: string, customerId: string): Buffer {
  return lookupKey(s.lookup, 'agent-txn-code', tenantId, customerId);
}

/** The ledger legs of a transaction (main posting) and of its commission. */
async function legsOf(
  q: Queryable,
  tenantId: string,
  r: TxnRow,
  agent: AgentRow,
  now: number,
): Promise<{ main: Leg[]; commission: Leg[] }> {
  const pa = await platformAccounts(q, tenantId, r.currency, now);
  const amount = fromDb(r.amount);
  const fee = fromDb(r.fee);
  const wallet = await openWallet(q, tenantId, r.customer_id, r.currency, now);
  let main: Leg[];
  if (r.kind === 'CASHIN') {
    main = [
      { account: agent.float_account_id, side: 'debit', amount },
      { account: wallet, side: 'credit', amount },
    ];
  } else if (r.kind === 'CASHOUT') {
    main = [
      { account: wallet, side: 'debit', amount: amount + fee },
      { account: agent.float_account_id, side: 'credit', amount },
      { account: pa.feeIncome, side: 'credit', amount: fee },
    ];
  } else {
    const to = await openWallet(q, tenantId, r.counterparty_id ?? '', r.currency, now);
    main = [
      { account: wallet, side: 'debit', amount: amount + fee },
      { account: to, side: 'credit', amount },
      { account: pa.feeIncome, side: 'credit', amount: fee },
    ];
  }
  const c = fromDb(r.commission);
  const commission: Leg[] =
    c > 0n
      ? [
          { account: pa.commissionExpense, side: 'debit', amount: c },
          { account: agent.commission_account_id, side: 'credit', amount: c },
        ]
      : [];
  return { main, commission };
}

export type AgentAudit = Parameters<typeof auditAgent>[1];

/**
 * Post an AWAITING_CUSTOMER (or new cash-in) transaction; also used when the customer approves on
 * USSD. `before` are the caller's audit records of this request, appended after the ledger call:
 * the tenant's audit chain head is locked only after the balance rows, the order the ledger
 * batch takes them in (core/ledger/INVARIANTS.md "Concurrency"), so no deadlock cycle exists.
 */
export async function post(
  deps: AgentDeps,
  q: TxClient,
  tenantId: string,
  r: TxnRow,
  agent: AgentRow,
  requestId: string,
  before: AgentAudit[] = [],
): Promise<TxnRow> {
  const t = deps.now();
  const { main, commission } = await legsOf(q, tenantId, r, agent, t);
  const meta = { agent_txn_id: r.id, agent_id: r.agent_id, kind: r.kind };
  const cmds = [
    postCmd(
      tenantId,
      r.kind === 'P2P' ? 'TRANSFER' : r.kind,
      r.currency,
      main,
      `agent ${r.kind.toLowerCase()} ${r.id}`,
      meta,
      t,
    ),
  ];
  if (commission.length > 0)
    cmds.push(
      postCmd(tenantId, 'COMMISSION', r.currency, commission, `agent commission for ${r.id}`, meta, t),
    );
  await applyInTx(q, cmds);
  const postingId = String(cmds[0]?.id);
  const commissionId = cmds[1] ? String(cmds[1].id) : null;
  await q.query(
    `UPDATE agent_txns SET state = 'POSTED', posting_id = $3, commission_posting_id = $4, posted_at = to_timestamp($5 / 1000.0), updated_at = to_timestamp($5 / 1000.0)
      WHERE tenant_id = $1 AND id = $2`,
    [tenantId, r.id, postingId, commissionId, t],
  );
  if (commissionId) {
    await q.query(
      `INSERT INTO agent_commissions (tenant_id, id, agent_id, txn_id, kind, amount, currency, state, created_at) VALUES ($1, $2, $3, $4, 'ACCRUAL', $5, $6, 'ACCRUED', to_timestamp($7 / 1000.0))`,
      [tenantId, uuidv7(t), r.agent_id, r.id, r.commission, r.currency, t],
    );
  }
  for (const a of before) await auditAgent(q, a, t);
  await auditAgent(
    q,
    {
      tenantId,
      actor: { type: 'agent', id: r.agent_id },
      action: 'agent.txn.post',
      target: { type: 'agent_txn', id: r.id },
      attrs: { posting_id: postingId, kind: r.kind },
      requestId,
    },
    t,
  );
  return loadTxn(q, tenantId, r.id);
}

export type AuthorizeOutcome = { ok: true; txn: TxnRow } | { ok: false; error: AppError };

/**
 * The agent enters the customer's code. A wrong code counts an attempt (committed: the caller
 * must not roll it back); the last allowed wrong guess fails the transaction. Expired → EXPIRED.
 */
export async function authorizeTxn(
  deps: AgentDeps,
  q: TxClient,
  c: AgentCaller,
  txnId: string,
  code: string,
  requestId: string,
  secrets: TenantSecrets,
): Promise<AuthorizeOutcome> {
  const t = deps.now();
  const agent = await lockAgent(q, c.tenantId, c.agentId);
  const r = await loadTxn(q, c.tenantId, txnId, true);
  if (r.agent_id !== c.agentId) throw new AppError('TXN_NOT_FOUND', `transaction ${txnId} not found`);
  if (r.state !== 'AWAITING_CUSTOMER') throw new AppError('TXN_NOT_AWAITING', `transaction is ${r.state}`);
  const fail = async (
    state: 'FAILED' | 'EXPIRED',
    why: string,
    error: AppError,
  ): Promise<AuthorizeOutcome> => {
    await q.query(
      `UPDATE agent_txns SET state = $3, failure_code = $4, updated_at = to_timestamp($5 / 1000.0) WHERE tenant_id = $1 AND id = $2`,
      [c.tenantId, r.id, state, why, t],
    );
    await auditAgent(
      q,
      {
        tenantId: c.tenantId,
        actor: actorOf(c),
        action: 'agent.txn.fail',
        target: { type: 'agent_txn', id: r.id },
        attrs: { state, why },
        requestId,
        allow: false,
      },
      t,
    );
    return { ok: false, error };
  };
  if (r.expires_at && r.expires_at.getTime() <= t)
    return fail(
      'EXPIRED',
      'CODE_EXPIRED',
      new AppError('TXN_EXPIRED', 'the customer code expired; start a new transaction'),
    );
  await dayOpen(q, c.tenantId, c.agentId, r.business_date);
  const ok = await checkOtp(
    q,
    {
      tenantId: c.tenantId,
      phoneKey: customerCodeKey(secrets, c.tenantId, r.customer_id),
      purpose: 'stepup',
      challengeJti: r.id,
    },
    code,
    secrets.otp,
    t,
  );
  if (!ok) {
    const { rows } = await q.query<{ attempts: number }>(
      `UPDATE agent_txns SET attempts = attempts + 1 WHERE tenant_id = $1 AND id = $2 RETURNING attempts`,
      [c.tenantId, r.id],
    );
    const bad = new AppError('CUSTOMER_CODE_INVALID', 'the customer code is wrong, expired or used');
    if ((rows[0]?.attempts ?? 0) >= 5) return fail('FAILED', 'TOO_MANY_CODE_ATTEMPTS', bad);
    await auditAgent(
      q,
      {
        tenantId: c.tenantId,
        actor: actorOf(c),
        action: 'agent.txn.authorize',
        target: { type: 'agent_txn', id: r.id },
        attrs: { outcome: 'bad_code' },
        requestId,
        allow: false,
      },
      t,
    );
    return { ok: false, error: bad };
  }
  await q.query('SAVEPOINT agent_post');
  try {
    return { ok: true, txn: await post(deps, q, c.tenantId, r, agent, requestId) };
  } catch (err) {
    if (!(err instanceof AppError) || err.status >= 500) throw err;
    await q.query('ROLLBACK TO SAVEPOINT agent_post');
    return fail('FAILED', err.code, err);
  }
}

/** Reverse a POSTED transaction: linked reversing posting(s), commission clawed back. */
export async function reverseTxn(
  deps: AgentDeps,
  q: TxClient,
  c: AgentCaller | OpsCaller,
  txnId: string,
  requestId: string,
  windowMs = defaultReversalWindowMs,
): Promise<TxnRow> {
  const t = deps.now();
  const r0 = await loadTxn(q, c.tenantId, txnId);
  if (c.kind === 'agent' && r0.agent_id !== c.agentId)
    throw new AppError('TXN_NOT_FOUND', `transaction ${txnId} not found`);
  await lockAgent(q, c.tenantId, r0.agent_id);
  const r = await loadTxn(q, c.tenantId, txnId, true);
  if (r.state === 'REVERSED') throw new AppError('TXN_ALREADY_REVERSED', 'transaction is already reversed');
  if (r.state !== 'POSTED' || !r.posting_id)
    throw new AppError('TXN_NOT_REVERSIBLE', `a ${r.state} transaction cannot be reversed`);
  if (!r.posted_at || t - r.posted_at.getTime() > windowMs)
    throw new AppError('REVERSAL_WINDOW_CLOSED', 'the reversal window has passed');
  const reversal = reverseCmd(
    c.tenantId,
    r.posting_id,
    `reversal of agent ${r.kind.toLowerCase()} ${r.id}`,
    t,
  );
  // A fee booked to the platform fee account before migration 0955 was moved to the tenant's: it is returned first.
  const cmds = [...(await feeReturnsBeforeReversal(q, c.tenantId, r.posting_id, t)), reversal];
  const { rows: acc } = await q.query<{ id: string; state: string }>(
    `SELECT id, state FROM agent_commissions WHERE tenant_id = $1 AND txn_id = $2 AND kind = 'ACCRUAL' FOR UPDATE`,
    [c.tenantId, r.id],
  );
  const accrual = acc[0];
  // Unpaid commission: reverse its posting. Paid: a negative accrual nets it off the next payout.
  if (accrual?.state === 'ACCRUED' && r.commission_posting_id)
    cmds.push(reverseCmd(c.tenantId, r.commission_posting_id, `commission clawback ${r.id}`, t));
  await applyInTx(q, cmds);
  if (accrual?.state === 'ACCRUED') {
    await q.query(`UPDATE agent_commissions SET state = 'CLAWED_BACK' WHERE tenant_id = $1 AND id = $2`, [
      c.tenantId,
      accrual.id,
    ]);
  } else if (accrual) {
    await q.query(
      `INSERT INTO agent_commissions (tenant_id, id, agent_id, txn_id, kind, amount, currency, state, created_at) VALUES ($1, $2, $3, $4, 'CLAWBACK', -$5::numeric, $6, 'ACCRUED', to_timestamp($7 / 1000.0))`,
      [c.tenantId, uuidv7(t), r.agent_id, r.id, r.commission, r.currency, t],
    );
  }
  await q.query(
    `UPDATE agent_txns SET state = 'REVERSED', reversal_posting_id = $3, reversed_at = to_timestamp($4 / 1000.0), reversed_by = $5, updated_at = to_timestamp($4 / 1000.0)
      WHERE tenant_id = $1 AND id = $2`,
    [c.tenantId, r.id, String(reversal.id), t, `${actorOf(c).type}:${actorOf(c).id}`],
  );
  await auditAgent(
    q,
    {
      tenantId: c.tenantId,
      actor: actorOf(c),
      action: 'agent.txn.reverse',
      target: { type: 'agent_txn', id: r.id },
      attrs: { reversal_posting_id: String(reversal.id), clawback: accrual?.state ?? 'none' },
      requestId,
    },
    t,
  );
  return loadTxn(q, c.tenantId, r.id);
}
