/**
 * Relationship tuples of a tenant (SPEC 2.7; issue 20 item 3): list (filter by subject, object,
 * relation; house cursor), write (upsert with its caveat; Idempotency-Key) and delete, by the
 * tenant's Admins, or by the operator's platform admins for a tenant they own (its read-only
 * `parent` view lists). What a tuple may say is ./rules.ts. Every change is audited in the
 * caller's chain and, when the tenant is another, in the tenant's own; the table's trigger
 * NOTIFYs `tuples_changed`, on which the edge drops the subject's cached tuples.
 */
import { Type, type Static } from '@sinclair/typebox';
import { appendAudit } from '../../../shared/audit.ts';
import type { Queryable } from '../../../shared/db/pool.ts';
import { AppError } from '../../../shared/errors.ts';
import type { RouteSpec } from '../../http/route.ts';
import { TenantId } from '../../identity/schemas.ts';
import { operatorTenant } from '../../platform/operator.ts';
import { actorAttrs, adminRoute, type AdminDeps, type Caller, type WriteCtx } from '../http.ts';
import { Page, Timestamp, pageQuery } from '../schemas.ts';
import { checkTuple, namespaces, relations, storedCaveat, type TupleInput, type Writer } from './rules.ts';
import { declared } from '../../http/declared.ts';
import { releaseDelegation, releasedCode, type Released } from '../../payments/revocation.ts';

const Namespace = Type.Union(namespaces.map((n) => Type.Literal(n)));
const Relation = Type.Union(relations.map((r) => Type.Literal(r)));
const EntityId = Type.String({ minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9._-]+$' });
const Ref = Type.Object({ ns: Namespace, id: EntityId }, { additionalProperties: false });
const RefFilter = Type.String({
  maxLength: 160,
  pattern: `^(${namespaces.join('|')}):[A-Za-z0-9._-]{1,128}$`,
  description: '`ns:id`, e.g. customer:<uuid> or tenant:<id>',
});
const Caveat = Type.Object(
  {
    expires_at: Type.Optional(
      Type.String({ format: 'date-time', description: 'RFC 3339; the tuple is ignored after it' }),
    ),
    hours: Type.Optional(
      Type.Object(
        { from: Type.Integer({ minimum: 0, maximum: 23 }), to: Type.Integer({ minimum: 1, maximum: 24 }) },
        { additionalProperties: false, description: 'tenant-local hours, from inclusive, to exclusive' },
      ),
    ),
    ip_ranges: Type.Optional(
      Type.Array(Type.String({ maxLength: 64 }), {
        minItems: 1,
        maxItems: 32,
        description: 'CIDR ranges the request must come from',
      }),
    ),
  },
  { additionalProperties: false },
);
const Key = { subject: Ref, relation: Relation, object: Ref };
const WriteBody = Type.Object({ ...Key, caveat: Type.Optional(Caveat) }, { additionalProperties: false });
const KeyBody = Type.Object(Key, { additionalProperties: false });
const Tuple = Type.Object({
  tenant_id: Type.String(),
  subject: Type.Object({ ns: Type.String(), id: Type.String() }),
  relation: Type.String(),
  object: Type.Object({ ns: Type.String(), id: Type.String() }),
  caveat: Type.Record(Type.String(), Type.Unknown()),
  created_at: Timestamp,
});
const Params = Type.Object({ tenantId: TenantId });

interface TupleRow {
  tenant_id: string;
  subject_ns: string;
  subject_id: string;
  relation: string;
  object_ns: string;
  object_id: string;
  caveat: Record<string, unknown>;
  created_at: Date;
}
const cols = 'tenant_id, subject_ns, subject_id, relation, object_ns, object_id, caveat, created_at';
const view = (r: TupleRow) => ({
  tenant_id: r.tenant_id,
  subject: { ns: r.subject_ns, id: r.subject_id },
  relation: r.relation,
  object: { ns: r.object_ns, id: r.object_id },
  caveat: r.caveat,
  created_at: r.created_at.toISOString(),
});
/** The tuples a tenant's list shows: its own, and the operator's grants over it. */
const ofTenant = `(tenant_id = $1 OR (object_ns = 'tenant' AND object_id = $1))`;
const keyId = (t: Static<typeof KeyBody>) =>
  `${t.subject.ns}:${t.subject.id}#${t.relation}@${t.object.ns}:${t.object.id}`;
const tupleTarget = (t: Static<typeof KeyBody>) => ({ type: 'relationship_tuple', id: keyId(t) });

/** Live tenant-to-tenant relations (expires_at only; the edge applies hours and ip_ranges). */
async function relationsTo(q: Queryable, from: string, to: string): Promise<string[]> {
  const { rows } = await q.query<{ relation: string }>(
    `SELECT relation FROM relationship_tuples WHERE subject_ns = 'tenant' AND subject_id = $1 AND object_ns = 'tenant' AND object_id = $2
       AND (coalesce(caveat->>'expires_at', '') = '' OR (caveat->>'expires_at')::timestamptz > now())`,
    [from, to],
  );
  return rows.map((r) => r.relation);
}

/**
 * Refuse a caller acting on another tenant's tuples unless its tenant owns that tenant (reads
 * and writes) or is the operator with a `parent` view of it (reads): checked again here after
 * the edge's policy (owner_actions, parent_actions). 404, so another tenant's existence is not told.
 */
async function requireReach(q: Queryable, caller: Caller, tenantId: string, write: boolean): Promise<void> {
  if (caller.tenantId === tenantId) return;
  const held = await relationsTo(q, caller.tenantId, tenantId);
  if (held.includes('owner')) return;
  if (!write && held.includes('parent') && (await operatorTenant(q)) === caller.tenantId) return;
  throw new AppError('TENANT_NOT_FOUND', `no tenant ${tenantId}`);
}

async function writerOf(q: Queryable, caller: Caller): Promise<Writer> {
  const operator = await operatorTenant(q);
  return {
    tenantId: caller.tenantId,
    operator,
    platformAdmin: operator === caller.tenantId && caller.roles.includes('admin'),
  };
}

/** The record in the caller's chain, and in the tenant's own when the caller is another tenant. */
async function auditBoth(
  w: WriteCtx,
  tenantId: string,
  action: string,
  target: { type: string; id: string },
  attrs: Record<string, unknown>,
): Promise<void> {
  await w.audit(action, target, { tenant: tenantId, ...attrs });
  if (tenantId === w.caller.tenantId) return;
  await appendAudit(w.q, [
    {
      tenantId,
      actor: { type: 'staff', id: w.caller.principalId },
      action,
      target,
      attrs: { actor_tenant: w.caller.tenantId, roles: w.caller.roles, ...actorAttrs(w.caller), ...attrs },
    },
  ]);
}

/**
 * admin_tenant_owners is the same fact as an owner tuple between tenants (migration 0420; core's
 * tenant routes read it): kept in step, so removing the operator's ownership removes it there too.
 */
async function mirrorOwnership(q: Queryable, t: Static<typeof KeyBody>, held: boolean): Promise<void> {
  if (!(t.relation === 'owner' && t.subject.ns === 'tenant' && t.object.ns === 'tenant')) return;
  if (held)
    await q.query(
      'INSERT INTO admin_tenant_owners (tenant_id, owner_tenant_id) VALUES ($1, $2) ON CONFLICT (tenant_id) DO NOTHING',
      [t.object.id, t.subject.id],
    );
  else
    await q.query('DELETE FROM admin_tenant_owners WHERE tenant_id = $1 AND owner_tenant_id = $2', [
      t.object.id,
      t.subject.id,
    ]);
}

async function writeTuple(
  w: WriteCtx,
  tenantId: string,
  t: TupleInput,
  nowMs: number,
): Promise<{ status: number; body: unknown }> {
  await requireReach(w.q, w.caller, tenantId, true);
  const storedIn = await checkTuple(w.q, tenantId, t, await writerOf(w.q, w.caller), nowMs);
  const caveat = JSON.stringify(storedCaveat(t.caveat));
  // xmax = 0 only on a row this statement inserted; `before` reads the statement's snapshot (the
  // caveat as it was), so rewriting a tuple as it stands is neither a change nor audited.
  const { rows } = await w.q.query<TupleRow & { inserted: boolean; changed: boolean }>(
    `WITH before AS (SELECT caveat FROM relationship_tuples WHERE subject_ns = $2 AND subject_id = $3 AND relation = $4 AND object_ns = $5 AND object_id = $6)
     INSERT INTO relationship_tuples AS r (tenant_id, subject_ns, subject_id, relation, object_ns, object_id, caveat)
     VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)
     ON CONFLICT (subject_ns, subject_id, relation, object_ns, object_id) DO UPDATE SET caveat = EXCLUDED.caveat
       WHERE r.tenant_id = EXCLUDED.tenant_id
     RETURNING ${cols}, (xmax = 0) AS inserted, ((SELECT caveat FROM before) IS DISTINCT FROM r.caveat) AS changed`,
    [storedIn, t.subject.ns, t.subject.id, t.relation, t.object.ns, t.object.id, caveat],
  );
  const row = rows[0];
  // The key exists under another tenant: never moved or overwritten from here.
  if (!row) throw new AppError('TUPLE_INVALID', `${keyId(t)} is held by another tenant`);
  if (row.inserted) await mirrorOwnership(w.q, t, true);
  if (row.inserted || row.changed)
    await auditBoth(w, tenantId, row.inserted ? 'tuple.create' : 'tuple.update', tupleTarget(t), {
      caveat: row.caveat,
    });
  return { status: row.inserted ? 201 : 200, body: view(row) };
}

async function deleteTuple(
  w: WriteCtx,
  tenantId: string,
  t: Static<typeof KeyBody>,
  nowMs: number,
): Promise<{ status: number; body: unknown }> {
  await requireReach(w.q, w.caller, tenantId, true);
  // Taking away owner, admin or parent over a tenant is the platform admins' as granting is.
  if (
    t.object.ns === 'tenant' &&
    ['owner', 'admin', 'parent'].includes(t.relation) &&
    !(await writerOf(w.q, w.caller)).platformAdmin
  ) {
    throw new AppError(
      'TUPLE_PLATFORM_ONLY',
      `only platform administrators remove ${t.relation} over a tenant`,
    );
  }
  const { rows } = await w.q.query<TupleRow>(
    `DELETE FROM relationship_tuples WHERE subject_ns = $2 AND subject_id = $3 AND relation = $4 AND object_ns = $5 AND object_id = $6 AND ${ofTenant}
     RETURNING ${cols}`,
    [tenantId, t.subject.ns, t.subject.id, t.relation, t.object.ns, t.object.id],
  );
  const row = rows[0];
  if (!row) throw new AppError('TUPLE_NOT_FOUND', `no tuple ${keyId(t)} in tenant ${tenantId}`);
  await mirrorOwnership(w.q, t, false);
  // Before any audit record: the audit head comes last in the lock order (./revocation.ts).
  const released = await releasePayer(w.q, row, nowMs);
  await auditBoth(w, tenantId, 'tuple.delete', tupleTarget(t), {
    caveat: row.caveat,
    ...(row.relation === 'payer' ? { released_transfer_ids: released.map((r) => r.transfer_id) } : {}),
  });
  for (const r of released)
    await auditBoth(
      w,
      tenantId,
      'transfer.release',
      { type: 'transfer', id: r.transfer_id },
      {
        ...r,
        tuple: keyId(t),
        status: 'FAILED',
        code: releasedCode,
      },
    );
  return { status: 200, body: view(row) };
}

/**
 * A deleted `payer` tuple releases the delegate's pending transfers from the owner's wallet, in
 * this transaction (issue 20 item 3; core/payments/revocation.ts): their holds voided, FAILED.
 */
async function releasePayer(q: Queryable, row: TupleRow, nowMs: number): Promise<Released[]> {
  if (!(row.relation === 'payer' && row.subject_ns === 'customer' && row.object_ns === 'customer')) return [];
  return releaseDelegation(
    q,
    { tenantId: row.tenant_id, delegate: row.subject_id, owner: row.object_id },
    nowMs,
  );
}

const splitRef = (r: string | undefined): [string | null, string | null] => {
  if (r === undefined) return [null, null];
  const at = r.indexOf(':');
  return [r.slice(0, at), r.slice(at + 1)];
};

export function tupleRoutes(deps: AdminDeps): RouteSpec[] {
  const tags = ['admin.tuples'];
  const base = '/v1/tenants/{tenantId}/tuples';
  return [
    adminRoute(deps, {
      ...declared('GET', base),
      operationId: 'listTuples',
      summary: 'Relationship tuples of the tenant, filtered by subject, object, relation (cursor)',
      tags,
      mode: 'read',
      params: Params,
      query: Type.Object({
        ...pageQuery,
        subject: Type.Optional(RefFilter),
        object: Type.Optional(RefFilter),
        relation: Type.Optional(Relation),
      }),
      responses: { 200: { description: '{items, next_cursor}', schema: Page(Tuple) } },
      read: async (ctx, caller) => {
        const tenantId = ctx.params.tenantId;
        await requireReach(deps.db, caller, tenantId, false);
        const page = await deps.pages.open(ctx, caller.tenantId, 5);
        const [sNs, sId] = splitRef(ctx.query.subject);
        const [oNs, oId] = splitRef(ctx.query.object);
        const a = page.after;
        const { rows } = await deps.db.query<TupleRow>(
          `SELECT ${cols} FROM relationship_tuples WHERE ${ofTenant}
             AND ($2::text IS NULL OR (subject_ns = $2 AND subject_id = $3)) AND ($4::text IS NULL OR (object_ns = $4 AND object_id = $5))
             AND ($6::text IS NULL OR relation = $6)
             AND ($7::text IS NULL OR (subject_ns, subject_id, relation, object_ns, object_id) > ($7, $8, $9, $10, $11))
           ORDER BY subject_ns, subject_id, relation, object_ns, object_id LIMIT $12`,
          [
            tenantId,
            sNs,
            sId,
            oNs,
            oId,
            ctx.query.relation ?? null,
            ...(a ? a.map(String) : [null, null, null, null, null]),
            page.limit + 1,
          ],
        );
        const { items, next_cursor } = page.finish(rows, (r) => [
          r.subject_ns,
          r.subject_id,
          r.relation,
          r.object_ns,
          r.object_id,
        ]);
        return { status: 200, body: { items: items.map(view), next_cursor } };
      },
    }),
    adminRoute(deps, {
      ...declared('PUT', base),
      operationId: 'writeTuple',
      summary: 'Write a tuple with its caveat (upsert: 201 created, 200 existing; Idempotency-Key)',
      tags,
      mode: 'create',
      params: Params,
      body: WriteBody,
      responses: {
        201: { description: 'Created', schema: Tuple },
        200: { description: 'Already held (caveat replaced when it differed)', schema: Tuple },
      },
      write: (ctx, w) => writeTuple(w, ctx.params.tenantId, ctx.body, deps.now()),
    }),
    adminRoute(deps, {
      ...declared('POST', `${base}:delete`),
      operationId: 'deleteTuple',
      summary:
        "Delete a tuple (Idempotency-Key replays the answer); a payer tuple's delete releases the delegate's pending transfers from the owner's wallet (holds voided, FAILED)",
      tags,
      mode: 'write',
      params: Params,
      body: KeyBody,
      responses: { 200: { description: 'The deleted tuple', schema: Tuple } },
      write: (ctx, w) => deleteTuple(w, ctx.params.tenantId, ctx.body, deps.now()),
    }),
  ];
}
