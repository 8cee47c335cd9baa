/**
 * Idempotency keys for any route (SPEC 2.11 "idempotency record"; DESIGN.md "Balances"):
 * the first response to a key is stored in the same transaction as the effect it reports and
 * replayed byte for byte; the same key with a different request is 409 IDEMPOTENCY_CONFLICT;
 * a key whose first attempt failed with a domain error stays failed. Requests refused before
 * any work starts (authentication, header, body schema) store nothing, as with Stripe.
 */
import { createHash } from 'node:crypto';
import { canonicalJson } from '../../lib/canonical-json.ts';
import type { Db, Queryable } from '../db/pool.ts';
import { AppError, toCoreBody } from '../http/errors.ts';
import type { Reply } from '../http/route.ts';

/** Printable token characters only; long enough to be unique, short enough to index. */
export const idempotencyKeyPattern = /^[A-Za-z0-9._:-]{8,128}$/;
export const idempotencyHeader = { name: 'Idempotency-Key', required: false, description: 'Required on every write: 8–128 characters [A-Za-z0-9._:-]; a replay returns the first response byte for byte' };

export interface IdemScope {
  tenantId: string;
  key: string;
  method: string;
  path: string;
  requestHash: string;
}

export interface StoredResponse {
  status: number;
  body: string;
  replayed: boolean;
}

/** The request's key, or 400 IDEMPOTENCY_KEY_REQUIRED / IDEMPOTENCY_KEY_INVALID. */
export function idempotencyKeyOf(headers: Readonly<Record<string, string>>): string {
  const key = headers['idempotency-key'];
  if (key === undefined || key === '') throw new AppError('IDEMPOTENCY_KEY_REQUIRED', 'header Idempotency-Key is required on this write');
  if (!idempotencyKeyPattern.test(key)) throw new AppError('IDEMPOTENCY_KEY_INVALID', 'Idempotency-Key must be 8–128 characters of [A-Za-z0-9._:-]');
  return key;
}

/** SHA-256 of method, path and the canonical JSON of the body: key order does not matter. */
export function requestHash(method: string, path: string, body: unknown): string {
  return createHash('sha256').update(`${method} ${path}\n${canonicalJson(body ?? null)}`).digest('hex');
}

interface KeyRow { request_hash: string; response_status: number | null; response_body: string | null }

export async function findKey(q: Queryable, tenantId: string, key: string): Promise<KeyRow | undefined> {
  const { rows } = await q.query<KeyRow>(
    'SELECT request_hash, response_status, response_body FROM idempotency_keys WHERE tenant_id = $1 AND key = $2',
    [tenantId, key],
  );
  return rows[0];
}

/** The stored response for a key already used, or 409 when the request differs. */
export function replay(row: KeyRow, scope: IdemScope): StoredResponse {
  if (row.request_hash !== scope.requestHash) {
    throw new AppError('IDEMPOTENCY_CONFLICT', 'this Idempotency-Key was used with a different request');
  }
  if (row.response_status === null || row.response_body === null) {
    throw new AppError('INTERNAL', 'idempotency record without a response');
  }
  return { status: row.response_status, body: row.response_body, replayed: true };
}

/**
 * Claim keys inside the caller's transaction, in key order (no claim deadlocks). A key held
 * by a concurrent transaction waits for it; true means this transaction now owns the key.
 */
export async function claimKeys(q: Queryable, scopes: IdemScope[]): Promise<boolean[]> {
  if (scopes.length === 0) return [];
  const { rows } = await q.query<{ tenant_id: string; key: string }>(
    `INSERT INTO idempotency_keys (tenant_id, key, method, path, request_hash)
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) ORDER BY 1, 2
     ON CONFLICT DO NOTHING RETURNING tenant_id, key`,
    [scopes.map((s) => s.tenantId), scopes.map((s) => s.key), scopes.map((s) => s.method), scopes.map((s) => s.path), scopes.map((s) => s.requestHash)],
  );
  const won = new Set(rows.map((r) => `${r.tenant_id}\n${r.key}`));
  const seen = new Set<string>();
  // Two requests with one key in one batch: the first wins, the second replays after commit.
  return scopes.map((s) => {
    const id = `${s.tenantId}\n${s.key}`;
    const mine = won.has(id) && !seen.has(id);
    seen.add(id);
    return mine;
  });
}

/**
 * Record the responses of claimed keys (same transaction as the claim). The `= ANY` conditions
 * make the key side an index look-up whatever the join method: a plain join on the unnest
 * let the planner hash-join a sequential scan of the whole (ever growing) key table.
 */
export async function completeKeys(q: Queryable, done: { scope: IdemScope; status: number; body: string }[]): Promise<void> {
  if (done.length === 0) return;
  await q.query(
    `UPDATE idempotency_keys k SET response_status = d.status, response_body = d.body
       FROM unnest($1::text[], $2::text[], $3::int[], $4::text[]) AS d(tenant_id, key, status, body)
      WHERE k.tenant_id = d.tenant_id AND k.key = d.key AND k.tenant_id = ANY($1::text[]) AND k.key = ANY($2::text[])`,
    [done.map((d) => d.scope.tenantId), done.map((d) => d.scope.key), done.map((d) => d.status), done.map((d) => d.body)],
  );
}

/** A stored response as the pipeline's reply; replays say so in a header. */
export function toReply(r: StoredResponse): Reply {
  return {
    status: r.status,
    raw: { contentType: 'application/json; charset=utf-8', data: r.body },
    headers: r.replayed ? { 'idempotent-replayed': 'true' } : {},
  };
}

/**
 * Run `fn` once per key: claim, run in a savepoint, store its response (or its domain error:
 * the effects roll back to the savepoint, the failure is kept) and commit together.
 */
export async function withIdempotency(
  db: Db,
  scope: IdemScope,
  fn: (client: Queryable) => Promise<{ status: number; body: unknown }>,
): Promise<StoredResponse> {
  const before = await findKey(db, scope.tenantId, scope.key);
  if (before) return replay(before, scope);
  const outcome = await db.tx(async (client) => {
    const [mine] = await claimKeys(client, [scope]);
    if (!mine) return undefined;
    await client.query('SAVEPOINT idempotent_work');
    let res: { status: number; body: string };
    try {
      const r = await fn(client);
      res = { status: r.status, body: JSON.stringify(r.body) };
    } catch (err) {
      if (!(err instanceof AppError) || err.status >= 500) throw err;
      await client.query('ROLLBACK TO SAVEPOINT idempotent_work');
      res = { status: err.status, body: JSON.stringify(toCoreBody(err)) };
    }
    await completeKeys(client, [{ scope, ...res }]);
    return res;
  });
  if (outcome) return { ...outcome, replayed: false };
  const after = await findKey(db, scope.tenantId, scope.key);
  if (!after) throw new AppError('SERVICE_UNAVAILABLE', 'idempotency key is busy; retry');
  return replay(after, scope);
}
