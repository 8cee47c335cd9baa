/**
 * Customer transfers (issue 7; SPEC 4.3). Create quotes the fee, checks limits, verifies the
 * intent signature and places holds; confirm captures them in one ledger call inside one
 * transaction, so either every leg posts or none does. Result codes are checked in this order:
 * step-up binding (403 MFA_REQUIRED, before the idempotency record: routes.ts), amount/currency
 * (400), delegated payer tuple (403 PAYER_NOT_AUTHORIZED; issue 20 item 3), step-up already
 * used (403 MFA_REQUIRED, issue 13 item 2), intent signature (403; 403 DEVICE_COOLING_OFF; 409
 * INTENT_SIGNATURE_REUSED), beneficiary (404), wallets/currency (422), limits of the wallet
 * owner and of the initiator (422), funds (422, from the ledger). The step-up and the intent are
 * used up only when the transfer commits.
 */
import { createHash } from 'node:crypto';
import { canonicalJson } from '../../shared/canonical-json.ts';
import { maskPhone } from '../../shared/masking.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { quoteFee } from '../admin/schedules.ts';
import { appendAudit } from '../../shared/audit.ts';
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { useStepUp } from '../identity/bound.ts';
import { coolingOff, verifyDeviceAssertion } from '../identity/devices.ts';
import type { Caller } from '../identity/tokens.ts';
import { amountOf, knownCurrency } from '../ledger/commands.ts';
import { format, fromDb, toDb, type Micro } from '../../shared/money.ts';
import { enqueue } from '../outbox/outbox.ts';
import {
  checkSendersLimits,
  confirmDelegation,
  delegationOf,
  noDelegation,
  notifyOwner,
  walletOwnerFor,
} from './delegation.ts';
import { transferProduct } from './limits.ts';
import type { PayerGate } from './payer.ts';
import { applyInTx, captureCmd, holdCmd } from '../ledger/apply.ts';
import { holdLive, holdStates } from '../ledger/reads.ts';
import { feeIncomeAccount, walletOf } from '../ledger/wallets.ts';

export { transferProduct };

/** How long a pending transfer's holds last before they lapse (confirm after that fails). */
export const transferHoldS = 600;

export interface TransferInput {
  amount: string;
  currency: string;
  beneficiaryId: string;
  reference: string;
  /** Issue 20 item 3: whose wallet pays, when not the caller's own (a delegated payer). */
  payerCustomerId?: string;
}

export interface RequestFacts {
  /** SPEC 4.3 rule 2 hash of this request (origOf). */
  orig: string;
  intentDeviceId: string | undefined;
  intentSignature: string | undefined;
  requestId: string;
  /** The request's Idempotency-Key, recorded with the step-up it uses up. */
  idempotencyKey?: string;
  /** The request's source address (a payer tuple's `ip_ranges` caveat); unknown refuses such a tuple. */
  ip?: string;
}

const intentReused = () =>
  new AppError(
    'INTENT_SIGNATURE_REUSED',
    'this intent signature already approved a transfer; sign the new one (give it its own reference)',
  );

/** SPEC 4.3 rule 4: what the device signs (canonical JSON, UTF-8). */
export function intentPayload(i: {
  amount: string;
  currency: string;
  beneficiaryId: string;
  orig: string;
}): string {
  return canonicalJson({
    amount: i.amount,
    currency: i.currency,
    beneficiary: i.beneficiaryId,
    orig: i.orig,
  });
}

export interface TransferRow {
  id: string;
  tenant_id: string;
  payer_customer_id: string;
  initiator_customer_id: string;
  payee_customer_id: string;
  beneficiary_id: string;
  currency: string;
  amount: string;
  fee: string;
  reference: string;
  status: string;
  amount_hold_id: string;
  fee_hold_id: string | null;
  posting_ids: string[];
  expires_at: Date;
  created_at: Date;
  confirmed_at: Date | null;
  failure_code: string | null;
  payee_phone: string;
}

const selectTransfer = `SELECT t.*, c.phone_e164 AS payee_phone FROM transfers t
  JOIN customers c ON c.tenant_id = t.tenant_id AND c.id = t.payee_customer_id`;

export function transferView(r: TransferRow, nowMs: number): Record<string, unknown> {
  const amount = fromDb(r.amount);
  const fee = fromDb(r.fee);
  const lapsed = r.status === 'PENDING' && r.expires_at.getTime() <= nowMs;
  return {
    id: r.id,
    status: lapsed ? 'EXPIRED' : r.status,
    currency: r.currency,
    amount: format(amount),
    fee: format(fee),
    total: format(amount + fee),
    beneficiary: { id: r.beneficiary_id, phone: maskPhone(r.payee_phone) },
    reference: r.reference,
    created_at: r.created_at.toISOString(),
    expires_at: r.expires_at.toISOString(),
    confirmed_at: r.confirmed_at?.toISOString() ?? null,
    posting_ids: r.posting_ids,
    // Issue 20 item 3: whose wallet paid and who asked (they differ for a delegated payer).
    payer_customer_id: r.payer_customer_id,
    initiator_customer_id: r.initiator_customer_id,
    ...(r.failure_code ? { failure_code: r.failure_code } : {}),
  };
}

/** One step of the transfer's status history (transfer_status_history). */
export async function record(
  q: Queryable,
  tenantId: string,
  id: string,
  status: string,
  reason: string | null,
  nowMs: number,
): Promise<void> {
  await q.query(
    'INSERT INTO transfer_status_history (tenant_id, transfer_id, status, reason, at) VALUES ($1, $2, $3, $4, $5)',
    [tenantId, id, status, reason, new Date(nowMs)],
  );
}

function auditEntry(
  caller: Caller,
  action: string,
  id: string,
  facts: RequestFacts,
  attrs: Record<string, unknown>,
  nowMs: number,
) {
  return {
    tenantId: caller.tenantId,
    actor: { type: 'customer', id: caller.customerId },
    action,
    target: { type: 'transfer', id },
    decision: { allow: true, aal: caller.aal, trace_id: facts.requestId },
    attrs,
    ts: new Date(nowMs),
  };
}

/**
 * Serialises the transfers of everyone whose limits this one counts against, in id order (two
 * delegated transfers locking the same pair never deadlock), without blocking other
 * transactions' foreign-key checks on the rows (FOR UPDATE would conflict with their KEY SHARE
 * locks and deadlock transfers paying each other).
 */
async function lockSenders(q: Queryable, tenantId: string, ids: string[]): Promise<void> {
  for (const id of [...new Set(ids)].sort())
    await q.query('SELECT 1 FROM customers WHERE tenant_id = $1 AND id = $2 FOR NO KEY UPDATE', [
      tenantId,
      id,
    ]);
}

/** SPEC 4.3 rule 4: the caller's device signed this very request, and the signature is unused. */
async function verifyIntent(
  q: Queryable,
  caller: Caller,
  input: TransferInput,
  facts: RequestFacts,
  nowMs: number,
): Promise<Buffer> {
  const payload = intentPayload({ ...input, orig: facts.orig });
  const signed = await verifyDeviceAssertion(
    q,
    caller.tenantId,
    caller.customerId,
    payload,
    { deviceId: facts.intentDeviceId ?? '', signature: facts.intentSignature ?? '' },
    nowMs,
  );
  if (!signed.ok && signed.reason === 'cooling_off') throw coolingOff(signed.usableFrom);
  if (!signed.ok)
    throw new AppError('INTENT_SIGNATURE_INVALID', 'the intent signature does not match this transfer');
  // One signature approves one transfer: Ed25519 signatures are deterministic, so a second
  // transfer with the very same body needs its own reference (and so its own signature).
  const intentHash = createHash('sha256').update(`${facts.intentDeviceId}|${payload}`, 'utf8').digest();
  const reused = await q.query('SELECT 1 FROM transfers WHERE tenant_id = $1 AND intent_hash = $2', [
    caller.tenantId,
    intentHash,
  ]);
  if (reused.rows.length > 0) throw intentReused();
  return intentHash;
}

interface Parties {
  owner: string;
  payee: string;
  payerAccount: string;
  payeeAccount: string;
}

/** The caller's beneficiary and both wallets in the currency (the payer's is the owner's). */
async function partiesOf(
  q: Queryable,
  caller: Caller,
  input: TransferInput,
  owner: string,
): Promise<Parties> {
  const tenantId = caller.tenantId;
  const { rows: bens } = await q.query<{ payee_customer_id: string }>(
    'SELECT payee_customer_id FROM beneficiaries WHERE tenant_id = $1 AND id = $2 AND customer_id = $3 AND removed_at IS NULL',
    [tenantId, input.beneficiaryId, caller.customerId],
  );
  const payee = bens[0]?.payee_customer_id;
  if (!payee) throw new AppError('BENEFICIARY_NOT_FOUND', 'no such beneficiary');
  if (payee === owner)
    throw new AppError('CANNOT_PAY_SELF', 'the beneficiary is the owner of the paying wallet');
  const payerAccount = await walletOf(q, tenantId, owner, input.currency);
  const payeeAccount = await walletOf(q, tenantId, payee, input.currency);
  if (!payerAccount || !payeeAccount)
    throw new AppError('CURRENCY_MISMATCH', `both wallets must hold ${input.currency}`);
  return { owner, payee, payerAccount, payeeAccount };
}

/**
 * POST /v1/transfers, inside the idempotency transaction. A delegated payer's transfer
 * (`payerCustomerId`) is checked like the caller's own (their request-bound step-up, their
 * device's intent signature, their beneficiary) plus the payer tuple (`gate`) and both
 * customers' limits; the money leaves the owner's wallet.
 */
export async function createTransfer(
  q: TxClient,
  caller: Caller,
  input: TransferInput,
  facts: RequestFacts,
  nowMs: number,
  gate: PayerGate = noDelegation,
): Promise<Record<string, unknown>> {
  knownCurrency(input.currency);
  const amount = amountOf(input.amount, input.currency, 'amount');
  if (caller.aal < 2 || caller.orig !== facts.orig)
    throw new AppError('MFA_REQUIRED', 'this transfer needs a step-up bound to this exact request');
  if (!facts.intentDeviceId || !facts.intentSignature)
    throw new AppError('INTENT_SIGNATURE_INVALID', 'x-intent-device-id and x-intent-signature are required');
  const tenantId = caller.tenantId;
  const owner = await walletOwnerFor(q, caller, input, facts, nowMs, gate);
  // Issue 13 item 2: the step-up is used up with this transfer (rolled back with it if it fails).
  await useStepUp(
    q,
    caller,
    {
      orig: facts.orig,
      action: 'transfer.create',
      ...(facts.idempotencyKey ? { idempotencyKey: facts.idempotencyKey } : {}),
    },
    nowMs,
  );
  await lockSenders(q, tenantId, [caller.customerId, owner]);
  const intentHash = await verifyIntent(q, caller, input, facts, nowMs);
  const parties = await partiesOf(q, caller, input, owner);
  const quote = await quoteFee(q, { tenantId, product: transferProduct, amount, currency: input.currency });
  await checkSendersLimits(q, caller, owner, input.currency, amount, nowMs);
  const feeAccount = quote.fee > 0n ? await feeIncomeAccount(q, tenantId, input.currency, nowMs) : undefined;
  const id = uuidv7(nowMs);
  const expiresAt = new Date(nowMs + transferHoldS * 1000);
  const holds = await placeHolds(
    q,
    { tenantId, id, parties, currency: input.currency, amount, fee: quote.fee, feeAccount, expiresAt },
    nowMs,
  );
  await insertTransfer(
    q,
    { id, caller, owner, parties, input, amount, quote, feeAccount, ...holds, facts, expiresAt, intentHash },
    nowMs,
  );
  await record(q, tenantId, id, 'PENDING', null, nowMs);
  const payloadOut = {
    transfer_id: id,
    amount: format(amount),
    fee: format(quote.fee),
    currency: input.currency,
    reference: input.reference,
    ...delegationOf(caller, owner),
  };
  await enqueue(q, {
    tenantId,
    aggregate: 'transfer',
    aggregateId: id,
    event: 'transfer.created',
    payload: payloadOut,
  });
  // The initiator is the actor; a delegated transfer names the wallet owner in attrs.
  await appendAudit(q, [
    auditEntry(
      caller,
      'transfer.create',
      id,
      facts,
      { ...payloadOut, fee_schedule: quote.scheduleId },
      nowMs,
    ),
  ]);
  const { rows } = await q.query<TransferRow>(`${selectTransfer} WHERE t.tenant_id = $1 AND t.id = $2`, [
    tenantId,
    id,
  ]);
  return transferView(rows[0] as TransferRow, nowMs);
}

/** The transfer's holds on the paying wallet: the amount toward the payee, the fee (if any) toward fee income. */
async function placeHolds(
  q: Queryable,
  t: {
    tenantId: string;
    id: string;
    parties: Parties;
    currency: string;
    amount: Micro;
    fee: Micro;
    feeAccount: string | undefined;
    expiresAt: Date;
  },
  nowMs: number,
): Promise<{ amountHold: string; feeHold: string | null }> {
  const { tenantId, id, parties, amount, feeAccount, expiresAt } = t;
  const hold = (holdId: string, credit: string, micro: Micro, what: string) =>
    holdCmd(
      tenantId,
      {
        id: holdId,
        type: 'TRANSFER',
        debit: parties.payerAccount,
        credit,
        currency: t.currency,
        amount: micro,
        description: `transfer ${id} ${what}`,
        metadata: { transfer_id: id },
        expiresAt,
      },
      nowMs,
    );
  const amountHold = uuidv7(nowMs);
  const feeHold = feeAccount ? uuidv7(nowMs) : null;
  await applyInTx(q, [
    hold(amountHold, parties.payeeAccount, amount, 'amount'),
    ...(feeAccount && feeHold ? [hold(feeHold, feeAccount, t.fee, 'fee')] : []),
  ]);
  return { amountHold, feeHold };
}

/** The PENDING transfer row; a second use of one intent signature is refused by its unique index. */
async function insertTransfer(
  q: Queryable,
  t: {
    id: string;
    caller: Caller;
    owner: string;
    parties: Parties;
    input: TransferInput;
    amount: Micro;
    quote: Awaited<ReturnType<typeof quoteFee>>;
    feeAccount: string | undefined;
    amountHold: string;
    feeHold: string | null;
    facts: RequestFacts;
    expiresAt: Date;
    intentHash: Buffer;
  },
  nowMs: number,
): Promise<void> {
  const { id, caller, owner, parties, input, amount, quote, feeAccount, amountHold, feeHold, facts } = t;
  const { expiresAt, intentHash } = t;
  const tenantId = caller.tenantId;
  await q
    .query(
      `INSERT INTO transfers (id, tenant_id, payer_customer_id, payee_customer_id, beneficiary_id, payer_account_id, payee_account_id, fee_account_id,
       currency, amount, fee, reference, status, amount_hold_id, fee_hold_id, fee_schedule_id, orig, intent_device_id, created_at, expires_at, intent_hash,
       initiator_customer_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'PENDING', $13, $14, $15, $16, $17, $18, $19, $20, $21)`,
      [
        id,
        tenantId,
        owner,
        parties.payee,
        input.beneficiaryId,
        parties.payerAccount,
        parties.payeeAccount,
        feeAccount ?? null,
        input.currency,
        toDb(amount),
        toDb(quote.fee),
        input.reference,
        amountHold,
        feeHold,
        quote.scheduleId,
        facts.orig,
        facts.intentDeviceId,
        new Date(nowMs),
        expiresAt,
        intentHash,
        caller.customerId,
      ],
    )
    .catch((err: unknown) => {
      // Two grants racing with one signature: the unique index lets one through.
      if ((err as { code?: string }).code === '23505') throw intentReused();
      throw err;
    });
}

/**
 * The transfer to confirm, locked, once the payer gate let it through. The gate locks the payer
 * tuple FOR SHARE before this locks the transfer row: the order a tuple delete takes them in
 * (the tuple, then the pending transfers it releases: ./revocation.ts), so a confirm racing a
 * delete waits for it (and then finds the tuple gone) or makes it wait (and it then finds the
 * transfer POSTED), never both capture and void, never a deadlock. Only the customer who created
 * a transfer confirms it (for a delegated one: the delegate).
 */
async function pendingToConfirm(
  q: Queryable,
  caller: Caller,
  transferId: string,
  facts: RequestFacts,
  nowMs: number,
  gate: PayerGate,
  namedPayer: string | undefined,
): Promise<TransferRow> {
  const find = async (lock: string) =>
    (
      await q.query<TransferRow>(
        `${selectTransfer} WHERE t.tenant_id = $1 AND t.id = $2 AND t.initiator_customer_id = $3 ${lock}`,
        [caller.tenantId, transferId, caller.customerId],
      )
    ).rows[0];
  const seen = await find('');
  if (!seen) throw new AppError('TRANSFER_NOT_FOUND', 'no such transfer');
  await confirmDelegation(q, caller, seen, facts, nowMs, gate, namedPayer);
  const t = await find('FOR UPDATE OF t');
  if (!t) throw new AppError('TRANSFER_NOT_FOUND', 'no such transfer');
  if (t.status !== 'PENDING') throw new AppError('TRANSFER_NOT_PENDING', `transfer is ${t.status}`);
  return t;
}

/**
 * POST /v1/transfers/confirm: capture the holds, all legs in one ledger call. A lapsed transfer
 * is marked EXPIRED (kept, with a `transfer.failed` event) and answered 422 TRANSFER_EXPIRED.
 * Codes in order: 404 TRANSFER_NOT_FOUND, the payer check (422 PAYER_MISMATCH, 403
 * PAYER_NOT_AUTHORIZED: a transfer its deleted tuple released answers this), 409 TRANSFER_NOT_PENDING.
 */
export async function confirmTransfer(
  q: TxClient,
  caller: Caller,
  transferId: string,
  facts: RequestFacts,
  nowMs: number,
  gate: PayerGate = noDelegation,
  namedPayer?: string,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const tenantId = caller.tenantId;
  const t = await pendingToConfirm(q, caller, transferId, facts, nowMs, gate, namedPayer);
  const holdIds = [t.amount_hold_id, ...(t.fee_hold_id ? [t.fee_hold_id] : [])];
  const holds = await holdStates(q, tenantId, holdIds, true);
  const live =
    holds.length === holdIds.length &&
    holds.every((h) => holdLive(h, nowMs)) &&
    t.expires_at.getTime() > nowMs;
  if (!live) {
    await q.query(
      `UPDATE transfers SET status = 'EXPIRED', failure_code = 'TRANSFER_EXPIRED' WHERE tenant_id = $1 AND id = $2`,
      [tenantId, t.id],
    );
    await record(q, tenantId, t.id, 'EXPIRED', 'holds lapsed before confirmation', nowMs);
    await enqueue(q, {
      tenantId,
      aggregate: 'transfer',
      aggregateId: t.id,
      event: 'transfer.failed',
      payload: { transfer_id: t.id, code: 'TRANSFER_EXPIRED' },
    });
    await appendAudit(q, [
      auditEntry(caller, 'transfer.confirm', t.id, facts, { outcome: 'TRANSFER_EXPIRED' }, nowMs),
    ]);
    const err = new AppError('TRANSFER_EXPIRED', 'the transfer expired before it was confirmed');
    return { status: err.status, body: { code: err.code, message: err.message } };
  }
  const postingIds = holdIds.map(() => uuidv7(nowMs));
  await applyInTx(
    q,
    holdIds.map((h, i) => captureCmd(tenantId, h, postingIds[i] as string, nowMs)),
  );
  await q.query(
    `UPDATE transfers SET status = 'POSTED', posting_ids = $3, confirmed_at = $4 WHERE tenant_id = $1 AND id = $2`,
    [tenantId, t.id, postingIds, new Date(nowMs)],
  );
  await record(q, tenantId, t.id, 'POSTED', null, nowMs);
  const payload = {
    transfer_id: t.id,
    amount: format(fromDb(t.amount)),
    fee: format(fromDb(t.fee)),
    currency: t.currency,
    posting_ids: postingIds,
    ...delegationOf(caller, t.payer_customer_id),
  };
  await enqueue(q, {
    tenantId,
    aggregate: 'transfer',
    aggregateId: t.id,
    event: 'transfer.completed',
    payload,
  });
  const delegation = delegationOf(caller, t.payer_customer_id);
  await appendAudit(q, [
    auditEntry(caller, 'transfer.confirm', t.id, facts, { ...payload, ...delegation }, nowMs),
  ]);
  if (t.payer_customer_id !== caller.customerId) await notifyOwner(q, t, postingIds);
  const { rows: after } = await q.query<TransferRow>(
    `${selectTransfer} WHERE t.tenant_id = $1 AND t.id = $2`,
    [tenantId, t.id],
  );
  return { status: 200, body: transferView(after[0] as TransferRow, nowMs) };
}
