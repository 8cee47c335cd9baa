/**
 * Fraud holds (issue 20 item 4, fraud.review): a hold on a wallet blocks its debits and new
 * holds (enforced in ledger_apply, migration 0860, the one place every ledger write passes)
 * but not incoming credits. Lifted only by a different fraud officer than the one who placed
 * it (checked here and by the table's CHECK); the customer is told through the outbox (the SMS
 * channel's dispatcher); placing and lifting are audited under the officer's name.
 */
import { Type } from '@sinclair/typebox';
import { appendAudit } from '../../shared/audit.ts';
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { accountRef } from '../ledger/reads.ts';
import { enqueue } from '../outbox/outbox.ts';
import type { RequestContext } from '../http/route.ts';
import { auditOf, type StaffCaller } from './context.ts';

const uuid = '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$';
export const PlaceBody = Type.Object(
  {
    accountId: Type.String({ pattern: uuid }),
    reason: Type.String({ minLength: 3, maxLength: 500 }),
  },
  { additionalProperties: false },
);
export const LiftBody = Type.Object(
  { reason: Type.String({ minLength: 3, maxLength: 500 }) },
  { additionalProperties: false },
);
export const HoldParams = Type.Object({ id: Type.String({ pattern: uuid }) });
export const HoldQuery = Type.Object(
  { accountId: Type.Optional(Type.String({ pattern: uuid })) },
  { additionalProperties: false },
);
export const FraudHold = Type.Object({
  id: Type.String(),
  account_id: Type.String(),
  reason: Type.String(),
  placed_by: Type.String(),
  placed_at: Type.String(),
  lifted_by: Type.Union([Type.String(), Type.Null()]),
  lifted_at: Type.Union([Type.String(), Type.Null()]),
  lift_reason: Type.Union([Type.String(), Type.Null()]),
  active: Type.Boolean(),
});

interface HoldRow {
  id: string;
  account_id: string;
  reason: string;
  placed_by: string;
  placed_at: Date;
  lifted_by: string | null;
  lifted_at: Date | null;
  lift_reason: string | null;
}
const columns = 'id, account_id, reason, placed_by, placed_at, lifted_by, lifted_at, lift_reason';

function holdView(r: HoldRow) {
  return {
    id: r.id,
    account_id: r.account_id,
    reason: r.reason,
    placed_by: r.placed_by,
    placed_at: r.placed_at.toISOString(),
    lifted_by: r.lifted_by,
    lifted_at: r.lifted_at?.toISOString() ?? null,
    lift_reason: r.lift_reason,
    active: r.lifted_at === null,
  };
}

type AnyCtx = RequestContext<unknown, unknown, unknown>;

/** The wallet's owner (a customer) and a lock on the account row, so two officers cannot race. */
async function walletOwner(q: Queryable, tenantId: string, accountId: string): Promise<string> {
  const a = await accountRef(q, tenantId, accountId, true);
  const owner = a?.owner_type === 'customer' ? a.owner_id : undefined;
  if (!owner) throw new AppError('WALLET_NOT_FOUND', 'no customer wallet with that id in this tenant');
  return owner;
}

async function notifyCustomer(
  q: Queryable,
  tenantId: string,
  customerId: string,
  accountId: string,
  event: 'wallet.fraud_hold_placed' | 'wallet.fraud_hold_lifted',
): Promise<void> {
  const text =
    event === 'wallet.fraud_hold_placed'
      ? 'Payments out of your wallet are paused while we review recent activity. Money sent to you still arrives. Contact support for help.'
      : 'Payments out of your wallet are available again.';
  await enqueue(q, {
    tenantId,
    aggregate: 'customer',
    aggregateId: customerId,
    event,
    payload: { customerId, accountId, channel: 'sms', text },
  });
}

export async function placeHold(
  q: TxClient,
  ctx: AnyCtx,
  c: StaffCaller,
  body: { accountId: string; reason: string },
  now: number,
) {
  const owner = await walletOwner(q, c.tenantId, body.accountId);
  const { rows: active } = await q.query<{ id: string }>(
    'SELECT id FROM wallet_fraud_holds WHERE tenant_id = $1 AND account_id = $2 AND lifted_at IS NULL',
    [c.tenantId, body.accountId],
  );
  if (active[0])
    throw new AppError('FRAUD_HOLD_EXISTS', `the wallet is already under fraud hold ${active[0].id}`);
  const { rows } = await q.query<HoldRow>(
    `INSERT INTO wallet_fraud_holds (tenant_id, id, account_id, reason, placed_by, placed_at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING ${columns}`,
    [c.tenantId, uuidv7(), body.accountId, body.reason, c.principalId, new Date(now)],
  );
  const hold = rows[0] as HoldRow;
  await notifyCustomer(q, c.tenantId, owner, body.accountId, 'wallet.fraud_hold_placed');
  const a = auditOf(ctx, c);
  await appendAudit(q, [
    {
      tenantId: c.tenantId,
      ...a,
      action: 'fraud_hold.place',
      target: { type: 'wallet', id: body.accountId },
      attrs: { ...a.attrs, hold_id: hold.id, reason: body.reason, customer_id: owner },
      ts: new Date(now),
    },
  ]);
  return holdView(hold);
}

export async function liftHold(
  q: TxClient,
  ctx: AnyCtx,
  c: StaffCaller,
  id: string,
  reason: string,
  now: number,
) {
  const { rows } = await q.query<HoldRow>(
    `SELECT ${columns} FROM wallet_fraud_holds WHERE tenant_id = $1 AND id = $2 FOR UPDATE`,
    [c.tenantId, id],
  );
  const hold = rows[0];
  if (!hold) throw new AppError('FRAUD_HOLD_NOT_FOUND', 'no fraud hold with that id in this tenant');
  if (hold.lifted_at) throw new AppError('CONFLICT', 'the fraud hold was already lifted');
  // Four eyes: the officer who placed the hold cannot lift it (refused and audited).
  if (hold.placed_by === c.principalId)
    throw new AppError(
      'SECOND_OFFICER_REQUIRED',
      'a fraud hold is lifted only by a different fraud officer than the one who placed it',
    );
  const owner = await walletOwner(q, c.tenantId, hold.account_id);
  const { rows: lifted } = await q.query<HoldRow>(
    `UPDATE wallet_fraud_holds SET lifted_by = $3, lifted_at = $4, lift_reason = $5 WHERE tenant_id = $1 AND id = $2 RETURNING ${columns}`,
    [c.tenantId, id, c.principalId, new Date(now), reason],
  );
  await notifyCustomer(q, c.tenantId, owner, hold.account_id, 'wallet.fraud_hold_lifted');
  const a = auditOf(ctx, c);
  await appendAudit(q, [
    {
      tenantId: c.tenantId,
      ...a,
      action: 'fraud_hold.lift',
      target: { type: 'wallet', id: hold.account_id },
      attrs: { ...a.attrs, hold_id: id, reason, placed_by: hold.placed_by, customer_id: owner },
      ts: new Date(now),
    },
  ]);
  return holdView(lifted[0] as HoldRow);
}

export async function listHolds(q: Queryable, tenantId: string, accountId: string | undefined) {
  const { rows } = await q.query<HoldRow>(
    `SELECT ${columns} FROM wallet_fraud_holds WHERE tenant_id = $1 AND ($2::uuid IS NULL OR account_id = $2) ORDER BY placed_at DESC, id DESC LIMIT 100`,
    [tenantId, accountId ?? null],
  );
  return rows.map(holdView);
}
