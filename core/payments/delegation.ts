/**
 * Transfers by a delegated payer (SPEC 2.7 `payer`, issue 20 item 3): whose wallet a transfer
 * pays from, the payer gate (./payer.ts) judged on create and again on confirm, both customers'
 * limits, and what events, audit records and the wallet owner's notice say of it. A customer's
 * own transfer passes through all of these unchanged.
 */
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { format, fromDb, type Micro } from '../../shared/money.ts';
import type { Caller } from '../identity/tokens.ts';
import { enqueue } from '../outbox/outbox.ts';
import { checkLimits } from './limits.ts';
import type { PayerGate, PayerRequest } from './payer.ts';
import type { RequestFacts, TransferInput, TransferRow } from './transfers.ts';

/** Without a gate (no policy to judge delegations), a transfer from another's wallet is refused. */
export const noDelegation: PayerGate = async () => {
  throw new AppError(
    'PAYER_NOT_AUTHORIZED',
    "this core cannot judge payments from another customer's wallet",
  );
};

/** What the payer gate judges: the caller paying from `owner`'s wallet, from this request's address. */
const delegation = (
  caller: Caller,
  owner: string,
  action: PayerRequest['action'],
  facts: RequestFacts,
): PayerRequest => ({
  tenantId: caller.tenantId,
  initiator: caller.customerId,
  owner,
  action,
  ip: facts.ip ?? '',
  aal: caller.aal,
});

/**
 * Whose wallet pays: the caller's own, or (issue 20 item 3) the customer named by
 * `payerCustomerId` when the gate finds a live payer tuple from the caller to them.
 */
export async function walletOwnerFor(
  q: Queryable,
  caller: Caller,
  input: TransferInput,
  facts: RequestFacts,
  nowMs: number,
  gate: PayerGate,
): Promise<string> {
  const owner = input.payerCustomerId;
  if (owner === undefined || owner === caller.customerId) return caller.customerId;
  await gate(q, delegation(caller, owner, 'transfer.create', facts), nowMs);
  return owner;
}

/** Both customers' limits for a delegated transfer; the one customer's for their own. */
export async function checkSendersLimits(
  q: Queryable,
  caller: Caller,
  owner: string,
  currency: string,
  amount: Micro,
  nowMs: number,
): Promise<void> {
  if (owner === caller.customerId) {
    await checkLimits(q, caller.tenantId, owner, currency, amount, nowMs);
    return;
  }
  await checkLimits(q, caller.tenantId, owner, currency, amount, nowMs, "the wallet owner's");
  await checkLimits(q, caller.tenantId, caller.customerId, currency, amount, nowMs, 'your own');
}

/** The delegation facts events and audit records carry (nothing for a customer's own transfer). */
export const delegationOf = (caller: Caller, owner: string): Record<string, string> =>
  owner === caller.customerId ? {} : { payer_customer_id: owner, initiator_customer_id: caller.customerId };

/**
 * A confirm names the same wallet owner as its create (`payerCustomerId`), so the edge judges the
 * payer tuple on the confirm too; core judges it again here: a tuple deleted since the create
 * stops the confirm (the delete released the transfer already, its holds voided: ./revocation.ts;
 * one whose tuple merely expired keeps its holds until they lapse, and the money never leaves).
 */
export async function confirmDelegation(
  q: Queryable,
  caller: Caller,
  t: TransferRow,
  facts: RequestFacts,
  nowMs: number,
  gate: PayerGate,
  namedPayer: string | undefined,
): Promise<void> {
  const owner = t.payer_customer_id;
  const named = namedPayer ?? caller.customerId;
  if (named !== owner)
    throw new AppError(
      'PAYER_MISMATCH',
      owner === caller.customerId
        ? 'this transfer pays from your own wallet: payerCustomerId must be omitted or yours'
        : 'this transfer pays from another wallet: payerCustomerId must name its owner',
    );
  if (owner === caller.customerId) return;
  await gate(q, delegation(caller, owner, 'transfer.confirm', facts), nowMs);
}

/** What the wallet owner's notices say of a transfer. */
export type NoticeFacts = Pick<
  TransferRow,
  | 'id'
  | 'tenant_id'
  | 'payer_customer_id'
  | 'initiator_customer_id'
  | 'amount'
  | 'fee'
  | 'currency'
  | 'reference'
>;

/**
 * A notice to the owner of the wallet transfer `t` pays from, or to another party of it (`to`: the
 * delegate who made it) (SMS text; issue 20 item 3). The text
 * names the transfer by id, never by the delegate's free-text reference: a delegate (or one whose
 * delegation was just withdrawn) would otherwise write the words of an SMS the platform sends.
 */
async function noticeToOwner(
  q: Queryable,
  t: NoticeFacts,
  event: string,
  extra: Record<string, unknown>,
  text: (total: string) => string,
  to: string = t.payer_customer_id,
): Promise<void> {
  await enqueue(q, {
    tenantId: t.tenant_id,
    aggregate: 'customer',
    aggregateId: to,
    event,
    payload: {
      customerId: to,
      payerCustomerId: t.payer_customer_id,
      initiatorCustomerId: t.initiator_customer_id,
      transferId: t.id,
      ...extra,
      amount: format(fromDb(t.amount)),
      fee: format(fromDb(t.fee)),
      currency: t.currency,
      channel: 'sms',
      text: text(`${format(fromDb(t.amount) + fromDb(t.fee))} ${t.currency}`),
    },
  });
}

/** The wallet owner learns of a debit they did not make themselves (issue 20 item 3). */
export async function notifyOwner(q: Queryable, t: TransferRow, postingIds: string[]): Promise<void> {
  await noticeToOwner(
    q,
    t,
    'wallet.delegated_debit',
    { postingIds },
    (total) =>
      `${total} was paid from your wallet by a customer you authorised to pay for you (transfer ${t.id}).`,
  );
}

/**
 * The wallet owner learns that a delegate's pending transfer will never post and its hold on
 * their wallet is gone, because the delegation was withdrawn (the sibling of
 * `wallet.delegated_debit`: the owner saw the held amount leave their available balance).
 */
export async function notifyOwnerReleased(q: Queryable, t: NoticeFacts): Promise<void> {
  await noticeToOwner(
    q,
    t,
    'wallet.delegated_hold_released',
    {},
    (total) =>
      `${total} held for a payment by a customer you had authorised to pay for you is available again: that authorisation has ended (transfer ${t.id}).`,
  );
}

/**
 * The delegate learns that their pending payment from the owner's wallet will never post, and
 * why: the owner's authorisation was withdrawn (its confirm would answer PAYER_NOT_AUTHORIZED).
 * Without it they would find out only by confirming, or never.
 */
export async function notifyDelegateReleased(q: Queryable, t: NoticeFacts): Promise<void> {
  await noticeToOwner(
    q,
    t,
    'wallet.delegated_payment_cancelled',
    {},
    (total) =>
      `Your payment of ${total} from a wallet you were authorised to pay from was cancelled: that authorisation has ended (transfer ${t.id}).`,
    t.initiator_customer_id,
  );
}
