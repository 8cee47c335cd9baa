/**
 * A withdrawn delegation releases what it had authorised (SPEC 2.7 `payer`, issue 20 item 3).
 * Deleting the tuple `customer:<delegate> payer customer:<owner>` already stops the confirm of a
 * transfer the delegate made from the owner's wallet (./payer.ts); without this the holds that
 * transfer placed on the owner's wallet (amount and fee) would stay until they lapse, 600 s on,
 * and nobody could release them. So the delete, in its own transaction, voids those holds
 * through the ledger's command API and marks each such transfer FAILED (SPEC 4.3's status for a
 * transfer that will never post; `failure_code` PAYER_NOT_AUTHORIZED, the code its confirm now
 * gets), with a `transfer.failed` event and a notice to the owner and to the delegate. The caller
 * audits each one.
 *
 * Lock order: the deleted tuple row (its DELETE), then these transfer rows in id order, then
 * balance and hold rows (inside ledger_apply), then the audit head. A confirm takes the tuple
 * FOR SHARE before its transfer row (transfers.ts pendingToConfirm) and a create holds it until
 * it commits, so neither can slip a capture or a new pending transfer past the delete.
 */
import type { Queryable } from '../../shared/db/pool.ts';
import { format, fromDb } from '../../shared/money.ts';
import { applyInTx, voidCmd } from '../ledger/apply.ts';
import { holdLive, holdStates } from '../ledger/reads.ts';
import { enqueue } from '../outbox/outbox.ts';
import { type NoticeFacts, notifyDelegateReleased, notifyOwnerReleased } from './delegation.ts';
import { record } from './transfers.ts';

/** The delegation a deleted `payer` tuple withdrew: who paid (subject) from whose wallet (object). */
export interface Delegation {
  tenantId: string;
  delegate: string;
  owner: string;
}

interface PendingRow extends NoticeFacts {
  amount_hold_id: string;
  fee_hold_id: string | null;
}

/** A transfer released here, as the audit record of the withdrawal names it. */
export interface Released {
  transfer_id: string;
  payer_customer_id: string;
  initiator_customer_id: string;
  amount: string;
  fee: string;
  currency: string;
  voided_hold_ids: string[];
}

/** What the code and the status history say of a released transfer. */
export const releasedCode = 'PAYER_NOT_AUTHORIZED';
const reason = 'the payer relationship was deleted: holds voided';

const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * Release every transfer the delegate initiated from the owner's wallet that is still PENDING
 * and unexpired (a lapsed one's holds are released by the ledger already). Only the tuple's own
 * tenant's transfers; ids that are not customer uuids (a tuple written behind the API's back)
 * name no transfer. A transfer a racing confirm already POSTED is no longer PENDING here.
 */
export async function releaseDelegation(q: Queryable, d: Delegation, nowMs: number): Promise<Released[]> {
  if (!uuid.test(d.delegate) || !uuid.test(d.owner) || d.delegate === d.owner) return [];
  const { rows } = await q.query<PendingRow>(
    `SELECT id, tenant_id, payer_customer_id, initiator_customer_id, amount, fee, currency, reference, amount_hold_id, fee_hold_id
       FROM transfers
      WHERE tenant_id = $1 AND initiator_customer_id = $2 AND payer_customer_id = $3 AND status = 'PENDING' AND expires_at > $4
      ORDER BY id FOR UPDATE`,
    [d.tenantId, d.delegate, d.owner, new Date(nowMs)],
  );
  const released: Released[] = [];
  for (const t of rows) released.push(await releaseOne(q, t, nowMs));
  return released;
}

/** Void the transfer's live holds, mark it FAILED, tell downstream and the owner. */
async function releaseOne(q: Queryable, t: PendingRow, nowMs: number): Promise<Released> {
  const holdIds = [t.amount_hold_id, ...(t.fee_hold_id ? [t.fee_hold_id] : [])];
  const live = (await holdStates(q, t.tenant_id, holdIds)).filter((h) => holdLive(h, nowMs));
  if (live.length > 0)
    await applyInTx(
      q,
      live.map((h) => voidCmd(t.tenant_id, h.id, nowMs)),
    );
  await q.query(
    `UPDATE transfers SET status = 'FAILED', failure_code = $3 WHERE tenant_id = $1 AND id = $2 AND status = 'PENDING'`,
    [t.tenant_id, t.id, releasedCode],
  );
  await record(q, t.tenant_id, t.id, 'FAILED', reason, nowMs);
  const facts = {
    transfer_id: t.id,
    payer_customer_id: t.payer_customer_id,
    initiator_customer_id: t.initiator_customer_id,
    amount: format(fromDb(t.amount)),
    fee: format(fromDb(t.fee)),
    currency: t.currency,
  };
  await enqueue(q, {
    tenantId: t.tenant_id,
    aggregate: 'transfer',
    aggregateId: t.id,
    event: 'transfer.failed',
    payload: { ...facts, code: releasedCode },
  });
  await notifyOwnerReleased(q, t);
  await notifyDelegateReleased(q, t);
  return { ...facts, voided_hold_ids: live.map((h) => h.id) };
}
