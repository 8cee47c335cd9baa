/**
 * The customer USSD menu (POST /v1/ussd/session; issue 9 item 11):
 *   1 balance: PIN → END balance
 *   2 send money: recipient phone → amount → PIN → END (one ledger posting, fee from the schedule)
 *   3 approve a cash-out an agent started: pick one → PIN → END (the agent txn is POSTED)
 *   4 mini statement: PIN → END last five wallet entries
 * Each level validates its answer; anything unexpected ends the session with a message.
 */
import type { Queryable, TxClient } from '../../../shared/db/pool.ts';
import { AppError } from '../../../shared/errors.ts';
import { fromDb, toDb } from '../../../shared/money.ts';
import { uuidv7 } from '../../../shared/uuid.ts';
import { auditAgent, businessDate, type AgentDeps, type AnyCtx } from '../context.ts';
import { applyInTx, postCmd } from '../../ledger/apply.ts';
import { amountsOf, recentEntries } from '../../ledger/reads.ts';
import { openWallet } from '../../ledger/wallets.ts';
import { platformAccounts } from '../ledger.ts';
import { customerLimits, enforce, priceOf } from '../pricing.ts';
import { kycCustomer, loadTxn, lockAgent, post } from '../txns.ts';
import { amountTyped, baseCurrency, customerWallet, money, once } from './common.ts';
import { heldPinRefusal, verifyUssdPin } from './pin.ts';
import { con, end, invalidChoice, isPin, messageOf, phoneOf, type UssdRequest } from './protocol.ts';

export const customerRoute = '/v1/ussd/session';
const mainMenu = con('Welcome\n1. Balance\n2. Send money\n3. Approve cash-out\n4. Mini statement');
const pinPrompt = con('Enter your PIN');
const badPin = end('Wrong PIN.');
const pinFormat = end('A PIN is 4 to 6 digits.');
/** Cash-outs listed for approval (one USSD screen). */
const maxPendingShown = 5;

interface Customer {
  id: string;
  phone: string;
  stored: { hash: Buffer; salt: Buffer; kdfVersion: number } | undefined;
}

async function customerByPhone(q: Queryable, tenantId: string, phone: string): Promise<Customer | undefined> {
  const { rows } = await q.query<{
    id: string;
    pin_hash: Buffer | null;
    pin_salt: Buffer | null;
    kdf_version: number | null;
  }>(
    `SELECT c.id, cr.pin_hash, cr.pin_salt, cr.kdf_version FROM customers c
       LEFT JOIN credentials cr ON cr.tenant_id = c.tenant_id AND cr.customer_id = c.id
      WHERE c.tenant_id = $1 AND c.phone_e164 = $2 AND c.status = 'active'`,
    [tenantId, phone],
  );
  const r = rows[0];
  if (!r) return undefined;
  const stored =
    r.pin_hash && r.pin_salt && r.kdf_version !== null
      ? { hash: r.pin_hash, salt: r.pin_salt, kdfVersion: r.kdf_version }
      : undefined;
  return { id: r.id, phone, stored };
}

interface Pending {
  id: string;
  amount: string;
  fee: string;
  currency: string;
  code: string;
}

async function pendingCashouts(
  q: Queryable,
  tenantId: string,
  customerId: string,
  now: number,
): Promise<Pending[]> {
  // Oldest first, so a cash-out started mid-session is appended and the numbers shown stay put.
  const { rows } = await q.query<Pending>(
    `SELECT t.id, t.amount, t.fee, t.currency, a.code FROM agent_txns t JOIN agents a ON a.tenant_id = t.tenant_id AND a.id = t.agent_id
      WHERE t.tenant_id = $1 AND t.customer_id = $2 AND t.kind = 'CASHOUT' AND t.state = 'AWAITING_CUSTOMER' AND t.expires_at > to_timestamp($3 / 1000.0)
      ORDER BY t.created_at, t.id LIMIT $4`,
    [tenantId, customerId, now, maxPendingShown],
  );
  return rows;
}

/** DD/MM of an entry's time in UTC (a statement line's date). */
const dayMonth = (d: Date): string =>
  `${String(d.getUTCDate()).padStart(2, '0')}/${String(d.getUTCMonth() + 1).padStart(2, '0')}`;

async function statement(q: Queryable, tenantId: string, c: Customer): Promise<string> {
  const w = await customerWallet(q, tenantId, c.id);
  if (!w) return end('No transactions yet.');
  const rows = await recentEntries(q, tenantId, w.id, 5);
  if (rows.length === 0) return end('No transactions yet.');
  return end(
    `Last ${rows.length}:\n${rows.map((r) => `${dayMonth(r.createdAt)} ${r.side === 'credit' ? '+' : '-'}${money(r.amount, w.currency)}`).join('\n')}`,
  );
}

/** Customer → customer through the ledger: limits by KYC level, fee from the schedule, one posting. */
async function sendMoney(
  deps: AgentDeps,
  q: TxClient,
  tenantId: string,
  c: Customer,
  to: string,
  amountText: string,
  form: UssdRequest,
  requestId: string,
): Promise<string> {
  const t = deps.now();
  const day = businessDate(t);
  const currency = await baseCurrency(q, tenantId);
  const amount = amountTyped(amountText, currency);
  if (amount === undefined) return end('Invalid amount.');
  const sender = await kycCustomer(q, tenantId, c.phone, t);
  const recipient = await kycCustomer(q, tenantId, to, t);
  if (recipient.id === sender.id) return end('You cannot send money to yourself.');
  const { rows } = await q.query<{ amount: string; n: number }>(
    `SELECT coalesce(sum(amount), 0)::text AS amount, count(*)::int AS n FROM ussd_transfers WHERE tenant_id = $1 AND customer_id = $2 AND business_date = $3::date`,
    [tenantId, sender.id, day],
  );
  enforce(
    await customerLimits(q, tenantId, 'P2P', currency, sender.level),
    amount,
    { amount: fromDb(rows[0]?.amount ?? '0'), count: rows[0]?.n ?? 0 },
    'customer',
  );
  const { fee } = await priceOf(q, tenantId, 'P2P', amount, currency);
  const pa = await platformAccounts(q, tenantId, currency, t);
  const from = await openWallet(q, tenantId, sender.id, currency, t);
  const into = await openWallet(q, tenantId, recipient.id, currency, t);
  const id = uuidv7(t);
  const cmd = postCmd(
    tenantId,
    'TRANSFER',
    currency,
    [
      { account: from, side: 'debit', amount: amount + fee },
      { account: into, side: 'credit', amount },
      { account: pa.feeIncome, side: 'credit', amount: fee },
    ],
    `ussd transfer ${id}`,
    { ussd_transfer_id: id, channel: 'ussd' },
    t,
  );
  await applyInTx(q, [cmd]);
  await q.query(
    `INSERT INTO ussd_transfers (tenant_id, id, ussd_session, customer_id, recipient_id, currency, amount, fee, business_date, posting_id, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::date, $10, to_timestamp($11 / 1000.0))`,
    [
      tenantId,
      id,
      form.sessionId,
      sender.id,
      recipient.id,
      currency,
      toDb(amount),
      toDb(fee),
      day,
      String(cmd.id),
      t,
    ],
  );
  await auditAgent(
    q,
    {
      tenantId,
      actor: { type: 'customer', id: sender.id },
      action: 'ussd.transfer',
      target: { type: 'ussd_transfer', id },
      attrs: { amount: toDb(amount), fee: toDb(fee), posting_id: String(cmd.id) },
      requestId,
    },
    t,
  );
  return end(`Sent ${money(amount, currency)} to ${to}. Fee ${money(fee, currency)}. Ref ${id.slice(-8)}`);
}

/** The customer approves an agent's cash-out on their own phone: the same posting as the agent entering their code. */
async function approveCashout(
  deps: AgentDeps,
  q: TxClient,
  tenantId: string,
  c: Customer,
  txnId: string,
  requestId: string,
): Promise<string> {
  const t = deps.now();
  const r0 = await loadTxn(q, tenantId, txnId);
  if (r0.customer_id !== c.id || r0.kind !== 'CASHOUT') throw new AppError('TXN_NOT_FOUND', 'not found');
  const agent = await lockAgent(q, tenantId, r0.agent_id);
  const r = await loadTxn(q, tenantId, txnId, true);
  if (r.state !== 'AWAITING_CUSTOMER') throw new AppError('TXN_NOT_AWAITING', `transaction is ${r.state}`);
  const fail = async (state: 'FAILED' | 'EXPIRED', why: string): Promise<void> => {
    await q.query(
      'UPDATE agent_txns SET state = $3, failure_code = $4, updated_at = to_timestamp($5 / 1000.0) WHERE tenant_id = $1 AND id = $2',
      [tenantId, r.id, state, why, t],
    );
    await auditAgent(
      q,
      {
        tenantId,
        actor: { type: 'customer', id: c.id },
        action: 'agent.txn.fail',
        target: { type: 'agent_txn', id: r.id },
        attrs: { state, why, channel: 'ussd' },
        requestId,
        allow: false,
      },
      t,
    );
  };
  if (r.expires_at && r.expires_at.getTime() <= t) {
    await fail('EXPIRED', 'CODE_EXPIRED');
    return end('This cash-out request has expired.');
  }
  const approved = {
    tenantId,
    actor: { type: 'customer', id: c.id },
    action: 'agent.txn.authorize',
    target: { type: 'agent_txn', id: r.id },
    attrs: { outcome: 'approved', channel: 'ussd' },
    requestId,
  };
  await q.query('SAVEPOINT ussd_cashout');
  try {
    // The approval is audited after the ledger call (balance rows before the audit head).
    await post(deps, q, tenantId, r, agent, requestId, [approved]);
  } catch (err) {
    if (!(err instanceof AppError) || err.status >= 500) throw err;
    await q.query('ROLLBACK TO SAVEPOINT ussd_cashout');
    await auditAgent(q, approved, t);
    await fail('FAILED', err.code);
    // Answered, not thrown: the FAILED state must commit with the stored answer.
    return end(messageOf(err));
  }
  const total = fromDb(r.amount) + fromDb(r.fee);
  return end(
    `Approved. ${money(total, r.currency)} taken from your wallet. Collect ${money(fromDb(r.amount), r.currency)} from the agent.`,
  );
}

export async function customerMenu(
  deps: AgentDeps,
  ctx: AnyCtx,
  tenantId: string,
  form: UssdRequest,
  answers: string[],
): Promise<string> {
  const phone = phoneOf(form.phoneNumber);
  const c = phone ? await customerByPhone(deps.db, tenantId, phone) : undefined;
  if (!c) return end('This number is not registered for mobile money.');
  const [choice, a1, a2, a3, ...rest] = answers;
  const pinOk = async (pin: string) =>
    verifyUssdPin(
      deps,
      ctx,
      { kind: 'customer', tenantId, id: c.id, handle: c.phone, stored: c.stored },
      pin,
      form.sessionId,
    );
  /** A PIN that moves money: wrong, or right but held after a reset (issue 13 item 1), answers the END; undefined proceeds. */
  const moneyPinRefusal = async (pin: string, operation: string) =>
    (await pinOk(pin)) ? heldPinRefusal(deps, ctx, tenantId, c.id, operation, form.sessionId) : badPin;
  if (choice === undefined) return mainMenu;
  if (rest.length > 0) return invalidChoice;
  if (choice === '1' || choice === '4') {
    if (a1 === undefined) return pinPrompt;
    if (a2 !== undefined) return invalidChoice;
    if (!isPin(a1)) return pinFormat;
    if (!(await pinOk(a1))) return badPin;
    if (choice === '4') return statement(deps.db, tenantId, c);
    const w = await customerWallet(deps.db, tenantId, c.id);
    const currency = w?.currency ?? (await baseCurrency(deps.db, tenantId));
    const a = w ? await amountsOf(deps.db, tenantId, w.id) : undefined;
    return end(`Your balance is ${money(a ? a.posted - a.held : 0n, currency)}`);
  }
  if (choice === '2') {
    if (a1 === undefined) return con('Enter recipient phone number');
    const to = phoneOf(a1);
    if (!to) return end('Invalid phone number.');
    const currency = await baseCurrency(deps.db, tenantId);
    if (a2 === undefined) return con(`Enter amount (${currency})`);
    const amount = amountTyped(a2, currency);
    if (amount === undefined) return end('Invalid amount.');
    if (a3 === undefined) return con(`Send ${money(amount, currency)} to ${to}?\nEnter PIN to confirm`);
    if (!isPin(a3)) return pinFormat;
    const refused = await moneyPinRefusal(a3, 'transfer');
    if (refused) return refused;
    return once(deps, ctx, tenantId, customerRoute, form, (q) =>
      sendMoney(deps, q, tenantId, c, to, a2, form, ctx.requestId),
    );
  }
  if (choice === '3') {
    const pending = await pendingCashouts(deps.db, tenantId, c.id, deps.now());
    if (a1 === undefined) {
      if (pending.length === 0) return end('No cash-out is waiting for your approval.');
      return con(
        `Approve cash-out:\n${pending.map((p, i) => `${i + 1}. ${money(fromDb(p.amount), p.currency)} agent ${p.code}`).join('\n')}`,
      );
    }
    const pick = /^[1-9]$/.test(a1) ? pending[Number(a1) - 1] : undefined;
    if (!pick) return end('Invalid choice. No such cash-out.');
    if (a2 === undefined)
      return con(
        `Withdraw ${money(fromDb(pick.amount), pick.currency)} (fee ${money(fromDb(pick.fee), pick.currency)}) at agent ${pick.code}?\nEnter PIN to approve`,
      );
    if (a3 !== undefined) return invalidChoice;
    if (!isPin(a2)) return pinFormat;
    const refused = await moneyPinRefusal(a2, 'cashout_approve');
    if (refused) return refused;
    return once(deps, ctx, tenantId, customerRoute, form, (q) =>
      approveCashout(deps, q, tenantId, c, pick.id, ctx.requestId),
    );
  }
  return invalidChoice;
}
