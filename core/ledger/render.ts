/** Wire views of ledger rows and results: amounts formatted in the currency's minor units. */
import { displayDecimals } from './currency.ts';
import { fromDb, format } from '../../shared/money.ts';

/** Numeric text from SQL → wire amount for `currency`. */
export function wireAmount(dbText: string, currency: string): string {
  return format(fromDb(dbText), displayDecimals(currency));
}

function str(v: unknown): string {
  if (typeof v !== 'string') throw new TypeError('ledger row field is not text');
  return v;
}

function strOrNull(v: unknown): string | null {
  return v === null || v === undefined ? null : str(v);
}

export interface PostingView {
  id: string;
  transaction_id: string;
  status: 'POSTED';
  kind: string;
  type: string;
  currency: string;
  description: string | null;
  metadata: unknown;
  entries: { account_id: string; side: string; amount: string; currency: string }[];
  reverses_posting_id: string | null;
  hold_id: string | null;
  created_at: string;
}

/** Entries as `{account_id, side, amount (numeric text), currency}` objects. */
export function entriesView(entries: unknown): PostingView['entries'] {
  if (!Array.isArray(entries)) throw new TypeError('entries is not an array');
  return entries.map((e: unknown) => {
    const o = e as Record<string, unknown>;
    const currency = str(o.currency);
    return {
      account_id: str(o.account_id),
      side: str(o.side),
      amount: wireAmount(str(o.amount), currency),
      currency,
    };
  });
}

export function postingView(p: Record<string, unknown>): PostingView {
  return {
    id: str(p.id),
    transaction_id: str(p.transaction_id),
    status: 'POSTED',
    kind: str(p.kind),
    type: str(p.type),
    currency: str(p.currency),
    description: strOrNull(p.description),
    metadata: p.metadata ?? {},
    entries: entriesView(p.entries),
    reverses_posting_id: strOrNull(p.reverses_posting_id),
    hold_id: strOrNull(p.hold_id),
    created_at: str(p.created_at),
  };
}

/** A hold from `ledger_hold_json` (or a row of the same shape). */
export function holdView(h: Record<string, unknown>): Record<string, unknown> {
  const currency = str(h.currency);
  const captured = strOrNull(h.captured_amount);
  return {
    id: str(h.id),
    transaction_id: str(h.transaction_id),
    status: str(h.status),
    debit_account_id: str(h.debit_account_id),
    credit_account_id: str(h.credit_account_id),
    currency,
    amount: wireAmount(str(h.amount), currency),
    captured_amount: captured === null ? null : wireAmount(captured, currency),
    capture_posting_id: strOrNull(h.capture_posting_id),
    description: strOrNull(h.description),
    metadata: h.metadata ?? {},
    expires_at: str(h.expires_at),
    created_at: str(h.created_at),
    updated_at: str(h.updated_at),
  };
}
