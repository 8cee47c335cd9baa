/**
 * The ledger's command API for other modules (issue 21 item 2): the commands they may build and
 * the one way to run them inside the caller's own transaction. Agents and payments run
 * `ledger_apply` in the same transaction as their own rows, idempotency key and audit record, so
 * a posting and the state that refers to it commit together or not at all (the batcher runs its
 * own transaction per batch, which would split them). Lock order stays the ledger's: the
 * caller's rows, then balance rows (inside ledger_apply), then the audit head.
 */
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError, isErrorCode } from '../../shared/errors.ts';
import { toDb, type Micro } from '../../shared/money.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { checkMoneyMovement } from '../http/money.ts';
import type { ApplyResult, LedgerCommand } from './batcher.ts';

export type { ApplyResult, LedgerCommand } from './batcher.ts';

/**
 * The one mapping from a ledger refusal to the error a client sees, for the batcher and for
 * commands applied in a caller's transaction alike: the ledger's result codes are AppError
 * codes (INVARIANTS.md "Result codes"); anything else is a defect and answers a generic 500
 * without its text.
 */
export function refusalError(code: string, message: string): AppError {
  return isErrorCode(code) ? new AppError(code, message) : new AppError('INTERNAL', 'internal error');
}

function isApplyResult(r: unknown): r is ApplyResult {
  return typeof r === 'object' && r !== null && typeof (r as { ok?: unknown }).ok === 'boolean';
}

/**
 * Run commands through ledger_apply in the caller's transaction. A refused command throws its
 * AppError, which aborts the caller's transaction and with it every command of the call.
 */
export async function applyInTx(q: Queryable, cmds: LedgerCommand[]): Promise<ApplyResult[]> {
  checkMoneyMovement(cmds.map((c) => c.op));
  const { rows } = await q.query<{ r: unknown }>('SELECT ledger_apply($1::jsonb) AS r', [
    JSON.stringify(cmds),
  ]);
  const results = rows[0]?.r;
  if (!Array.isArray(results) || results.length !== cmds.length)
    throw new Error('ledger_apply answered an unexpected shape');
  return results.map((r: unknown) => {
    if (!isApplyResult(r)) throw new Error('ledger_apply answered an unexpected result');
    if (!r.ok) throw refusalError(r.code, r.message);
    return r;
  });
}

export interface Leg {
  account: string;
  side: 'debit' | 'credit';
  amount: Micro;
}

/** A post command for balanced legs (zero legs dropped); an unbalanced call is a defect. */
export function postCmd(
  tenantId: string,
  type: string,
  currency: string,
  legs: Leg[],
  description: string,
  metadata: Record<string, unknown>,
  now: number,
): LedgerCommand {
  const live = legs.filter((l) => l.amount > 0n);
  let net = 0n;
  for (const l of live) net += l.side === 'debit' ? l.amount : -l.amount;
  if (net !== 0n || live.length < 2) throw new Error('posting is not balanced');
  return {
    op: 'post',
    tenant: tenantId,
    id: uuidv7(now),
    transaction_id: uuidv7(now),
    type,
    currency,
    entries: live.map((l) => ({ account_id: l.account, side: l.side, amount: toDb(l.amount), currency })),
    description,
    metadata,
  };
}

export function reverseCmd(
  tenantId: string,
  postingId: string,
  description: string,
  now: number,
): LedgerCommand {
  return {
    op: 'reverse',
    tenant: tenantId,
    id: uuidv7(now),
    transaction_id: uuidv7(now),
    posting_id: postingId,
    description,
  };
}

export interface HoldSpec {
  id: string;
  type: string;
  debit: string;
  credit: string;
  currency: string;
  amount: Micro;
  description: string;
  metadata: Record<string, unknown>;
  expiresAt: Date;
}

/** A hold of `amount` from `debit` towards `credit` until `expiresAt`. */
export function holdCmd(tenantId: string, h: HoldSpec, now: number): LedgerCommand {
  return {
    op: 'hold',
    tenant: tenantId,
    id: h.id,
    transaction_id: uuidv7(now),
    type: h.type,
    debit_account_id: h.debit,
    credit_account_id: h.credit,
    currency: h.currency,
    amount: toDb(h.amount),
    description: h.description,
    metadata: h.metadata,
    expires_at: h.expiresAt.toISOString(),
  };
}

/** Capture a hold in full as posting `postingId`. */
export function captureCmd(tenantId: string, holdId: string, postingId: string, now: number): LedgerCommand {
  return {
    op: 'capture',
    tenant: tenantId,
    hold_id: holdId,
    amount: null,
    id: postingId,
    now: new Date(now).toISOString(),
  };
}

export function voidCmd(tenantId: string, holdId: string, now: number): LedgerCommand {
  return { op: 'void', tenant: tenantId, hold_id: holdId, now: new Date(now).toISOString() };
}
