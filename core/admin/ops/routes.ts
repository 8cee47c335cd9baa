/**
 * Operational routes (SPEC 4.6 outbox, idempotency, rotate-keys). Outbox payloads of events
 * marked `content-class: secret` (e.g. SMS with one-time codes) are never returned.
 */
import { Type } from '@sinclair/typebox';
import type { Queryable } from '../../../shared/db/pool.ts';
import { AppError } from '../../../shared/errors.ts';
import type { RouteSpec } from '../../http/route.ts';
import { graceKeysMax, maxGraceS } from '../../keys/keys.ts';
import { adminRoute, type AdminDeps } from '../http.ts';
import { Nullable, Page, Timestamp, Uuid, pageQuery } from '../schemas.ts';
import { declared } from '../../http/declared.ts';

interface OutboxRow {
  id: string;
  aggregate: string;
  aggregate_id: string;
  event: string;
  payload: unknown;
  headers: Record<string, string>;
  attempts: number;
  status: string;
  next_attempt_at: Date;
  last_error: string | null;
  created_at: Date;
  processed_at: Date | null;
}
const oCols =
  'id, aggregate, aggregate_id, event, payload, headers, attempts, status, next_attempt_at, last_error, created_at, processed_at';
const secret = (r: OutboxRow) => r.headers['content-class'] === 'secret';
const oView = (r: OutboxRow, full: boolean) => ({
  id: r.id,
  aggregate: r.aggregate,
  aggregate_id: r.aggregate_id,
  event: r.event,
  attempts: r.attempts,
  status: r.status,
  next_attempt_at: r.next_attempt_at.toISOString(),
  last_error: r.last_error,
  created_at: r.created_at.toISOString(),
  processed_at: r.processed_at?.toISOString() ?? null,
  ...(full ? { payload: secret(r) ? '[redacted]' : r.payload, headers: r.headers } : {}),
});

/**
 * Idempotency records (issue 13 items 3 and 7): a key value is unique per (tenant, principal), so
 * each record shows its principal (`legacy` for records written before keys were scoped to
 * callers) and one record is addressed by key and, when several principals used that key value,
 * `?principal=`. The stored body shown is the redacted one: a response that carried a secret is
 * sealed at rest and only its caller's replay opens it (`secret_redacted`).
 */
interface IdemRow {
  key: string;
  principal: string;
  method: string;
  path: string;
  request_hash: string;
  response_status: number | null;
  response_body: string | null;
  secret_redacted: boolean;
  created_at: Date;
}
const iCols =
  'key, principal, method, path, request_hash, response_status, response_body, response_sealed IS NOT NULL AS secret_redacted, created_at';
const iView = (r: IdemRow, body: boolean) => ({
  key: r.key,
  principal: r.principal,
  method: r.method,
  path: r.path,
  request_hash: r.request_hash,
  response_status: r.response_status,
  secret_redacted: r.secret_redacted,
  created_at: r.created_at.toISOString(),
  ...(body ? { response_body: r.response_body } : {}),
});
const OutboxStatus = Type.Union([Type.Literal('PENDING'), Type.Literal('DELIVERED'), Type.Literal('DEAD')]);
/** An outbox message without its payload (list, retry). */
const OutboxSummary = Type.Object({
  id: Uuid,
  aggregate: Type.String(),
  aggregate_id: Type.String(),
  event: Type.String(),
  attempts: Type.Integer({ minimum: 0 }),
  status: OutboxStatus,
  next_attempt_at: Timestamp,
  last_error: Nullable(Type.String()),
  created_at: Timestamp,
  processed_at: Nullable(Timestamp),
});
/** With payload (`[redacted]` for a secret event) and headers. */
const OutboxMessage = Type.Intersect([
  OutboxSummary,
  Type.Object({ payload: Type.Unknown(), headers: Type.Record(Type.String(), Type.String()) }),
]);
/** An idempotency record's metadata; `response_body` for Admin only. */
const IdemRecord = Type.Object({
  key: Type.String(),
  principal: Type.String(),
  method: Type.String(),
  path: Type.String(),
  request_hash: Type.String(),
  response_status: Nullable(Type.Integer()),
  secret_redacted: Type.Boolean(),
  created_at: Timestamp,
  response_body: Type.Optional(Nullable(Type.String())),
});
const IdemKey = Type.Object({ key: Type.String({ pattern: '^[A-Za-z0-9._:-]{8,128}$' }) });
const Principal = Type.String({
  minLength: 1,
  maxLength: 300,
  description: "the record's principal (as listed); needed when several principals used this key value",
});
const IdemAddress = Type.Object({ principal: Type.Optional(Principal) });

/** The one record a key (and optional principal) names: 404 when none, 409 when the key alone is ambiguous. */
async function oneRecord(
  q: Queryable,
  tenantId: string,
  key: string,
  principal: string | undefined,
): Promise<IdemRow> {
  const { rows } = await q.query<IdemRow>(
    `SELECT ${iCols} FROM idempotency_keys WHERE tenant_id = $1 AND key = $2 AND ($3::text IS NULL OR principal = $3) ORDER BY principal LIMIT 2`,
    [tenantId, key, principal ?? null],
  );
  if (!rows[0])
    throw new AppError(
      'IDEMPOTENCY_NOT_FOUND',
      `no idempotency record ${key}${principal === undefined ? '' : ` of ${principal}`}`,
    );
  if (rows.length > 1)
    throw new AppError(
      'CONFLICT',
      `several principals used the key ${key}: name one with ?principal= (GET /v1/idempotency?key= lists them)`,
    );
  return rows[0];
}

const OutboxParams = Type.Object({ id: Uuid });

const listOutboxRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/outbox'),
    operationId: 'listOutbox',
    summary: 'Outbox messages (default unprocessed; filter by aggregate, event, status)',
    tags: ['admin.outbox'],
    mode: 'read',
    query: Type.Object({
      ...pageQuery,
      aggregate: Type.Optional(Type.String({ maxLength: 64 })),
      event: Type.Optional(Type.String({ maxLength: 128 })),
      status: Type.Optional(
        Type.Union([
          Type.Literal('PENDING'),
          Type.Literal('DELIVERED'),
          Type.Literal('DEAD'),
          Type.Literal('ALL'),
        ]),
      ),
    }),
    responses: {
      200: {
        description: 'A page of outbox messages (oldest first, without payloads)',
        schema: Page(OutboxSummary),
      },
    },
    read: async (ctx, caller) => {
      const page = await deps.pages.open(ctx, caller.tenantId, 1);
      const after = page.after?.[0];
      const status = ctx.query.status ?? 'PENDING';
      const { rows } = await deps.db.query<OutboxRow>(
        `SELECT ${oCols} FROM outbox WHERE tenant_id = $1 AND ($2::text = 'ALL' OR status = $2) AND ($3::text IS NULL OR aggregate = $3) AND ($4::text IS NULL OR event = $4)
              AND ($5::uuid IS NULL OR id > $5) ORDER BY id LIMIT $6`,
        [
          caller.tenantId,
          status,
          ctx.query.aggregate ?? null,
          ctx.query.event ?? null,
          after ?? null,
          page.limit + 1,
        ],
      );
      const { items, next_cursor } = page.finish(rows, (r) => [r.id]);
      return { status: 200, body: { items: items.map((r) => oView(r, false)), next_cursor } };
    },
  });

const getOutboxRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/outbox/{id}'),
    operationId: 'getOutbox',
    summary: 'One outbox message with payload and headers',
    tags: ['admin.outbox'],
    mode: 'read',
    params: OutboxParams,
    responses: { 200: { description: 'The message', schema: OutboxMessage } },
    read: async (ctx, caller) => {
      const { rows } = await deps.db.query<OutboxRow>(
        `SELECT ${oCols} FROM outbox WHERE tenant_id = $1 AND id = $2`,
        [caller.tenantId, ctx.params.id],
      );
      if (!rows[0]) throw new AppError('OUTBOX_NOT_FOUND', `no outbox message ${ctx.params.id}`);
      return { status: 200, body: oView(rows[0], true) };
    },
  });

const retryOutboxRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/outbox/{id}:retry'),
    operationId: 'retryOutbox',
    summary: 'Retry a message now (its dead or pending deliveries are due again)',
    tags: ['admin.outbox'],
    mode: 'write',
    params: OutboxParams,
    responses: { 200: { description: 'The message (without payload)', schema: OutboxSummary } },
    write: async (ctx, w) => {
      const { rows } = await w.q.query<OutboxRow>(
        `UPDATE outbox SET status = 'PENDING', next_attempt_at = $3, processed_at = NULL WHERE tenant_id = $1 AND id = $2 AND status <> 'DELIVERED' RETURNING ${oCols}`,
        [w.caller.tenantId, ctx.params.id, new Date(deps.now())],
      );
      if (!rows[0]) {
        const { rows: existing } = await w.q.query('SELECT 1 FROM outbox WHERE tenant_id = $1 AND id = $2', [
          w.caller.tenantId,
          ctx.params.id,
        ]);
        if (!existing[0]) throw new AppError('OUTBOX_NOT_FOUND', `no outbox message ${ctx.params.id}`);
        throw new AppError('CONFLICT', 'the message was delivered; nothing to retry');
      }
      await w.q.query(
        `UPDATE admin_webhook_deliveries SET status = 'PENDING', attempts = 0, next_attempt_at = $2 WHERE outbox_id = $1 AND status <> 'DELIVERED' AND lease_token IS NULL`,
        [ctx.params.id, new Date(deps.now())],
      );
      await w.audit('outbox.retry', { type: 'outbox', id: ctx.params.id });
      return { status: 200, body: oView(rows[0], false) };
    },
  });

const retryOutboxBatchRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/outbox:retry-batch'),
    operationId: 'retryOutboxBatch',
    summary: 'Retry undelivered messages in a time window with at least N attempts',
    tags: ['admin.outbox'],
    mode: 'write',
    body: Type.Object(
      {
        from: Type.String({ format: 'date-time' }),
        to: Type.String({ format: 'date-time' }),
        minAttempts: Type.Optional(Type.Integer({ minimum: 0 })),
        max: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
      },
      { additionalProperties: false },
    ),
    responses: {
      200: {
        description: '{retried, ids}',
        schema: Type.Object({ retried: Type.Integer({ minimum: 0 }), ids: Type.Array(Uuid) }),
      },
    },
    write: async (ctx, w) => {
      const { rows } = await w.q.query<{ id: string }>(
        `UPDATE outbox SET status = 'PENDING', next_attempt_at = $5, processed_at = NULL WHERE id IN (
             SELECT id FROM outbox WHERE tenant_id = $1 AND status <> 'DELIVERED' AND created_at >= $2 AND created_at < $3 AND attempts >= $4 ORDER BY id LIMIT $6) RETURNING id`,
        [
          w.caller.tenantId,
          ctx.body.from,
          ctx.body.to,
          ctx.body.minAttempts ?? 0,
          new Date(deps.now()),
          ctx.body.max ?? 1000,
        ],
      );
      const ids = rows.map((r) => r.id);
      await w.q.query(
        `UPDATE admin_webhook_deliveries SET status = 'PENDING', attempts = 0, next_attempt_at = $2 WHERE outbox_id = ANY($1::uuid[]) AND status <> 'DELIVERED' AND lease_token IS NULL`,
        [ids, new Date(deps.now())],
      );
      await w.audit(
        'outbox.retry_batch',
        { type: 'outbox', id: '*' },
        { from: ctx.body.from, to: ctx.body.to, retried: ids.length },
      );
      return { status: 200, body: { retried: ids.length, ids } };
    },
  });

const searchIdempotencyRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/idempotency'),
    operationId: 'searchIdempotency',
    summary: 'Search idempotency records by key, method, path, date (Ops only)',
    tags: ['admin.idempotency'],
    mode: 'read',
    query: Type.Object({
      ...pageQuery,
      key: Type.Optional(Type.String({ maxLength: 128 })),
      principal: Type.Optional(Principal),
      method: Type.Optional(Type.String({ maxLength: 8 })),
      path: Type.Optional(Type.String({ maxLength: 256 })),
      from: Type.Optional(Type.String({ format: 'date-time' })),
      to: Type.Optional(Type.String({ format: 'date-time' })),
    }),
    responses: {
      200: {
        description: "A page of records (metadata only, with each record's principal)",
        schema: Page(IdemRecord),
      },
    },
    read: async (ctx, caller) => {
      const page = await deps.pages.open(ctx, caller.tenantId, 2);
      const [afterKey, afterPrincipal] = page.after ?? [];
      const { rows } = await deps.db.query<IdemRow>(
        `SELECT ${iCols} FROM idempotency_keys
            WHERE tenant_id = $1 AND ($2::text IS NULL OR key LIKE $2 || '%') AND ($3::text IS NULL OR method = upper($3)) AND ($4::text IS NULL OR path LIKE $4 || '%')
              AND ($5::timestamptz IS NULL OR created_at >= $5) AND ($6::timestamptz IS NULL OR created_at < $6) AND ($7::text IS NULL OR (key, principal) > ($7, $8::text))
              AND ($10::text IS NULL OR principal = $10) ORDER BY key, principal LIMIT $9`,
        [
          caller.tenantId,
          ctx.query.key ?? null,
          ctx.query.method ?? null,
          ctx.query.path ?? null,
          ctx.query.from ?? null,
          ctx.query.to ?? null,
          afterKey === undefined ? null : String(afterKey),
          afterPrincipal === undefined ? null : String(afterPrincipal),
          page.limit + 1,
          ctx.query.principal ?? null,
        ],
      );
      const { items, next_cursor } = page.finish(rows, (r) => [r.key, r.principal]);
      return { status: 200, body: { items: items.map((r) => iView(r, false)), next_cursor } };
    },
  });

const getIdempotencyRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/idempotency/{key}'),
    operationId: 'getIdempotency',
    summary:
      'One record (?principal= when several principals used the key): metadata; the stored body, secrets redacted, only for Admin (Internal)',
    tags: ['admin.idempotency'],
    mode: 'read',
    params: IdemKey,
    query: IdemAddress,
    responses: { 200: { description: 'The record', schema: IdemRecord } },
    read: async (ctx, caller) => {
      const row = await oneRecord(deps.db, caller.tenantId, ctx.params.key, ctx.query.principal);
      return { status: 200, body: iView(row, caller.roles.includes('admin')) };
    },
  });

const purgeIdempotencyRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('DELETE', '/v1/idempotency/{key}'),
    operationId: 'purgeIdempotency',
    summary: 'Purge a record (Admin or Ops; ?principal= when several principals used the key)',
    tags: ['admin.idempotency'],
    mode: 'write',
    params: IdemKey,
    query: IdemAddress,
    responses: { 204: { description: 'Purged' } },
    write: async (ctx, w) => {
      const row = await oneRecord(w.q, w.caller.tenantId, ctx.params.key, ctx.query.principal);
      await w.q.query('DELETE FROM idempotency_keys WHERE tenant_id = $1 AND key = $2 AND principal = $3', [
        w.caller.tenantId,
        row.key,
        row.principal,
      ]);
      await w.audit(
        'idempotency.purge',
        { type: 'idempotency', id: ctx.params.key },
        { principal: row.principal },
      );
      return { status: 204 };
    },
  });

const rotateKeysRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/admin/rotate-keys'),
    operationId: 'rotateKeys',
    summary: `Internal: rotate the tenant's signing keys (previous key in grace, ≤ 24 h; the ${graceKeysMax} newest previous keys at most stay in grace, older ones are retired and named in the audit record)`,
    tags: ['platform'],
    mode: 'write',
    body: Type.Object(
      { graceSeconds: Type.Optional(Type.Integer({ minimum: 0, maximum: maxGraceS })) },
      { additionalProperties: false },
    ),
    responses: {
      200: {
        description: '{active, grace, graceSeconds}',
        schema: Type.Object({
          active: Type.String(),
          grace: Nullable(Type.String()),
          graceSeconds: Type.Integer({ minimum: 0 }),
        }),
      },
    },
    write: async (ctx, w) => {
      // The rotation and its audit record commit together; this process's key cache is dropped after.
      const grace = ctx.body.graceSeconds ?? 3600;
      const r = await deps.keys.rotateIn(w.q, w.caller.tenantId, grace);
      w.afterCommit(() => deps.keys.invalidate(w.caller.tenantId));
      await w.audit(
        'keys.rotate',
        { type: 'signing_key', id: r.kid },
        {
          previous: r.previous ?? null,
          graceSeconds: grace,
          ...(r.retired.length ? { retired: r.retired } : {}),
        },
      );
      return { status: 200, body: { active: r.kid, grace: r.previous ?? null, graceSeconds: grace } };
    },
  });

export function opsRoutes(deps: AdminDeps): RouteSpec[] {
  return [
    listOutboxRoute(deps),
    getOutboxRoute(deps),
    retryOutboxRoute(deps),
    retryOutboxBatchRoute(deps),
    searchIdempotencyRoute(deps),
    getIdempotencyRoute(deps),
    purgeIdempotencyRoute(deps),
    rotateKeysRoute(deps),
  ];
}
