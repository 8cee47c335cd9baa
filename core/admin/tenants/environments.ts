/** Environments of a tenant (SPEC 4.6 environments) and products (SPEC 4.6 products; delete = deprecation). */
import { Type } from '@sinclair/typebox';
import { AppError } from '../../../shared/errors.ts';
import type { RouteSpec } from '../../http/route.ts';
import type { Queryable } from '../../../shared/db/pool.ts';
import { uuidv7 } from '../../../shared/uuid.ts';
import { adminRoute, checkIfMatch, type AdminDeps } from '../http.ts';
import { auditPage } from '../audit/query.ts';
import { PromoteBody } from '../configs/routes.ts';
import { promote, PromoteResultSchema } from '../promote.ts';
import {
  AuditPage,
  JsonObject,
  Metadata,
  Page,
  ProductCode,
  Timestamp,
  Uuid,
  pageQuery,
} from '../schemas.ts';
import { TenantId } from '../../identity/schemas.ts';
import { ownTenant } from './routes.ts';
import { declared } from '../../http/declared.ts';

interface EnvRow {
  id: string;
  tenant_id: string;
  name: string;
  env_type: string;
  flags: Record<string, unknown>;
  created_at: Date;
  updated_at: Date;
}
const envCols = 'id, tenant_id, name, env_type, flags, created_at, updated_at';
const envView = (e: EnvRow) => ({
  id: e.id,
  tenantId: e.tenant_id,
  name: e.name,
  envType: e.env_type,
  flags: e.flags,
  created_at: e.created_at.toISOString(),
  updated_at: e.updated_at.toISOString(),
});
const TenantParams = Type.Object({ tenantId: TenantId });
const EnvParams = Type.Object({ tenantId: TenantParams.properties.tenantId, envId: Uuid });
const EnvType = Type.Union([Type.Literal('STG'), Type.Literal('PRD'), Type.Literal('DEV')]);
/** An environment as every environment route shows it (envView). */
const Environment = Type.Object({
  id: Uuid,
  tenantId: TenantId,
  name: Type.String(),
  envType: EnvType,
  flags: Type.Record(Type.String(), Type.Boolean()),
  created_at: Timestamp,
  updated_at: Timestamp,
});
const ProductStatus = Type.Union([Type.Literal('ACTIVE'), Type.Literal('DEPRECATED')]);
/** A product as every product route shows it (prodView). */
const Product = Type.Object({
  code: ProductCode,
  category: Type.String(),
  metadata: JsonObject,
  status: ProductStatus,
  created_at: Timestamp,
  updated_at: Timestamp,
});
const Flags = Type.Record(Type.String({ pattern: '^[a-z][a-z0-9_.-]{0,63}$' }), Type.Boolean(), {
  maxProperties: 100,
});

async function requireEnv(q: Queryable, tenantId: string, envId: string, lock = false): Promise<EnvRow> {
  const { rows } = await q.query<EnvRow>(
    `SELECT ${envCols} FROM admin_environments WHERE tenant_id = $1 AND id = $2${lock ? ' FOR UPDATE' : ''}`,
    [tenantId, envId],
  );
  if (!rows[0]) throw new AppError('ENVIRONMENT_NOT_FOUND', `no environment ${envId}`);
  return rows[0];
}

interface ProductRow {
  code: string;
  category: string;
  metadata: Record<string, unknown>;
  status: string;
  created_at: Date;
  updated_at: Date;
}
const prodCols = 'code, category, metadata, status, created_at, updated_at';
const prodView = (p: ProductRow) => ({
  ...p,
  created_at: p.created_at.toISOString(),
  updated_at: p.updated_at.toISOString(),
});

async function requireProduct(
  q: Queryable,
  tenantId: string,
  code: string,
  lock = false,
): Promise<ProductRow> {
  const { rows } = await q.query<ProductRow>(
    `SELECT ${prodCols} FROM admin_products WHERE tenant_id = $1 AND code = $2${lock ? ' FOR UPDATE' : ''}`,
    [tenantId, code],
  );
  if (!rows[0]) throw new AppError('PRODUCT_NOT_FOUND', `no product ${code}`);
  return rows[0];
}

const tags = ['admin.environments'];

const listEnvironmentsRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/tenants/{tenantId}/environments'),
    operationId: 'listEnvironments',
    summary: 'Environments of the tenant',
    tags,
    mode: 'read',
    params: TenantParams,
    query: Type.Object(pageQuery),
    responses: { 200: { description: 'A page of environments', schema: Page(Environment) } },
    read: async (ctx, caller) => {
      await ownTenant(deps.db, caller.tenantId, ctx.params.tenantId);
      const page = await deps.pages.open(ctx, caller.tenantId, 1);
      const after = page.after?.[0];
      const { rows } = await deps.db.query<EnvRow>(
        `SELECT ${envCols} FROM admin_environments WHERE tenant_id = $1 AND ($2::uuid IS NULL OR id > $2) ORDER BY id LIMIT $3`,
        [caller.tenantId, after ?? null, page.limit + 1],
      );
      const { items, next_cursor } = page.finish(rows, (r) => [r.id]);
      return { status: 200, body: { items: items.map(envView), next_cursor } };
    },
  });

const createEnvironmentRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/tenants/{tenantId}/environments'),
    operationId: 'createEnvironment',
    summary: 'Create an environment (name, envType)',
    tags,
    mode: 'create',
    params: TenantParams,
    body: Type.Object(
      {
        name: Type.String({ pattern: '^[a-z][a-z0-9-]{0,31}$' }),
        envType: EnvType,
        flags: Type.Optional(Flags),
      },
      { additionalProperties: false },
    ),
    responses: { 201: { description: 'The environment', schema: Environment } },
    write: async (ctx, w) => {
      await ownTenant(w.q, w.caller.tenantId, ctx.params.tenantId);
      const { rows } = await w.q.query<EnvRow>(
        `INSERT INTO admin_environments (id, tenant_id, name, env_type, flags) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, name) DO NOTHING RETURNING ${envCols}`,
        [uuidv7(), w.caller.tenantId, ctx.body.name, ctx.body.envType, JSON.stringify(ctx.body.flags ?? {})],
      );
      const e = rows[0];
      if (!e) throw new AppError('ENVIRONMENT_EXISTS', `environment ${ctx.body.name} exists`);
      await w.audit(
        'environment.create',
        { type: 'environment', id: e.id },
        { name: e.name, envType: e.env_type },
      );
      return { status: 201, body: envView(e) };
    },
  });

const promoteEnvironmentRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/tenants/{tenantId}/environments:promote'),
    operationId: 'promoteEnvironment',
    summary: 'Promote configs and schedules STG → PRD (key and product filters, one transaction)',
    tags,
    mode: 'create',
    params: TenantParams,
    body: PromoteBody,
    responses: { 200: { description: 'What was copied', schema: PromoteResultSchema } },
    write: async (ctx, w) => {
      await ownTenant(w.q, w.caller.tenantId, ctx.params.tenantId);
      const r = await promote(w.q, w.caller.tenantId, w.caller.principalId, {
        ...ctx.body,
        configs: true,
        schedules: true,
      });
      await w.audit(
        'environment.promote',
        { type: 'environment', id: r.to },
        {
          from: r.from,
          keys: ctx.body.keys ?? null,
          products: ctx.body.products ?? null,
          configs: r.configs.filter((c) => !c.skipped).length,
          schedules: r.schedules.filter((s) => !s.skipped).length,
        },
      );
      return { status: 200, body: r };
    },
  });

const getEnvironmentRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/tenants/{tenantId}/environments/{envId}'),
    operationId: 'getEnvironment',
    summary: 'One environment',
    tags,
    mode: 'read',
    params: EnvParams,
    responses: { 200: { description: 'The environment', schema: Environment } },
    read: async (ctx, caller) => {
      await ownTenant(deps.db, caller.tenantId, ctx.params.tenantId);
      return { status: 200, body: envView(await requireEnv(deps.db, caller.tenantId, ctx.params.envId)) };
    },
  });

const updateEnvironmentRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('PATCH', '/v1/tenants/{tenantId}/environments/{envId}'),
    operationId: 'updateEnvironment',
    summary: 'Update flags (merged; If-Match honoured)',
    tags,
    mode: 'write',
    params: EnvParams,
    body: Type.Object({ flags: Flags }, { additionalProperties: false }),
    responses: { 200: { description: 'The environment', schema: Environment } },
    write: async (ctx, w) => {
      await ownTenant(w.q, w.caller.tenantId, ctx.params.tenantId);
      const e = await requireEnv(w.q, w.caller.tenantId, ctx.params.envId, true);
      if (ctx.headers['if-match']) checkIfMatch(ctx.headers, envView(e));
      const { rows } = await w.q.query<EnvRow>(
        `UPDATE admin_environments SET flags = flags || $2, version = version + 1, updated_at = now() WHERE id = $1 RETURNING ${envCols}`,
        [e.id, JSON.stringify(ctx.body.flags)],
      );
      await w.audit('environment.update', { type: 'environment', id: e.id }, { flags: ctx.body.flags });
      return { status: 200, body: envView(rows[0] ?? e) };
    },
  });

const environmentAuditRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/tenants/{tenantId}/environments/{envId}/audit'),
    operationId: 'environmentAudit',
    summary: 'Audit trail of an environment',
    tags,
    mode: 'read',
    params: EnvParams,
    query: Type.Object(pageQuery),
    responses: { 200: { description: 'A page of audit records', schema: AuditPage } },
    read: async (ctx, caller) => {
      await ownTenant(deps.db, caller.tenantId, ctx.params.tenantId);
      await requireEnv(deps.db, caller.tenantId, ctx.params.envId);
      return {
        status: 200,
        body: await auditPage(
          deps.db,
          caller.tenantId,
          { targetType: 'environment', targetId: ctx.params.envId },
          await deps.pages.open(ctx, caller.tenantId, 1),
        ),
      };
    },
  });

export function environmentRoutes(deps: AdminDeps): RouteSpec[] {
  return [
    listEnvironmentsRoute(deps),
    createEnvironmentRoute(deps),
    promoteEnvironmentRoute(deps),
    getEnvironmentRoute(deps),
    updateEnvironmentRoute(deps),
    environmentAuditRoute(deps),
  ];
}

const productTags = ['admin.products'];
const Params = Type.Object({ code: ProductCode });

const listProductsRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/products'),
    operationId: 'listProducts',
    summary: 'Products of the tenant',
    tags: productTags,
    mode: 'read',
    query: Type.Object({ ...pageQuery, status: Type.Optional(ProductStatus) }),
    responses: { 200: { description: 'A page of products', schema: Page(Product) } },
    read: async (ctx, caller) => {
      const page = await deps.pages.open(ctx, caller.tenantId, 1);
      const after = page.after?.[0];
      const { rows } = await deps.db.query<ProductRow>(
        `SELECT ${prodCols} FROM admin_products WHERE tenant_id = $1 AND ($2::text IS NULL OR code > $2) AND ($3::text IS NULL OR status = $3) ORDER BY code LIMIT $4`,
        [caller.tenantId, after ?? null, ctx.query.status ?? null, page.limit + 1],
      );
      const { items, next_cursor } = page.finish(rows, (r) => [r.code]);
      return { status: 200, body: { items: items.map(prodView), next_cursor } };
    },
  });

const createProductRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/products'),
    operationId: 'createProduct',
    summary: 'Create (or re-enable a deprecated) product',
    tags: productTags,
    mode: 'create',
    body: Type.Object(
      {
        code: ProductCode,
        category: Type.String({ minLength: 1, maxLength: 40 }),
        metadata: Type.Optional(Metadata),
      },
      { additionalProperties: false },
    ),
    responses: { 201: { description: 'The product', schema: Product } },
    write: async (ctx, w) => {
      const { rows } = await w.q.query<ProductRow>(
        `INSERT INTO admin_products (tenant_id, code, category, metadata) VALUES ($1, $2, $3, $4)
           ON CONFLICT (tenant_id, code) DO UPDATE SET status = 'ACTIVE', category = EXCLUDED.category, metadata = EXCLUDED.metadata, version = admin_products.version + 1, updated_at = now()
             WHERE admin_products.status = 'DEPRECATED' RETURNING ${prodCols}`,
        [w.caller.tenantId, ctx.body.code, ctx.body.category, JSON.stringify(ctx.body.metadata ?? {})],
      );
      if (!rows[0]) throw new AppError('PRODUCT_EXISTS', `product ${ctx.body.code} exists`);
      await w.audit('product.create', { type: 'product', id: ctx.body.code });
      return { status: 201, body: prodView(rows[0]) };
    },
  });

const getProductRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/products/{code}'),
    operationId: 'getProduct',
    summary: 'One product',
    tags: productTags,
    mode: 'read',
    params: Params,
    responses: { 200: { description: 'The product', schema: Product } },
    read: async (ctx, caller) => ({
      status: 200,
      body: prodView(await requireProduct(deps.db, caller.tenantId, ctx.params.code)),
    }),
  });

const updateProductRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('PATCH', '/v1/products/{code}'),
    operationId: 'updateProduct',
    summary: 'Update category, metadata or status',
    tags: productTags,
    mode: 'write',
    params: Params,
    body: Type.Object(
      {
        category: Type.Optional(Type.String({ minLength: 1, maxLength: 40 })),
        metadata: Type.Optional(Metadata),
        status: Type.Optional(ProductStatus),
      },
      { additionalProperties: false, minProperties: 1 },
    ),
    responses: { 200: { description: 'The product', schema: Product } },
    write: async (ctx, w) => {
      const p = await requireProduct(w.q, w.caller.tenantId, ctx.params.code, true);
      if (ctx.headers['if-match']) checkIfMatch(ctx.headers, prodView(p));
      const { rows } = await w.q.query<ProductRow>(
        `UPDATE admin_products SET category = coalesce($3, category), metadata = coalesce($4, metadata), status = coalesce($5, status), version = version + 1, updated_at = now()
            WHERE tenant_id = $1 AND code = $2 RETURNING ${prodCols}`,
        [
          w.caller.tenantId,
          p.code,
          ctx.body.category ?? null,
          ctx.body.metadata ? JSON.stringify(ctx.body.metadata) : null,
          ctx.body.status ?? null,
        ],
      );
      await w.audit('product.update', { type: 'product', id: p.code }, { fields: Object.keys(ctx.body) });
      return { status: 200, body: prodView(rows[0] ?? p) };
    },
  });

const deleteProductRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('DELETE', '/v1/products/{code}'),
    operationId: 'deleteProduct',
    summary: 'Deprecate a product (soft delete)',
    tags: productTags,
    mode: 'write',
    params: Params,
    responses: { 200: { description: 'The deprecated product', schema: Product } },
    write: async (ctx, w) => {
      const p = await requireProduct(w.q, w.caller.tenantId, ctx.params.code, true);
      const { rows } = await w.q.query<ProductRow>(
        `UPDATE admin_products SET status = 'DEPRECATED', version = version + 1, updated_at = now() WHERE tenant_id = $1 AND code = $2 RETURNING ${prodCols}`,
        [w.caller.tenantId, p.code],
      );
      await w.audit('product.deprecate', { type: 'product', id: p.code });
      return { status: 200, body: prodView(rows[0] ?? p) };
    },
  });

export function productRoutes(deps: AdminDeps): RouteSpec[] {
  return [
    listProductsRoute(deps),
    createProductRoute(deps),
    getProductRoute(deps),
    updateProductRoute(deps),
    deleteProductRoute(deps),
  ];
}
