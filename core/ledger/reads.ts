/**
 * Reads other modules make of the ledger (issue 21 item 2: SQL lives with the module that owns
 * the table): balances as exact micro-units, hold states, accounts by owner or id, and entry
 * histories. Every query is tenant-scoped.
 */
import type { Queryable } from '../../shared/db/pool.ts';
import { fromDb, type Micro } from '../../shared/money.ts';

const uuidText = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export interface Amounts {
  /** credits − debits posted */
  posted: Micro;
  /** pending debits (holds placed on the account) */
  held: Micro;
  overdraft: Micro;
}

/** Posted, held and overdraft line of one account (zeros for an unknown one); `lock` takes the row. */
export async function amountsOf(
  q: Queryable,
  tenantId: string,
  accountId: string,
  lock = false,
): Promise<Amounts> {
  const { rows } = await q.query<{ posted: string; held: string; line: string }>(
    `SELECT (credits_posted - debits_posted)::text AS posted, pending_debits::text AS held, overdraft_limit::text AS line
       FROM ledger_balances WHERE tenant_id = $1 AND account_id = $2${lock ? ' FOR UPDATE' : ''}`,
    [tenantId, accountId],
  );
  const r = rows[0];
  if (!r) return { posted: 0n, held: 0n, overdraft: 0n };
  return { posted: fromDb(r.posted), held: fromDb(r.held), overdraft: fromDb(r.line) };
}

export interface HoldState {
  id: string;
  status: string;
  expiresAt: Date;
}

/** The states of these holds (those that exist); `lock` takes their rows until the caller commits. */
export async function holdStates(
  q: Queryable,
  tenantId: string,
  ids: string[],
  lock = false,
): Promise<HoldState[]> {
  const { rows } = await q.query<{ id: string; status: string; expires_at: Date }>(
    `SELECT id, status, expires_at FROM ledger_holds WHERE tenant_id = $1 AND id = ANY($2::uuid[])${lock ? ' FOR UPDATE' : ''}`,
    [tenantId, ids],
  );
  return rows.map((r) => ({ id: r.id, status: r.status, expiresAt: r.expires_at }));
}

/** Whether a hold is still pending at `now` (neither captured, voided nor past its time). */
export const holdLive = (h: HoldState | undefined, now: number): boolean =>
  h?.status === 'pending' && h.expiresAt.getTime() > now;

export interface AccountRef {
  id: string;
  owner_type: string;
  owner_id: string;
  product_code: string;
  currency: string;
  status: string;
  created_at: Date;
}

const refColumns = 'id, owner_type, owner_id, product_code, currency, status, created_at';

/** Every account of one owner, oldest first. */
export async function accountsOwnedBy(
  q: Queryable,
  tenantId: string,
  ownerType: string,
  ownerId: string,
): Promise<AccountRef[]> {
  const { rows } = await q.query<AccountRef>(
    `SELECT ${refColumns} FROM ledger_accounts WHERE tenant_id = $1 AND owner_type = $2 AND owner_id = $3 ORDER BY created_at, id`,
    [tenantId, ownerType, ownerId],
  );
  return rows;
}

/**
 * One account of the tenant by id, or undefined (also for text that is not a uuid, so a caller
 * passing user input gets no cast error). `lock` takes the account row (FOR NO KEY UPDATE) so two
 * officers acting on one wallet serialise.
 */
export async function accountRef(
  q: Queryable,
  tenantId: string,
  id: string,
  lock = false,
): Promise<AccountRef | undefined> {
  const lower = id.toLowerCase();
  if (!uuidText.test(lower)) return undefined;
  const { rows } = await q.query<AccountRef>(
    `SELECT ${refColumns} FROM ledger_accounts WHERE tenant_id = $1 AND id = $2${lock ? ' FOR NO KEY UPDATE' : ''}`,
    [tenantId, lower],
  );
  return rows[0];
}

export interface HistoryRow {
  seq: string;
  posting_id: string;
  side: string;
  amount: string;
  type_code: string;
  kind: string;
  description: string | null;
  created_at: Date;
  balance_after: string;
}

/** Entries of an account newest first, before entry `beforeSeq`, with the running balance after each. */
export async function entryHistory(
  q: Queryable,
  tenantId: string,
  accountId: string,
  beforeSeq: string | undefined,
  limit: number,
): Promise<HistoryRow[]> {
  // Running balance over the account's whole history (seq order), then the page.
  const { rows } = await q.query<HistoryRow>(
    `SELECT * FROM (
       SELECT e.seq::text AS seq, e.posting_id, e.side, e.amount::text AS amount, p.type_code, p.kind, p.description, e.created_at,
              (sum(CASE e.side WHEN 'credit' THEN e.amount ELSE -e.amount END) OVER (ORDER BY e.seq))::text AS balance_after
         FROM ledger_entries e JOIN ledger_postings p ON p.tenant_id = e.tenant_id AND p.id = e.posting_id
        WHERE e.tenant_id = $1 AND e.account_id = $2) h
      WHERE ($3::bigint IS NULL OR h.seq::bigint < $3) ORDER BY h.seq::bigint DESC LIMIT $4`,
    [tenantId, accountId, beforeSeq ?? null, limit],
  );
  return rows;
}

/** The last `n` entries of an account, newest first. */
export async function recentEntries(
  q: Queryable,
  tenantId: string,
  accountId: string,
  n: number,
): Promise<{ side: string; amount: Micro; createdAt: Date }[]> {
  const { rows } = await q.query<{ side: string; amount: string; created_at: Date }>(
    `SELECT side, amount::text AS amount, created_at FROM ledger_entries
      WHERE tenant_id = $1 AND account_id = $2 ORDER BY seq DESC LIMIT $3`,
    [tenantId, accountId, n],
  );
  return rows.map((r) => ({ side: r.side, amount: fromDb(r.amount), createdAt: r.created_at }));
}

export interface Movement {
  type_code: string;
  credits: string;
  debits: string;
  n: number;
  last_seq: string;
}

/** Credits, debits and entry count of an account by posting type, for entries after `sinceSeq`. */
export async function movementsByType(
  q: Queryable,
  tenantId: string,
  accountId: string,
  sinceSeq: string,
): Promise<Movement[]> {
  const { rows } = await q.query<Movement>(
    `SELECT p.type_code, coalesce(sum(e.amount) FILTER (WHERE e.side = 'credit'), 0)::text AS credits,
            coalesce(sum(e.amount) FILTER (WHERE e.side = 'debit'), 0)::text AS debits, count(*)::int AS n, max(e.seq)::text AS last_seq
       FROM ledger_entries e JOIN ledger_postings p ON p.tenant_id = e.tenant_id AND p.id = e.posting_id
      WHERE e.tenant_id = $1 AND e.account_id = $2 AND e.seq > $3::bigint GROUP BY p.type_code ORDER BY p.type_code`,
    [tenantId, accountId, sinceSeq],
  );
  return rows;
}

/**
 * Whether any ledger account, of any tenant, is in `currency`: then its minor units are fixed
 * (issue 21 item 2). Across tenants on purpose: currencies are platform reference data.
 */
export async function currencyHeld(q: Queryable, currency: string): Promise<boolean> {
  const { rows } = await q.query('SELECT 1 FROM ledger_accounts WHERE currency = $1 LIMIT 1', [currency]);
  return rows.length > 0;
}

/** Whether a savings product, of any tenant, is in `currency` (a product's accounts name it). */
export async function currencyInSavingsProduct(q: Queryable, currency: string): Promise<boolean> {
  const { rows } = await q.query('SELECT 1 FROM ledger_savings_products WHERE currency = $1 LIMIT 1', [
    currency,
  ]);
  return rows.length > 0;
}

/** An amount the ledger keeps configured in a currency (core/admin/reference/configured-amounts.ts). */
export interface ConfiguredLedgerAmount {
  kind: 'savings_product' | 'ledger_limit';
  tenant_id: string;
  /** The product's code; for a limit, its product, action and period. */
  ref: string;
  amount: string;
}

/**
 * The first savings product's `min_balance` or active limit's maximum in `currency`, of any
 * tenant, with more decimals than `minorUnits`; undefined when every one fits. Products are kept
 * whatever their status (accounts name them); inactive limits are not applied.
 */
export async function ledgerAmountFinerThan(
  q: Queryable,
  currency: string,
  minorUnits: number,
): Promise<ConfiguredLedgerAmount | undefined> {
  const { rows } = await q.query<ConfiguredLedgerAmount>(
    `SELECT 'savings_product' AS kind, tenant_id, code AS ref, trim_scale(min_balance)::text AS amount
       FROM ledger_savings_products WHERE currency = $1 AND min_balance <> round(min_balance, $2)
     UNION ALL
     SELECT 'ledger_limit', tenant_id, product_code || ' ' || action || ' per ' || period, trim_scale(max_amount)::text
       FROM ledger_limit_rows WHERE currency = $1 AND active AND max_amount <> round(max_amount, $2)
     LIMIT 1`,
    [currency, minorUnits],
  );
  return rows[0];
}
