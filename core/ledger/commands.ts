/**
 * Pure checks and command building for the write routes: result codes 1–3 of
 * INVARIANTS.md "Result codes" (currency known, amounts exact, posting balanced) happen
 * here, before any storage is touched; the rest happen inside `ledger_apply`.
 */
import { AppError } from '../../shared/errors.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { minorUnitsOf } from './currency.ts';
import { parseAmount, toDb, type Micro } from '../../shared/money.ts';
import type { LedgerCommand } from './batcher.ts';
import type { CreatePostingBody } from './schemas.ts';

export const defaultTransactionType = 'TRANSFER';

/** Minor units of a currency the ledger knows, or 422 UNKNOWN_CURRENCY. */
export function knownCurrency(code: string): number {
  const minor = minorUnitsOf(code);
  if (minor === undefined) throw new AppError('UNKNOWN_CURRENCY', `currency ${code} is not supported`);
  return minor;
}

/** An exact positive amount in the currency's minor units, or 422 INVALID_AMOUNT. */
export function amountOf(
  text: string,
  currency: string,
  field: string,
  opts: { allowZero?: boolean } = {},
): Micro {
  const r = parseAmount(text, { minorUnits: knownCurrency(currency), ...opts });
  if (!r.ok) throw new AppError('INVALID_AMOUNT', `${field} ${r.reason}`);
  return r.micro;
}

export interface PostingLeg {
  account_id: string;
  side: 'debit' | 'credit';
  amount: string;
  currency: string;
  micro: Micro;
}

/** Validate a posting body (codes 1–3) and build its command. */
export function buildPost(
  tenant: string,
  body: CreatePostingBody,
  now: number,
): { cmd: LedgerCommand; legs: PostingLeg[] } {
  knownCurrency(body.currency);
  for (const e of body.entries) if (e.currency !== undefined) knownCurrency(e.currency);
  const legs: PostingLeg[] = body.entries.map((e, i) => {
    const currency = e.currency ?? body.currency;
    const micro = amountOf(e.amount, currency, `entries[${i}].amount`);
    return { account_id: e.account_id.toLowerCase(), side: e.side, amount: toDb(micro), currency, micro };
  });
  if (legs.length < 2)
    throw new AppError('TOO_FEW_ENTRIES', 'a posting needs at least one debit and one credit');
  const net = new Map<string, bigint>();
  for (const l of legs)
    net.set(l.currency, (net.get(l.currency) ?? 0n) + (l.side === 'debit' ? l.micro : -l.micro));
  for (const [currency, n] of net) {
    if (n !== 0n) throw new AppError('UNBALANCED_POSTING', `debits and credits in ${currency} differ`);
  }
  const cmd: LedgerCommand = {
    op: 'post',
    tenant,
    id: uuidv7(now),
    transaction_id: uuidv7(now),
    type: body.transaction_type ?? defaultTransactionType,
    currency: body.currency,
    entries: legs.map(({ micro: _m, ...l }) => l),
    description: body.description ?? null,
    metadata: body.metadata ?? {},
  };
  return { cmd, legs };
}
