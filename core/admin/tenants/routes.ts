/**
 * Tenants (SPEC 2.11, 3, 4.6): a caller sees and changes its own tenant and the tenants its
 * staff created through POST /v1/tenants (admin_tenant_owners), nothing else (tenant isolation;
 * SPEC 1). The list pages by id. Suspend/activate update `tenants.status`, whose UPDATE trigger
 * NOTIFYs `tenants_changed` so the edge refuses a suspended tenant's customers at once.
 * A tenant's data is created only on a cluster in one of its `residentRegions` (SPEC 2.10
 * `resident_regions`; issue 20 item 2; default: this cluster's region).
 */
import { Type } from '@sinclair/typebox';
import { AppError } from '../../../shared/errors.ts';
import type { RouteSpec } from '../../http/route.ts';
import { enqueue } from '../../outbox/outbox.ts';
import type { Queryable } from '../../../shared/db/pool.ts';
import { adminRoute, type AdminDeps, type WriteCtx } from '../http.ts';
import { requirePlatformAdminTenant } from '../../platform/operator.ts';
import { requireCountry } from '../countries/routes.ts';
import { CountryCode, CurrencyCode, Page, Timestamp, pageQuery } from '../schemas.ts';
import { TenantId } from '../../identity/schemas.ts';
import { ensureTenantLedger } from '../../ledger/catalog.ts';
import { openAccount } from '../../ledger/accounts.ts';
import { clusterRegion } from '../../residency/cluster.ts';
import { declared } from '../../http/declared.ts';

interface TenantRow {
  id: string;
  name: string;
  country: string;
  base_currency: string;
  status: 'ACTIVE' | 'SUSPENDED';
  resident_regions: unknown;
  created_at: Date;
  updated_at: Date;
}
const cols = `id, name, country, base_currency, status, security -> 'resident_regions' AS resident_regions, created_at, updated_at`;
/** SPEC 2.10 resident_regions, shown when the tenant set them (absent: no placement restriction). */
const regionsOf = (t: TenantRow) =>
  Array.isArray(t.resident_regions)
    ? { residentRegions: t.resident_regions.filter((r): r is string => typeof r === 'string') }
    : {};
const view = (t: TenantRow) => ({
  id: t.id,
  name: t.name,
  country: t.country,
  baseCurrency: t.base_currency,
  status: t.status,
  ...regionsOf(t),
  created_at: t.created_at.toISOString(),
  updated_at: t.updated_at.toISOString(),
});
const Status = Type.Union([Type.Literal('ACTIVE'), Type.Literal('SUSPENDED')]);
const Params = Type.Object({ tenantId: TenantId });
/** A tenant as every tenant route shows it (view). */
const Tenant = Type.Object({
  id: TenantId,
  name: Type.String(),
  country: CountryCode,
  baseCurrency: CurrencyCode,
  status: Status,
  residentRegions: Type.Optional(Type.Array(CountryCode)),
  created_at: Timestamp,
  updated_at: Timestamp,
});
/**
 * A new tenant as its creator sees it (issue 20 item 1): with the settlement account of its base
 * currency, the source of money entering the tenant (opened with it; not openable through the API),
 * which the tenant's core client names when it funds wallets.
 */
const CreatedTenant = Type.Object({ ...Tenant.properties, settlementAccountId: Type.String() });

/** The tenant's ledger catalogue and settlement account, as the development seed opens the demo's (core/ledger/seed.ts). */
async function openTenantLedger(q: Queryable, t: TenantRow, now: number): Promise<string> {
  await ensureTenantLedger(q, t.id);
  const account = await openAccount(
    q,
    {
      tenantId: t.id,
      ownerType: 'platform',
      ownerId: `settlement-${t.base_currency}`,
      productCode: 'SETTLEMENT',
      currency: t.base_currency,
      viaApi: false,
    },
    now,
  );
  return account.id;
}
/** SPEC 2.10: the regions (ISO 3166 alpha-2) the tenant's data may live in. */
const ResidentRegions = Type.Array(CountryCode, {
  minItems: 1,
  maxItems: 50,
  uniqueItems: true,
  description:
    "Regions (ISO 3166 alpha-2) the tenant's data may live in; must include this cluster's region. Default: this cluster's region",
});

/**
 * Issue 20 item 2: the regions a new tenant's data may live in, refused (422
 * RESIDENCY_REGION_MISMATCH) unless this cluster is in one of them. Migration 0900's trigger
 * checks the same under every writer; this answers first with a message that says what to do.
 */
async function placeHere(q: Queryable, tenantId: string, given: string[] | undefined): Promise<string[]> {
  const here = await clusterRegion(q);
  if (here === undefined)
    throw new AppError(
      'SERVICE_UNAVAILABLE',
      'this database cluster has no region label yet (npm run migrate with DEPLOYMENT_REGION labels it)',
    );
  const regions = given ?? [here];
  if (!regions.includes(here))
    throw new AppError(
      'RESIDENCY_REGION_MISMATCH',
      `tenant ${tenantId} may live only in ${regions.join(', ')}, and this cluster is in ${here}: create it on a cluster in one of those regions`,
    );
  return regions;
}

/** Tenants the caller's tenant manages: itself and those it created. */
const managedBy = `(id = $1 OR id IN (SELECT tenant_id FROM admin_tenant_owners WHERE owner_tenant_id = $1))`;

/** The caller's tenant or one it created, or 404 TENANT_NOT_FOUND (another tenant's existence is not revealed). */
export async function managedTenant(
  q: Queryable,
  callerTenant: string,
  id: string,
  lock = false,
): Promise<TenantRow> {
  const { rows } = await q.query<TenantRow>(
    `SELECT ${cols} FROM tenants WHERE id = $2 AND ${managedBy}${lock ? ' FOR UPDATE' : ''}`,
    [callerTenant, id],
  );
  const t = rows[0];
  if (!t) throw new AppError('TENANT_NOT_FOUND', `no tenant ${id}`);
  return t;
}

/** The caller's own tenant, or 404 TENANT_NOT_FOUND (another tenant's existence is not revealed). */
export async function ownTenant(
  q: Queryable,
  callerTenant: string,
  id: string,
  lock = false,
): Promise<TenantRow> {
  const { rows } =
    id === callerTenant
      ? await q.query<TenantRow>(`SELECT ${cols} FROM tenants WHERE id = $1${lock ? ' FOR UPDATE' : ''}`, [
          id,
        ])
      : { rows: [] };
  const t = rows[0];
  if (!t) throw new AppError('TENANT_NOT_FOUND', `no tenant ${id}`);
  return t;
}

async function setStatus(w: WriteCtx, t: TenantRow, status: TenantRow['status']): Promise<TenantRow> {
  // Suspension is the platform's brake on a tenant (any managing Admin may pull it); were the
  // suspended tenant's own Admin able to release it (the policy lets it call :activate, else the
  // operator could lock itself out), the platform's suspension could not hold.
  if (t.status === 'SUSPENDED' && status === 'ACTIVE')
    await requirePlatformAdminTenant(w.q, w.caller.tenantId, 'activate a suspended tenant');
  const { rows } = await w.q.query<TenantRow>(
    `UPDATE tenants SET status = $2, updated_at = now() WHERE id = $1 RETURNING ${cols}`,
    [t.id, status],
  );
  const after = rows[0] ?? t;
  if (t.status !== status) {
    const event = status === 'SUSPENDED' ? 'tenant.suspended' : 'tenant.activated';
    await enqueue(w.q, {
      tenantId: t.id,
      aggregate: 'tenant',
      aggregateId: t.id,
      event,
      payload: { tenantId: t.id, status },
    });
  }
  await w.audit(
    status === 'SUSPENDED' ? 'tenant.suspend' : 'tenant.activate',
    { type: 'tenant', id: t.id },
    { from: t.status },
  );
  return after;
}

const tags = ['admin.tenants'];

const listTenantsRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/tenants'),
    operationId: 'listTenants',
    summary: 'Tenants visible to the caller: its own and those it created (cursor by id; filter by status)',
    tags,
    mode: 'read',
    query: Type.Object({ ...pageQuery, status: Type.Optional(Status) }),
    responses: { 200: { description: '{items, next_cursor}', schema: Page(Tenant) } },
    read: async (ctx, caller) => {
      const page = await deps.pages.open(ctx, caller.tenantId, 1);
      const { rows } = await deps.db.query<TenantRow>(
        `SELECT ${cols} FROM tenants WHERE ${managedBy} AND ($2::text IS NULL OR id > $2) AND ($3::text IS NULL OR status = $3) ORDER BY id LIMIT $4`,
        [caller.tenantId, page.after?.[0] ?? null, ctx.query.status ?? null, page.limit + 1],
      );
      const { items, next_cursor } = page.finish(rows, (r) => [r.id]);
      return { status: 200, body: { items: items.map(view), next_cursor } };
    },
  });

const createTenantRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/tenants'),
    operationId: 'createTenant',
    summary:
      'Create a tenant (country enabled, base currency allowed there; on this cluster only if its region is one of residentRegions; idempotent)',
    tags,
    mode: 'create',
    body: Type.Object(
      {
        id: Params.properties.tenantId,
        name: Type.String({ minLength: 1, maxLength: 200 }),
        country: CountryCode,
        baseCurrency: CurrencyCode,
        status: Type.Optional(Status),
        residentRegions: Type.Optional(ResidentRegions),
      },
      { additionalProperties: false },
    ),
    responses: { 201: { description: 'The tenant and its settlement account', schema: CreatedTenant } },
    write: async (ctx, w) => {
      // Issue 23 item 5: tenants are created by platform admins only (the operator tenant's Admins).
      await requirePlatformAdminTenant(w.q, w.caller.tenantId);
      const c = await requireCountry(w.q, ctx.body.country);
      if (!c.allowed_currencies.includes(ctx.body.baseCurrency))
        throw new AppError(
          'BASE_CURRENCY_NOT_ALLOWED',
          `${ctx.body.baseCurrency} is not allowed in ${c.code} (allowed: ${c.allowed_currencies.join(', ') || 'none'})`,
        );
      const regions = await placeHere(w.q, ctx.body.id, ctx.body.residentRegions);
      const { rows } = await w.q.query<TenantRow>(
        `INSERT INTO tenants (id, name, country, base_currency, status, security) VALUES ($1, $2, $3, $4, $5, jsonb_build_object('resident_regions', $6::jsonb)) ON CONFLICT (id) DO NOTHING RETURNING ${cols}`,
        [
          ctx.body.id,
          ctx.body.name,
          ctx.body.country,
          ctx.body.baseCurrency,
          ctx.body.status ?? 'ACTIVE',
          JSON.stringify(regions),
        ],
      );
      const t = rows[0];
      if (!t) throw new AppError('TENANT_EXISTS', `tenant ${ctx.body.id} exists`);
      await w.q.query('INSERT INTO admin_tenant_owners (tenant_id, owner_tenant_id) VALUES ($1, $2)', [
        t.id,
        w.caller.tenantId,
      ]);
      // The same fact as a relationship tuple, which the edge's policy reads (owner_actions).
      await w.q.query(
        `INSERT INTO relationship_tuples (tenant_id, subject_ns, subject_id, relation, object_ns, object_id) VALUES ($1, 'tenant', $1, 'owner', 'tenant', $2)`,
        [w.caller.tenantId, t.id],
      );
      await enqueue(w.q, {
        tenantId: t.id,
        aggregate: 'tenant',
        aggregateId: t.id,
        event: 'tenant.created',
        payload: view(t),
      });
      const settlementAccountId = await openTenantLedger(w.q, t, deps.now());
      await w.audit(
        'tenant.create',
        { type: 'tenant', id: t.id },
        {
          country: t.country,
          baseCurrency: t.base_currency,
          residentRegions: regions,
          settlementAccountId,
        },
      );
      return { status: 201, body: { ...view(t), settlementAccountId } };
    },
  });

const getTenantRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/tenants/{tenantId}'),
    operationId: 'getTenant',
    summary: 'One tenant (own)',
    tags,
    mode: 'read',
    params: Params,
    responses: { 200: { description: 'The tenant', schema: Tenant } },
    read: async (ctx, caller) => ({
      status: 200,
      body: view(await managedTenant(deps.db, caller.tenantId, ctx.params.tenantId)),
    }),
  });

const updateTenantRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('PATCH', '/v1/tenants/{tenantId}'),
    operationId: 'updateTenant',
    summary: 'Update name or status',
    tags,
    mode: 'write',
    params: Params,
    body: Type.Object(
      { name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })), status: Type.Optional(Status) },
      { additionalProperties: false, minProperties: 1 },
    ),
    responses: { 200: { description: 'The tenant', schema: Tenant } },
    write: async (ctx, w) => {
      let t = await managedTenant(w.q, w.caller.tenantId, ctx.params.tenantId, true);
      if (ctx.body.name !== undefined) {
        const { rows } = await w.q.query<TenantRow>(
          `UPDATE tenants SET name = $2, updated_at = now() WHERE id = $1 RETURNING ${cols}`,
          [t.id, ctx.body.name],
        );
        t = rows[0] ?? t;
        await w.audit('tenant.update', { type: 'tenant', id: t.id }, { fields: ['name'] });
      }
      if (ctx.body.status !== undefined) t = await setStatus(w, t, ctx.body.status);
      return { status: 200, body: view(t) };
    },
  });

export function tenantRoutes(deps: AdminDeps): RouteSpec[] {
  return [
    listTenantsRoute(deps),
    createTenantRoute(deps),
    getTenantRoute(deps),
    updateTenantRoute(deps),
    ...(['SUSPENDED', 'ACTIVE'] as const).map((status) =>
      adminRoute(deps, {
        ...declared('POST', `/v1/tenants/{tenantId}:${status === 'SUSPENDED' ? 'suspend' : 'activate'}`),
        operationId: status === 'SUSPENDED' ? 'suspendTenant' : 'activateTenant',
        summary:
          status === 'SUSPENDED'
            ? "Suspend: the edge refuses the tenant's customers"
            : 'Activate a suspended tenant',
        tags,
        mode: 'write',
        params: Params,
        responses: { 200: { description: 'The tenant', schema: Tenant } },
        write: async (ctx, w) => {
          const t = await managedTenant(w.q, w.caller.tenantId, ctx.params.tenantId, true);
          return { status: 200, body: view(await setStatus(w, t, status)) };
        },
      }),
    ),
  ];
}
