/**
 * Idempotency keys for any route (SPEC 2.11 "idempotency record"; DESIGN.md "Balances"):
 * the first response to a key is stored in the same transaction as the effect it reports and
 * replayed byte for byte; the same key with a different request is 409 IDEMPOTENCY_CONFLICT;
 * a key whose first attempt failed with a domain error stays failed. Requests refused before
 * any work starts (authentication, header, body schema) store nothing, as with Stripe.
 * A key belongs to its caller (tenant and principal); responses carrying secrets are sealed at
 * rest (./secrets.ts). Records are kept 7 days (core/housekeeping/prune.ts, README).
 */
import { createHash } from 'node:crypto';
import { canonicalJson } from '../../shared/canonical-json.ts';
import type { Db, Queryable, TxClient } from '../../shared/db/pool.ts';
import {
  AppError,
  problemContentType,
  renderRefusal,
  scimContentType,
  type ErrorFormat,
} from '../../shared/errors.ts';
import type { Reply } from '../http/route.ts';
import { originalBody, storedForm, type ResponseVault } from './secrets.ts';

/** Printable token characters only; long enough to be unique, short enough to index. */
export const idempotencyKeyPattern = /^[A-Za-z0-9._:-]{8,128}$/;
export const idempotencyHeader = {
  name: 'Idempotency-Key',
  required: false,
  description:
    'Required on every write: 8–128 characters [A-Za-z0-9._:-]; a replay returns the first response byte for byte',
};

/**
 * Whose key it is (DESIGN "Idempotency keys belong to the caller"; issue 13 item 3): the tenant
 * and the principal that core verified or the edge vouched for, as `type:id`. Another
 * principal's key of the same value is a different key: it never replays, blocks or reveals
 * this one.
 */
export type PrincipalType = 'customer' | 'agent' | 'staff' | 'client' | 'service';

/** Rows written before keys were scoped to callers (migration 0710): never replayed, never claimed. */
export const legacyPrincipal = 'legacy';

export function principalOf(type: PrincipalType, id: string | undefined): string {
  if (!id) throw new AppError('UNAUTHORIZED', 'an idempotent write needs an authenticated caller');
  return `${type}:${id}`;
}

export interface IdemScope {
  tenantId: string;
  principal: string;
  key: string;
  method: string;
  path: string;
  requestHash: string;
}

/** The scope of a request's Idempotency-Key (400 when missing or malformed); `hashed` defaults to the body. */
export function scopeOf(
  ctx: { headers: Readonly<Record<string, string>>; method: string; path: string; body?: unknown },
  owner: { tenantId: string; principal: string },
  hashed: unknown = ctx.body ?? {},
): IdemScope {
  return {
    ...owner,
    key: idempotencyKeyOf(ctx.headers),
    method: ctx.method,
    path: ctx.path,
    requestHash: requestHash(ctx.method, ctx.path, hashed),
  };
}

export interface StoredResponse {
  status: number;
  body: string;
  replayed: boolean;
  /** The media type of `body`: JSON, or the route's error format for a stored refusal. */
  contentType?: string;
  /** The handler's own headers (e.g. Cache-Control: no-store on a secret shown once): first answer only. */
  headers?: Record<string, string>;
}

const jsonContentType = 'application/json; charset=utf-8';

/**
 * The media type of a stored body. Nothing but the status is stored with it: a refusal (4xx) was
 * rendered in the route's error format (Problem+JSON on administration routes, SPEC 7.3), and is
 * replayed with that format's type; anything else is JSON.
 */
function storedContentType(status: number, format: ErrorFormat): string {
  if (status < 400 || format === 'core') return jsonContentType;
  return format === 'problem' ? problemContentType : scimContentType;
}

/** Where keys live, and the master-key envelope for responses that carry secrets (./secrets.ts). */
export interface IdemStore {
  db: Db;
  keys: ResponseVault;
}

/** The request's key, or 400 IDEMPOTENCY_KEY_REQUIRED / IDEMPOTENCY_KEY_INVALID. */
export function idempotencyKeyOf(headers: Readonly<Record<string, string>>): string {
  const key = headers['idempotency-key'];
  if (key === undefined || key === '')
    throw new AppError('IDEMPOTENCY_KEY_REQUIRED', 'header Idempotency-Key is required on this write');
  if (!idempotencyKeyPattern.test(key))
    throw new AppError(
      'IDEMPOTENCY_KEY_INVALID',
      'Idempotency-Key must be 8–128 characters of [A-Za-z0-9._:-]',
    );
  return key;
}

/** SHA-256 of method, path and the canonical JSON of the body: key order does not matter. */
export function requestHash(method: string, path: string, body: unknown): string {
  return createHash('sha256')
    .update(`${method} ${path}\n${canonicalJson(body ?? null)}`)
    .digest('hex');
}

export interface KeyRow {
  principal: string;
  request_hash: string;
  response_status: number | null;
  response_body: string | null;
  response_sealed: Buffer | null;
}

/** The caller's record of this key, or else a legacy record of the same key value. */
export async function findKey(q: Queryable, scope: IdemScope): Promise<KeyRow | undefined> {
  const { rows } = await q.query<KeyRow>(
    `SELECT principal, request_hash, response_status, response_body, response_sealed FROM idempotency_keys
      WHERE tenant_id = $1 AND key = $2 AND principal IN ($3, '${legacyPrincipal}') ORDER BY principal = $3 DESC LIMIT 1`,
    [scope.tenantId, scope.key, scope.principal],
  );
  return rows[0];
}

/**
 * The stored response for a key already used (the original, opened when sealed), or 409 when
 * the request differs or the record predates caller scoping (its owner is unknown: neither shown
 * nor run again).
 */
export function replay(
  row: KeyRow,
  scope: IdemScope,
  vault: ResponseVault | undefined,
  format: ErrorFormat = 'core',
): StoredResponse {
  if (row.principal !== scope.principal) {
    throw new AppError(
      'IDEMPOTENCY_CONFLICT',
      'this Idempotency-Key was used before keys were scoped to callers; use a new key',
    );
  }
  if (row.request_hash !== scope.requestHash) {
    throw new AppError('IDEMPOTENCY_CONFLICT', 'this Idempotency-Key was used with a different request');
  }
  if (row.response_status === null || row.response_body === null) {
    throw new AppError('INTERNAL', 'idempotency record without a response');
  }
  return {
    status: row.response_status,
    body: originalBody(vault, scope, row.response_body, row.response_sealed),
    replayed: true,
    contentType: storedContentType(row.response_status, format),
  };
}

/**
 * Claim keys inside the caller's transaction, in key order (no claim deadlocks). A key held
 * by a concurrent transaction waits for it; true means this transaction now owns the key.
 * Callers look for a legacy record first (findKey): none is written any more, so none can
 * appear between that look and this claim.
 */
export async function claimKeys(q: Queryable, scopes: IdemScope[]): Promise<boolean[]> {
  if (scopes.length === 0) return [];
  const { rows } = await q.query<{ tenant_id: string; key: string; principal: string }>(
    `INSERT INTO idempotency_keys (tenant_id, key, principal, method, path, request_hash)
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) ORDER BY 1, 2, 3
     ON CONFLICT DO NOTHING RETURNING tenant_id, key, principal`,
    [
      scopes.map((s) => s.tenantId),
      scopes.map((s) => s.key),
      scopes.map((s) => s.principal),
      scopes.map((s) => s.method),
      scopes.map((s) => s.path),
      scopes.map((s) => s.requestHash),
    ],
  );
  const idOf = (r: { tenantId: string; key: string; principal: string }) =>
    `${r.tenantId}\n${r.key}\n${r.principal}`;
  const won = new Set(rows.map((r) => idOf({ tenantId: r.tenant_id, key: r.key, principal: r.principal })));
  const seen = new Set<string>();
  // Two requests with one key in one batch: the first wins, the second replays after commit.
  return scopes.map((s) => {
    const id = idOf(s);
    const mine = won.has(id) && !seen.has(id);
    seen.add(id);
    return mine;
  });
}

/**
 * Record the responses of claimed keys (same transaction as the claim), secret-bearing ones
 * sealed and redacted (./secrets.ts). `idempotency_complete` (migration 0920) probes the primary
 * key per row whatever the statistics say: a join here let the planner scan the whole (ever
 * growing) key table.
 */
export async function completeKeys(
  q: Queryable,
  vault: ResponseVault | undefined,
  done: { scope: IdemScope; status: number; body: string }[],
): Promise<void> {
  if (done.length === 0) return;
  const rows = done.map((d) => {
    const form = storedForm(vault, d.scope, d.body);
    return {
      tenant: d.scope.tenantId,
      key: d.scope.key,
      principal: d.scope.principal,
      status: d.status,
      body: form.body,
      sealed: form.sealed?.toString('base64') ?? null,
    };
  });
  await q.query('SELECT idempotency_complete($1::jsonb)', [JSON.stringify(rows)]);
}

/**
 * A stored response as the pipeline's reply. A replay says so in a header and is never cached: it
 * may carry a secret shown once, opened from its sealed copy (./secrets.ts).
 */
export function toReply(r: StoredResponse): Reply {
  const headers = r.replayed
    ? { 'idempotent-replayed': 'true', 'cache-control': 'no-store' }
    : (r.headers ?? {});
  // A 204 has no body (its stored form is `null`): sending one broke the route's declaration (a 500).
  if (r.status === 204) return { status: 204, headers };
  return { status: r.status, raw: { contentType: r.contentType ?? jsonContentType, data: r.body }, headers };
}

/** What an idempotent write returns: its status, its body (JSON) and headers for the first answer. */
export interface WriteResult {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

/**
 * The one idempotent write frame of core (issue 21 item 2): every route that honours an
 * Idempotency-Key (customers, agents, ledger, administration) runs through it, so replays,
 * conflicts (409 IDEMPOTENCY_CONFLICT), busy keys (503) and storage are the same everywhere.
 * Run `fn` once per key: claim, run in a savepoint, store its response (or its domain error,
 * rendered in `format`: the effects roll back to the savepoint, the failure is kept) and commit
 * together. `fn` may run more than once when the transaction is retried; only the committed
 * run counts.
 */
export async function withIdempotency(
  store: IdemStore,
  scope: IdemScope,
  fn: (client: TxClient) => Promise<WriteResult>,
  format: ErrorFormat = 'core',
): Promise<StoredResponse> {
  const before = await findKey(store.db, scope);
  if (before) return replay(before, scope, store.keys, format);
  const outcome = await store.db.tx(async (client) => {
    const [mine] = await claimKeys(client, [scope]);
    if (!mine) return undefined;
    await client.query('SAVEPOINT idempotent_work');
    let res: Omit<StoredResponse, 'replayed'>;
    try {
      const r = await fn(client);
      res = { status: r.status, body: JSON.stringify(r.body ?? null), headers: r.headers ?? {} };
    } catch (err) {
      if (!(err instanceof AppError) || err.status >= 500) throw err;
      await client.query('ROLLBACK TO SAVEPOINT idempotent_work');
      const rendered = renderRefusal(err, format, scope.path);
      res = { status: err.status, body: rendered.body, contentType: storedContentType(err.status, format) };
    }
    await completeKeys(client, store.keys, [{ scope, status: res.status, body: res.body }]);
    return res;
  });
  if (outcome) return { ...outcome, replayed: false };
  const after = await findKey(store.db, scope);
  if (!after) throw new AppError('SERVICE_UNAVAILABLE', 'idempotency key is busy; retry');
  return replay(after, scope, store.keys, format);
}
