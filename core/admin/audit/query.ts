/**
 * Audit query (SPEC 2.8, 4.6 audit) over the hash-chained audit_log of the caller's tenant, or,
 * for platform admins, of `_platform` (issue 20 item 5): the chain of unauthenticated,
 * unknown-tenant and fail-closed decisions, which names no tenant.
 */
import { Type } from '@sinclair/typebox';
import { verifyChain } from '../../../shared/audit.ts';
import type { Queryable } from '../../../shared/db/pool.ts';
import { AppError } from '../../../shared/errors.ts';
import type { RouteSpec } from '../../http/route.ts';
import { operatorTenant } from '../../platform/operator.ts';
import { adminRoute, type AdminDeps, type Caller } from '../http.ts';
import type { PageRequest } from '../../http/cursor.ts';
import { AuditPage, AuditRecord, pageQuery } from '../schemas.ts';
import { declared } from '../../http/declared.ts';
import { uuidText } from '../../../shared/uuid.ts';

interface AuditRow {
  id: string;
  ts: Date;
  tenant_id: string;
  actor: unknown;
  action: string;
  target: unknown;
  decision: unknown;
  attrs: unknown;
  prev_hash: Buffer;
  row_hash: Buffer;
}

const view = (r: AuditRow) => ({
  id: Number(r.id),
  ts: r.ts.toISOString(),
  tenant_id: r.tenant_id,
  actor: r.actor,
  action: r.action,
  target: r.target,
  decision: r.decision,
  attrs: r.attrs,
  prev_hash: r.prev_hash.toString('hex'),
  row_hash: r.row_hash.toString('hex'),
});

export interface AuditFilter {
  actor?: string | undefined;
  action?: string | undefined;
  targetType?: string | undefined;
  targetId?: string | undefined;
  from?: string | undefined;
  to?: string | undefined;
}

/**
 * Ids the platform makes are UUIDs, canonically lower case but read in any case (RFC 9562 4):
 * one given in any case names the same record, and so does one a writer stored as its caller
 * spelled it (a fraud hold placed naming the wallet in upper case: core/ledger/reads.ts reads
 * any case, and the hold's audit record keeps the spelling), so a UUID is compared without case
 * on both sides. Other ids (country codes, tenant ids, idempotency keys) are matched as given.
 */
const isUuid = (id: string | undefined): boolean => id !== undefined && uuidText.test(id);
const uuidCase = (id: string | undefined) => (isUuid(id) ? id?.toLowerCase() : id);

/** Newest first; the cursor is the last id seen (ids only grow, so the order is stable). */
export async function auditPage(q: Queryable, tenantId: string, f: AuditFilter, page: PageRequest) {
  const before = page.after?.[0];
  const { rows } = await q.query<AuditRow>(
    `SELECT id, ts, tenant_id, actor, action, target, decision, attrs, prev_hash, row_hash FROM audit_log
      WHERE tenant_id = $1 AND ($2::text IS NULL OR actor->>'id' = $2 OR ($10 AND lower(actor->>'id') = $2))
        AND ($3::text IS NULL OR action = $3 OR action LIKE $3 || '.%')
        AND ($4::text IS NULL OR target->>'type' = $4) AND ($5::text IS NULL OR target->>'id' = $5 OR ($11 AND lower(target->>'id') = $5))
        AND ($6::timestamptz IS NULL OR ts >= $6) AND ($7::timestamptz IS NULL OR ts < $7) AND ($8::bigint IS NULL OR id < $8)
      ORDER BY id DESC LIMIT $9`,
    [
      tenantId,
      uuidCase(f.actor) ?? null,
      f.action ?? null,
      f.targetType ?? null,
      uuidCase(f.targetId) ?? null,
      f.from ?? null,
      f.to ?? null,
      before ?? null,
      page.limit + 1,
      isUuid(f.actor),
      isUuid(f.targetId),
    ],
  );
  const { items, next_cursor } = page.finish(rows, (r) => [Number(r.id)]);
  return { items: items.map(view), next_cursor };
}

/** The edge's chain for decisions that name no tenant (edge/authz.ts). */
export const platformChain = '_platform';

const Chain = Type.Optional(
  Type.Union([Type.Literal('tenant'), Type.Literal('platform')], {
    description:
      "`tenant` (default): the caller's tenant; `platform`: the `_platform` records (platform admins only: Admins of the operator tenant)",
  }),
);

/**
 * The chain a request reads: the caller's tenant's, or `_platform` for a platform admin (an
 * Admin of the operator tenant, as for tenant creation); anyone else is refused, not shown an
 * empty page.
 */
async function chainOf(
  q: Queryable,
  caller: Caller,
  chain: 'tenant' | 'platform' | undefined,
): Promise<string> {
  if (chain !== 'platform') return caller.tenantId;
  if (!caller.roles.includes('admin') || (await operatorTenant(q)) !== caller.tenantId) {
    throw new AppError(
      'FORBIDDEN',
      "only platform administrators (the operator tenant's Admins) read the _platform audit records",
    );
  }
  return platformChain;
}

const Query = Type.Object({
  ...pageQuery,
  chain: Chain,
  actor: Type.Optional(Type.String({ maxLength: 128 })),
  action: Type.Optional(
    Type.String({ maxLength: 64, description: 'exact action or a prefix such as `country`' }),
  ),
  resource: Type.Optional(Type.String({ maxLength: 64, description: 'target type, e.g. country' })),
  resource_id: Type.Optional(Type.String({ maxLength: 128 })),
  from: Type.Optional(Type.String({ format: 'date-time' })),
  to: Type.Optional(Type.String({ format: 'date-time' })),
});

/** shared/audit.ts ChainReport: intact, or where and why the chain breaks. */
const ChainReport = Type.Union([
  Type.Object({ ok: Type.Literal(true), count: Type.Integer({ minimum: 0 }) }),
  Type.Object({
    ok: Type.Literal(false),
    count: Type.Integer({ minimum: 0 }),
    brokenAt: Type.Integer(),
    reason: Type.String(),
  }),
]);

export function auditRoutes(deps: AdminDeps): RouteSpec[] {
  const tags = ['admin.audit'];
  return [
    adminRoute(deps, {
      ...declared('GET', '/v1/audit'),
      operationId: 'listAudit',
      summary: 'Query audit records by actor, action, resource, time (cursor)',
      tags,
      mode: 'read',
      query: Query,
      responses: { 200: { description: 'A page of audit records, newest first', schema: AuditPage } },
      read: async (ctx, caller) => {
        const chain = await chainOf(deps.db, caller, ctx.query.chain);
        // The cursor is bound to the chain read, so a page of one never continues the other.
        return {
          status: 200,
          body: await auditPage(
            deps.db,
            chain,
            {
              actor: ctx.query.actor,
              action: ctx.query.action,
              targetType: ctx.query.resource,
              targetId: ctx.query.resource_id,
              from: ctx.query.from,
              to: ctx.query.to,
            },
            await deps.pages.open(ctx, chain, 1),
          ),
        };
      },
    }),
    adminRoute(deps, {
      ...declared('GET', '/v1/audit:verify'),
      operationId: 'verifyAuditChain',
      summary:
        "Verify the tenant's audit hash chain, or `_platform`'s with chain=platform (Ops; platform: platform admins)",
      tags,
      mode: 'read',
      query: Type.Object({ chain: Chain }),
      responses: { 200: { description: '{ok, count, brokenAt?, reason?}', schema: ChainReport } },
      read: async (ctx, caller) => ({
        status: 200,
        body: await verifyChain(deps.db, await chainOf(deps.db, caller, ctx.query.chain)),
      }),
    }),
    adminRoute(deps, {
      ...declared('GET', '/v1/audit/{id}'),
      operationId: 'getAudit',
      summary: 'One audit record',
      tags,
      mode: 'read',
      params: Type.Object({ id: Type.String({ pattern: '^[0-9]{1,18}$' }) }),
      query: Type.Object({ chain: Chain }),
      responses: { 200: { description: 'The record', schema: AuditRecord } },
      read: async (ctx, caller) => {
        const { rows } = await deps.db.query<AuditRow>(
          'SELECT id, ts, tenant_id, actor, action, target, decision, attrs, prev_hash, row_hash FROM audit_log WHERE tenant_id = $1 AND id = $2',
          [await chainOf(deps.db, caller, ctx.query.chain), ctx.params.id],
        );
        const row = rows[0];
        if (!row) throw new AppError('AUDIT_NOT_FOUND', `no audit record ${ctx.params.id}`);
        return { status: 200, body: view(row) };
      },
    }),
  ];
}
