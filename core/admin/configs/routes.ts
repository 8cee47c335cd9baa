/** Configuration routes (SPEC 4.6 configs): versions, PATCH state changes, effective, dry-run, promote. */
import { Type } from '@sinclair/typebox';
import { AppError } from '../../../shared/errors.ts';
import type { RouteSpec } from '../../http/route.ts';
import { adminRoute, checkIfMatch, type AdminDeps } from '../http.ts';
import { promote, PromoteResultSchema } from '../promote.ts';
import { Nullable, Page, pageQuery, Timestamp, Uuid } from '../schemas.ts';
import {
  checkScope,
  configCols,
  configView,
  getConfig,
  newVersion,
  ownerOf,
  requirePlatformConfigWriter,
  resolveEffective,
  type ConfigRow,
} from './store.ts';
import { declared } from '../../http/declared.ts';

export const ScopeSchema = Type.Union([
  Type.Literal('GLOBAL'),
  Type.Literal('COUNTRY'),
  Type.Literal('TENANT'),
  Type.Literal('ENVIRONMENT'),
]);
const Key = Type.String({ pattern: '^[a-z][a-z0-9_.-]{0,127}$' });
const ConfigStatus = Type.Union([
  Type.Literal('ACTIVE'),
  Type.Literal('INACTIVE'),
  Type.Literal('SUPERSEDED'),
]);
/** One version of a config key (store.ts configView). */
const Config = Type.Object({
  id: Uuid,
  tenant_id: Nullable(Type.String()),
  scope: ScopeSchema,
  scope_ref: Type.String(),
  key: Key,
  value: Type.Unknown(),
  version: Type.Integer({ minimum: 1 }),
  status: ConfigStatus,
  promoted_from: Nullable(Uuid),
  created_by: Type.String(),
  created_at: Timestamp,
  updated_at: Timestamp,
});
/** store.ts resolveEffective: the winning value of each key and the scope it came from. */
const Effective = Type.Object({
  context: Type.Object({ tenantId: Type.String(), envId: Nullable(Uuid), country: Nullable(Type.String()) }),
  values: Type.Array(
    Type.Object({
      key: Key,
      value: Type.Unknown(),
      scope: ScopeSchema,
      scope_ref: Type.String(),
      config_id: Nullable(Uuid),
      version: Nullable(Type.Integer()),
    }),
  ),
});
/** A config value is any JSON up to 8 KiB (checked after parsing: CONFIG_INVALID). */
const maxValueBytes = 8192;

function checkValue(value: unknown): void {
  if (value === undefined) throw new AppError('CONFIG_INVALID', 'value is required');
  if (Buffer.byteLength(JSON.stringify(value)) > maxValueBytes)
    throw new AppError('CONFIG_INVALID', `value is larger than ${maxValueBytes} bytes`);
}

const CreateBody = Type.Object(
  {
    scope: ScopeSchema,
    scopeRef: Type.Optional(Type.String({ maxLength: 64 })),
    key: Key,
    value: Type.Unknown(),
    activate: Type.Optional(
      Type.Boolean({
        description: 'default true: the new version becomes ACTIVE and supersedes the previous one',
      }),
    ),
  },
  { additionalProperties: false },
);
const ContextQuery = Type.Object({
  tenantId: Type.Optional(Type.String({ maxLength: 64 })),
  envId: Type.Optional(Uuid),
  country: Type.Optional(Type.String({ pattern: '^[A-Z]{2}$' })),
  key: Type.Optional(Key),
});
const DryRunBody = Type.Object(
  {
    envId: Type.Optional(Uuid),
    country: Type.Optional(Type.String({ pattern: '^[A-Z]{2}$' })),
    keys: Type.Optional(Type.Array(Key, { maxItems: 100 })),
    candidates: Type.Optional(
      Type.Array(
        Type.Object(
          {
            scope: ScopeSchema,
            scopeRef: Type.Optional(Type.String({ maxLength: 64 })),
            key: Key,
            value: Type.Unknown(),
          },
          { additionalProperties: false },
        ),
        { maxItems: 50 },
      ),
    ),
  },
  { additionalProperties: false },
);
export const PromoteBody = Type.Object(
  {
    fromEnvId: Type.Optional(Uuid),
    toEnvId: Type.Optional(Uuid),
    keys: Type.Optional(Type.Array(Key, { maxItems: 200 })),
    products: Type.Optional(
      Type.Array(Type.String({ pattern: '^[A-Z][A-Z0-9_]{1,39}$' }), { maxItems: 100 }),
    ),
  },
  { additionalProperties: false },
);

function ownTenant(callerTenant: string, asked: string | undefined): void {
  if (asked !== undefined && asked !== callerTenant)
    throw new AppError('TENANT_NOT_FOUND', `no tenant ${asked}`);
}

const tags = ['admin.configs'];

const effectiveConfigRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/configs/effective'),
    operationId: 'effectiveConfig',
    summary: 'Resolve configuration for tenant, environment and country (says which scope won)',
    tags,
    mode: 'read',
    query: ContextQuery,
    responses: {
      200: {
        description: '{context, values[{key, value, scope, scope_ref, config_id, version}]}',
        schema: Effective,
      },
    },
    read: async (ctx, caller) => {
      ownTenant(caller.tenantId, ctx.query.tenantId);
      return {
        status: 200,
        body: await resolveEffective(
          deps.db,
          { tenantId: caller.tenantId, envId: ctx.query.envId, country: ctx.query.country },
          ctx.query.key ? [ctx.query.key] : undefined,
        ),
      };
    },
  });

const dryRunConfigRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/configs:dry-run'),
    operationId: 'dryRunConfig',
    summary: 'Simulate the effective configuration for a hypothetical context and candidate values',
    tags,
    mode: 'read',
    body: DryRunBody,
    responses: {
      200: {
        description: 'As /v1/configs/effective; candidate values have config_id null',
        schema: Effective,
      },
    },
    read: async (ctx, caller) => {
      const candidates = [];
      for (const c of ctx.body.candidates ?? []) {
        checkValue(c.value);
        const ref =
          c.scope === 'ENVIRONMENT' || c.scope === 'COUNTRY'
            ? (c.scopeRef ?? '')
            : c.scope === 'TENANT'
              ? caller.tenantId
              : '';
        if (c.scope === 'TENANT' && c.scopeRef !== undefined && c.scopeRef !== caller.tenantId)
          throw new AppError('CONFIG_INVALID', "a TENANT candidate's scopeRef is the caller's tenant");
        candidates.push({ scope: c.scope, scope_ref: ref, key: c.key, value: c.value });
      }
      return {
        status: 200,
        body: await resolveEffective(
          deps.db,
          { tenantId: caller.tenantId, envId: ctx.body.envId, country: ctx.body.country },
          ctx.body.keys,
          candidates,
        ),
      };
    },
  });

const listConfigsRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/configs'),
    operationId: 'listConfigs',
    summary: 'Config versions visible to the tenant (filters: scope, scopeRef, key, status)',
    tags,
    mode: 'read',
    query: Type.Object({
      ...pageQuery,
      scope: Type.Optional(ScopeSchema),
      scopeRef: Type.Optional(Type.String({ maxLength: 64 })),
      key: Type.Optional(Key),
      status: Type.Optional(ConfigStatus),
    }),
    responses: { 200: { description: 'A page of config versions (oldest first)', schema: Page(Config) } },
    read: async (ctx, caller) => {
      const page = await deps.pages.open(ctx, caller.tenantId, 1);
      const after = page.after?.[0];
      const { rows } = await deps.db.query<ConfigRow>(
        `SELECT ${configCols} FROM admin_configs WHERE (tenant_id IS NULL OR tenant_id = $1)
              AND ($2::text IS NULL OR scope = $2) AND ($3::text IS NULL OR scope_ref = $3) AND ($4::text IS NULL OR key = $4) AND ($5::text IS NULL OR status = $5)
              AND ($6::uuid IS NULL OR id > $6) ORDER BY id LIMIT $7`,
        [
          caller.tenantId,
          ctx.query.scope ?? null,
          ctx.query.scopeRef ?? null,
          ctx.query.key ?? null,
          ctx.query.status ?? null,
          after ?? null,
          page.limit + 1,
        ],
      );
      const { items, next_cursor } = page.finish(rows, (r) => [r.id]);
      return { status: 200, body: { items: items.map(configView), next_cursor } };
    },
  });

const createConfigRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/configs'),
    operationId: 'createConfig',
    summary: 'Create a new version of a key at a scope (idempotent)',
    tags,
    mode: 'create',
    body: CreateBody,
    responses: { 201: { description: 'The new version', schema: Config } },
    write: async (ctx, w) => {
      checkValue(ctx.body.value);
      const ref = await checkScope(w.q, w.caller.tenantId, ctx.body.scope, ctx.body.scopeRef);
      const row = await newVersion(w.q, {
        owner: ownerOf(w.caller.tenantId, ctx.body.scope),
        scope: ctx.body.scope,
        scopeRef: ref,
        key: ctx.body.key,
        value: ctx.body.value,
        activate: ctx.body.activate ?? true,
        createdBy: w.caller.principalId,
      });
      await w.audit(
        'config.create',
        { type: 'config', id: row.id },
        { key: row.key, scope: row.scope, scopeRef: row.scope_ref, version: row.version },
      );
      return { status: 201, body: configView(row) };
    },
  });

const promoteConfigsRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/configs:promote'),
    operationId: 'promoteConfigs',
    summary: 'Promote ENVIRONMENT configs STG → PRD (key filter, one transaction)',
    tags,
    mode: 'create',
    body: PromoteBody,
    responses: {
      200: { description: 'What was copied and what was already there', schema: PromoteResultSchema },
    },
    write: async (ctx, w) => {
      const r = await promote(w.q, w.caller.tenantId, w.caller.principalId, {
        ...ctx.body,
        configs: true,
        schedules: false,
      });
      await w.audit(
        'config.promote',
        { type: 'environment', id: r.to },
        { from: r.from, keys: ctx.body.keys ?? null, copied: r.configs.filter((c) => !c.skipped).length },
      );
      return { status: 200, body: r };
    },
  });

const getConfigRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/configs/{configId}'),
    operationId: 'getConfig',
    summary: 'One config version',
    tags,
    mode: 'read',
    params: Type.Object({ configId: Uuid }),
    responses: { 200: { description: 'The version', schema: Config } },
    read: async (ctx, caller) => ({
      status: 200,
      body: configView(await getConfig(deps.db, caller.tenantId, ctx.params.configId)),
    }),
  });

const updateConfigRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('PATCH', '/v1/configs/{configId}'),
    operationId: 'updateConfig',
    summary: 'Activate, deactivate or supersede a version (If-Match)',
    tags,
    mode: 'write',
    ifMatch: true,
    params: Type.Object({ configId: Uuid }),
    body: Type.Object({ status: ConfigStatus }, { additionalProperties: false }),
    responses: { 200: { description: 'The version', schema: Config } },
    write: async (ctx, w) => {
      const row = await getConfig(w.q, w.caller.tenantId, ctx.params.configId, true);
      if (row.tenant_id === null) await requirePlatformConfigWriter(w.q, w.caller.tenantId);
      checkIfMatch(ctx.headers, configView(row));
      if (row.status === ctx.body.status)
        throw new AppError('CONFIG_STATE_CONFLICT', `version is already ${row.status}`);
      if (ctx.body.status === 'ACTIVE') {
        await w.q.query(`SELECT pg_advisory_xact_lock(hashtext($1))`, [
          `${row.tenant_id ?? ''}|${row.scope}|${row.scope_ref}|${row.key}`,
        ]);
        await w.q.query(
          `UPDATE admin_configs SET status = 'SUPERSEDED', updated_at = now()
              WHERE coalesce(tenant_id, '') = coalesce($1, '') AND scope = $2 AND scope_ref = $3 AND key = $4 AND status = 'ACTIVE'`,
          [row.tenant_id, row.scope, row.scope_ref, row.key],
        );
      }
      const { rows } = await w.q.query<ConfigRow>(
        `UPDATE admin_configs SET status = $2, updated_at = now() WHERE id = $1 RETURNING ${configCols}`,
        [row.id, ctx.body.status],
      );
      const action =
        ctx.body.status === 'ACTIVE'
          ? 'config.activate'
          : ctx.body.status === 'INACTIVE'
            ? 'config.deactivate'
            : 'config.supersede';
      await w.audit(
        action,
        { type: 'config', id: row.id },
        { key: row.key, scope: row.scope, from: row.status },
      );
      return { status: 200, body: configView(rows[0] ?? row) };
    },
  });

export function configRoutes(deps: AdminDeps): RouteSpec[] {
  return [
    effectiveConfigRoute(deps),
    dryRunConfigRoute(deps),
    listConfigsRoute(deps),
    createConfigRoute(deps),
    promoteConfigsRoute(deps),
    getConfigRoute(deps),
    updateConfigRoute(deps),
  ];
}
