/** Ledger accounts and their balance rows: SQL owned here, always tenant-scoped. */
import type { Queryable } from '../../shared/db/pool.ts';
import { enqueue } from '../outbox/outbox.ts';
import { AppError } from '../../shared/errors.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { displayDecimals, setCurrency } from './currency.ts';
import { fromDb, format } from '../../shared/money.ts';
import { wireAmount } from './render.ts';
import type { AccountView } from './schemas.ts';

interface AccountRow {
  id: string;
  owner_type: string;
  owner_id: string;
  product_code: string;
  status: string;
  currency: string;
  created_at: Date;
  overdraft_limit: string;
  debits_must_not_exceed_credits: boolean;
}

const accountColumns = `a.id, a.owner_type, a.owner_id, a.product_code, a.status, a.currency, a.created_at,
  b.overdraft_limit, a.debits_must_not_exceed_credits`;

function view(r: AccountRow): AccountView {
  return {
    id: r.id,
    owner_type: r.owner_type,
    owner_id: r.owner_id,
    product_code: r.product_code,
    status: r.status,
    currency: r.currency,
    created_at: r.created_at.toISOString(),
    overdraft_limit: wireAmount(r.overdraft_limit, r.currency),
    debits_must_not_exceed_credits: r.debits_must_not_exceed_credits,
  };
}

export interface OpenAccount {
  tenantId: string;
  ownerType: string;
  ownerId: string;
  productCode: string;
  currency: string;
  viaApi: boolean;
}

/** Open an account and its zero balance row; the event is written in the same transaction. */
export async function openAccount(q: Queryable, a: OpenAccount, now: number): Promise<AccountView> {
  // The currency's row, shared until this account commits: a change of its minor units or its
  // deletion (each locks the row, then checks that no account holds the currency) waits for this
  // account and then sees it, instead of passing its check beside it.
  const { rows: currency } = await q.query<{ minor_units: number }>(
    'SELECT minor_units FROM admin_currencies WHERE code = $1 FOR SHARE',
    [a.currency],
  );
  // The row, not this process's snapshot, decides (issue 21 item 2: admin's table is the one
  // source): another instance may have added, removed or re-scaled the currency since the last
  // reload. Once an account holds it its minor units are fixed, so the snapshot takes them now,
  // and this core's amounts in it are read with them from the first posting on.
  setCurrency(a.currency, currency[0]?.minor_units);
  if (!currency[0]) throw new AppError('UNKNOWN_CURRENCY', `currency ${a.currency} is not supported`);
  const { rows: types } = await q.query<{ debits_must_not_exceed_credits: boolean; open_via_api: boolean }>(
    'SELECT debits_must_not_exceed_credits, open_via_api FROM ledger_account_types WHERE tenant_id = $1 AND code = $2',
    [a.tenantId, a.productCode],
  );
  const type = types[0];
  if (!type) throw new AppError('UNKNOWN_PRODUCT', `product ${a.productCode} is not defined`);
  if (a.viaApi && !type.open_via_api)
    throw new AppError('PRODUCT_NOT_ALLOWED', `product ${a.productCode} cannot be opened through the API`);
  const id = uuidv7(now);
  await q.query(
    `INSERT INTO ledger_accounts (tenant_id, id, owner_type, owner_id, product_code, currency, debits_must_not_exceed_credits, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
    [
      a.tenantId,
      id,
      a.ownerType,
      a.ownerId,
      a.productCode,
      a.currency,
      type.debits_must_not_exceed_credits,
      new Date(now),
    ],
  );
  await q.query(
    'INSERT INTO ledger_balances (tenant_id, account_id, currency, debits_must_not_exceed_credits) VALUES ($1, $2, $3, $4)',
    [a.tenantId, id, a.currency, type.debits_must_not_exceed_credits],
  );
  const account = await getAccount(q, a.tenantId, id);
  if (!account) throw new Error('account vanished after insert');
  await enqueue(q, {
    tenantId: a.tenantId,
    aggregate: 'account',
    aggregateId: id,
    event: 'account.created',
    payload: { ...account },
  });
  return account;
}

export async function getAccount(
  q: Queryable,
  tenantId: string,
  id: string,
): Promise<AccountView | undefined> {
  const { rows } = await q.query<AccountRow>(
    `SELECT ${accountColumns} FROM ledger_accounts a JOIN ledger_balances b ON b.tenant_id = a.tenant_id AND b.account_id = a.id
      WHERE a.tenant_id = $1 AND a.id = $2`,
    [tenantId, id.toLowerCase()],
  );
  return rows[0] ? view(rows[0]) : undefined;
}

export async function requireAccount(q: Queryable, tenantId: string, id: string): Promise<AccountView> {
  const a = await getAccount(q, tenantId, id);
  if (!a) throw new AppError('ACCOUNT_NOT_FOUND', `account ${id} not found`);
  return a;
}

export interface BalanceView {
  account_id: string;
  currency: string;
  posted: string;
  pending_debits: string;
  pending_credits: string;
  available: string;
  overdraft_limit: string;
}

interface BalanceRow {
  account_id: string;
  currency: string;
  debits_posted: string;
  credits_posted: string;
  pending_debits: string;
  pending_credits: string;
  overdraft_limit: string;
}

/** posted = credits − debits; available = posted − pending debits + overdraft line. */
export function balanceView(r: BalanceRow, minor: number): BalanceView {
  const posted = fromDb(r.credits_posted) - fromDb(r.debits_posted);
  const available = posted - fromDb(r.pending_debits) + fromDb(r.overdraft_limit);
  return {
    account_id: r.account_id,
    currency: r.currency,
    posted: format(posted, minor),
    pending_debits: format(fromDb(r.pending_debits), minor),
    pending_credits: format(fromDb(r.pending_credits), minor),
    available: format(available, minor),
    overdraft_limit: format(fromDb(r.overdraft_limit), minor),
  };
}

export async function getBalances(
  q: Queryable,
  tenantId: string,
  id: string,
  lock = false,
): Promise<BalanceView | undefined> {
  const { rows } = await q.query<BalanceRow>(
    `SELECT account_id, currency, debits_posted, credits_posted, pending_debits, pending_credits, overdraft_limit
       FROM ledger_balances WHERE tenant_id = $1 AND account_id = $2${lock ? ' FOR UPDATE' : ''}`,
    [tenantId, id.toLowerCase()],
  );
  const r = rows[0];
  // Shown as every other reader shows amounts (render.ts): an account exists only in a currency of
  // admin's table, which this core's snapshot may not have loaded yet (another instance opened it).
  return r ? balanceView(r, displayDecimals(r.currency)) : undefined;
}

/** Close an account whose balance, holds and overdraft line are all zero (balance row locked first). */
export async function closeAccount(q: Queryable, tenantId: string, id: string): Promise<AccountView> {
  const { rows } = await q.query<BalanceRow>(
    `SELECT account_id, currency, debits_posted, credits_posted, pending_debits, pending_credits, overdraft_limit
       FROM ledger_balances WHERE tenant_id = $1 AND account_id = $2 FOR UPDATE`,
    [tenantId, id.toLowerCase()],
  );
  const b = rows[0];
  if (!b) throw new AppError('ACCOUNT_NOT_FOUND', `account ${id} not found`);
  const empty =
    fromDb(b.credits_posted) === fromDb(b.debits_posted) &&
    fromDb(b.pending_debits) === 0n &&
    fromDb(b.pending_credits) === 0n &&
    fromDb(b.overdraft_limit) === 0n;
  if (!empty)
    throw new AppError(
      'ACCOUNT_NOT_EMPTY',
      'an account closes only with a zero balance, no pending holds and no overdraft line',
    );
  const { rowCount } = await q.query(
    `UPDATE ledger_accounts SET status = 'closed', closed_at = now() WHERE tenant_id = $1 AND id = $2 AND status = 'active'`,
    [tenantId, b.account_id],
  );
  if (rowCount === 0) throw new AppError('ACCOUNT_CLOSED', `account ${id} is already closed`);
  await enqueue(q, {
    tenantId,
    aggregate: 'account',
    aggregateId: b.account_id,
    event: 'account.closed',
    payload: { id: b.account_id },
  });
  return requireAccount(q, tenantId, b.account_id);
}
