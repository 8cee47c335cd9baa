/**
 * Fee and limit schedule templates (issue 20 item 1): the platform (an Admin of the operator
 * tenant) publishes a template, every tenant's staff list them, and a tenant's Admin copies one
 * into its own tenant as an INACTIVE TENANT-scoped schedule (SPEC 3: schedules are created
 * inactive), which it reviews and activates through `/v1/schedules` like any other. A template
 * is immutable once published: a changed one is a new template, so a copy always says what it
 * was copied from (audited with the template id).
 */
import { Type } from '@sinclair/typebox';
import type { Queryable } from '../../../shared/db/pool.ts';
import { AppError } from '../../../shared/errors.ts';
import { uuidv7 } from '../../../shared/uuid.ts';
import type { RouteSpec } from '../../http/route.ts';
import { requirePlatformAdminTenant } from '../../platform/operator.ts';
import { adminRoute, type AdminDeps } from '../http.ts';
import { requireMinorUnits } from '../reference/currencies.ts';
import { Kind, LimitIn, Schedule, TierIn, split, view } from '../schedules/routes.ts';
import { createSchedule } from '../schedules/write.ts';
import { CurrencyCode, ItemsOf, ProductCode, Timestamp, Uuid } from '../schemas.ts';
import { declared } from '../../http/declared.ts';

const TemplateItems = Type.Array(Type.Union([TierIn, LimitIn]), { minItems: 1, maxItems: 100 });
const Template = Type.Object({
  id: Uuid,
  name: Type.String(),
  kind: Kind,
  product: ProductCode,
  currency: CurrencyCode,
  items: TemplateItems,
  published_at: Timestamp,
});
const Name = Type.String({ minLength: 1, maxLength: 100 });

interface TemplateRow {
  id: string;
  name: string;
  kind: 'FEE' | 'LIMIT' | 'COMMISSION';
  product: string;
  currency: string;
  items: unknown[];
  created_at: Date;
}
const cols = 'id, name, kind, product, currency, items, created_at';
const templateView = (t: TemplateRow) => ({
  id: t.id,
  name: t.name,
  kind: t.kind,
  product: t.product,
  currency: t.currency,
  items: t.items,
  published_at: t.created_at.toISOString(),
});

async function requireTemplate(q: Queryable, id: string): Promise<TemplateRow> {
  const { rows } = await q.query<TemplateRow>(`SELECT ${cols} FROM schedule_templates WHERE id = $1`, [id]);
  const t = rows[0];
  if (!t) throw new AppError('TEMPLATE_NOT_FOUND', `no schedule template ${id}`);
  return t;
}

/**
 * Issue 20 item 1: a template is copied only into a tenant that has its product (ACTIVE in
 * `/v1/products`) and its currency (the tenant's base currency or one its country allows);
 * otherwise a 422 naming everything missing, before anything is written (never a partial copy,
 * never a schedule for a product the tenant does not sell).
 */
async function requireApplicable(q: Queryable, tenantId: string, t: TemplateRow): Promise<void> {
  const { rows } = await q.query<{ has_product: boolean; has_currency: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM admin_products p WHERE p.tenant_id = t.id AND p.code = $2 AND p.status = 'ACTIVE') AS has_product,
            (t.base_currency = $3 OR EXISTS (SELECT 1 FROM admin_countries c WHERE c.code = t.country AND $3 = ANY (c.allowed_currencies))) AS has_currency
       FROM tenants t WHERE t.id = $1`,
    [tenantId, t.product, t.currency],
  );
  const r = rows[0];
  const missing = [
    ...(r?.has_product ? [] : [`product ${t.product} (create it with POST /v1/products)`]),
    ...(r?.has_currency
      ? []
      : [`currency ${t.currency} (not the tenant's base currency nor allowed in its country)`]),
  ];
  if (missing.length === 0) return;
  throw new AppError(
    'TEMPLATE_NOT_APPLICABLE',
    `template ${t.id} cannot be copied into tenant ${tenantId}: it has no ${missing.join(' and no ')}`,
    {
      extra: {
        missing: {
          ...(r?.has_product ? {} : { product: t.product }),
          ...(r?.has_currency ? {} : { currency: t.currency }),
        },
      },
    },
  );
}

const tags = ['admin.schedules'];

const publishScheduleTemplateRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/schedule-templates'),
    operationId: 'publishScheduleTemplate',
    tags,
    mode: 'create',
    summary:
      'Platform admins: publish a fee, commission or limit schedule template every tenant may copy (immutable once published)',
    body: Type.Object(
      { name: Name, kind: Kind, product: ProductCode, currency: CurrencyCode, items: TemplateItems },
      { additionalProperties: false },
    ),
    responses: { 201: { description: 'The template', schema: Template } },
    write: async (ctx, w) => {
      await requirePlatformAdminTenant(w.q, w.caller.tenantId, 'publish schedule templates');
      const b = ctx.body;
      await requireMinorUnits(w.q, b.currency);
      split(b.kind, b.items); // the schedule rules' own parsing: a template that could not be copied is refused now
      const { rows } = await w.q.query<TemplateRow>(
        `INSERT INTO schedule_templates (id, name, kind, product, currency, items, published_by) VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7)
           ON CONFLICT DO NOTHING RETURNING ${cols}`,
        [
          uuidv7(deps.now()),
          b.name,
          b.kind,
          b.product,
          b.currency,
          JSON.stringify(b.items),
          w.caller.principalId,
        ],
      );
      const t = rows[0];
      if (!t)
        throw new AppError(
          'TEMPLATE_EXISTS',
          `a ${b.kind} template ${b.name} for ${b.product} in ${b.currency} exists`,
        );
      await w.audit(
        'schedule_template.publish',
        { type: 'schedule_template', id: t.id },
        { name: t.name, kind: t.kind, product: t.product, currency: t.currency },
      );
      return { status: 201, body: templateView(t) };
    },
  });

const listScheduleTemplatesRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/schedule-templates'),
    operationId: 'listScheduleTemplates',
    tags,
    mode: 'read',
    summary: 'The templates the platform publishes (filter by kind and currency)',
    query: Type.Object({ kind: Type.Optional(Kind), currency: Type.Optional(CurrencyCode) }),
    responses: { 200: { description: '{items}', schema: ItemsOf(Template) } },
    read: async (ctx) => {
      const { rows } = await deps.db.query<TemplateRow>(
        `SELECT ${cols} FROM schedule_templates WHERE ($1::text IS NULL OR kind = $1) AND ($2::text IS NULL OR currency = $2) ORDER BY id LIMIT 500`,
        [ctx.query.kind ?? null, ctx.query.currency ?? null],
      );
      return { status: 200, body: { items: rows.map(templateView) } };
    },
  });

const copyScheduleTemplateRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/schedule-templates/{templateId}:copy'),
    operationId: 'copyScheduleTemplate',
    tags,
    mode: 'create',
    summary:
      "Copy a template into the caller's tenant as an INACTIVE TENANT schedule (activate it with PATCH /v1/schedules/{id})",
    params: Type.Object({ templateId: Uuid }),
    body: Type.Object({ name: Type.Optional(Name) }, { additionalProperties: false }),
    responses: { 201: { description: 'The new schedule', schema: Schedule } },
    write: async (ctx, w) => {
      const t = await requireTemplate(w.q, ctx.params.templateId);
      await requireApplicable(w.q, w.caller.tenantId, t);
      const s = await createSchedule(
        w.q,
        {
          tenantId: w.caller.tenantId,
          kind: t.kind,
          product: t.product,
          currency: t.currency,
          scope: 'TENANT',
          scopeRef: w.caller.tenantId,
          name: ctx.body?.name ?? t.name,
        },
        split(t.kind, t.items),
      );
      await w.audit(
        'schedule.copy_template',
        { type: 'schedule', id: s.id },
        { template: t.id, kind: s.kind, product: s.product, currency: s.currency },
      );
      return { status: 201, body: await view(w.q, s) };
    },
  });

export function templateRoutes(deps: AdminDeps): RouteSpec[] {
  return [
    publishScheduleTemplateRoute(deps),
    listScheduleTemplatesRoute(deps),
    copyScheduleTemplateRoute(deps),
  ];
}
