/** Schedule routes (SPEC 4.6 schedules, helpers): CRUD, items, validate, effective, promote, fees:quote, limits:check. */
import { Type } from '@sinclair/typebox';
import { AppError } from '../../../shared/errors.ts';
import type { RouteSpec } from '../../http/route.ts';
import { format, parseAmount } from '../../../shared/money.ts';
import { adminRoute, checkIfMatch, type AdminDeps } from '../http.ts';
import { PromoteBody } from '../configs/routes.ts';
import { promote, PromoteResultSchema } from '../promote.ts';
import { requireMinorUnits } from '../reference/currencies.ts';
import {
  AmountOut,
  CurrencyCode,
  Decimal,
  Nullable,
  Page,
  ProductCode,
  Timestamp,
  Uuid,
  iso,
  pageQuery,
} from '../schemas.ts';
import { limitRowsFor, quoteFee } from './quote.ts';
import {
  getSchedule,
  limitsOf,
  resolveSchedule,
  scheduleColumns,
  tieredKinds,
  tiersOf,
  type ScheduleRow,
} from './store.ts';
import { validateLimits, validateTiers, type Issue } from './tiers.ts';
import {
  activateSchedule,
  addItems,
  archiveSchedule,
  createSchedule,
  deactivateSchedule,
  parseLimits,
  parseTiers,
} from './write.ts';
import type { Queryable } from '../../../shared/db/pool.ts';
import { declared } from '../../http/declared.ts';

export const Kind = Type.Union([Type.Literal('FEE'), Type.Literal('LIMIT'), Type.Literal('COMMISSION')]);
const Scope = Type.Union([Type.Literal('TENANT'), Type.Literal('COUNTRY'), Type.Literal('ENVIRONMENT')]);
export const TierIn = Type.Object(
  {
    min_amount: Decimal,
    max_amount: Type.Optional(Type.Union([Decimal, Type.Null()])),
    fixed: Type.Optional(Decimal),
    percent_bps: Type.Optional(Type.Integer({ minimum: 0, maximum: 10000 })),
    fee_min: Type.Optional(Type.Union([Decimal, Type.Null()])),
    fee_max: Type.Optional(Type.Union([Decimal, Type.Null()])),
  },
  { additionalProperties: false },
);
export const LimitIn = Type.Object(
  {
    action: ProductCode,
    period: Type.Union([Type.Literal('transaction'), Type.Literal('day'), Type.Literal('month')]),
    max_amount: Type.Optional(Type.Union([Decimal, Type.Null()])),
    max_count: Type.Optional(Type.Union([Type.Integer({ minimum: 1 }), Type.Null()])),
    kyc_level: Type.Optional(Type.Union([Type.String({ maxLength: 16 }), Type.Null()])),
  },
  { additionalProperties: false },
);
const Period = Type.Union([Type.Literal('transaction'), Type.Literal('day'), Type.Literal('month')]);
const TierOut = Type.Object({
  id: Uuid,
  min_amount: AmountOut,
  max_amount: Nullable(AmountOut),
  fixed: AmountOut,
  percent_bps: Type.Integer({ minimum: 0, maximum: 10000 }),
  fee_min: Nullable(AmountOut),
  fee_max: Nullable(AmountOut),
});
const LimitOut = Type.Object({
  id: Uuid,
  action: Type.String(),
  period: Period,
  max_amount: Nullable(AmountOut),
  max_count: Nullable(Type.Integer()),
  kyc_level: Nullable(Type.String()),
});
/** A schedule without its items, as the list shows it. */
const ScheduleSummary = Type.Object({
  id: Uuid,
  kind: Kind,
  product: ProductCode,
  currency: CurrencyCode,
  scope: Scope,
  scopeRef: Type.String(),
  name: Type.String(),
  status: Type.Union([Type.Literal('INACTIVE'), Type.Literal('ACTIVE'), Type.Literal('ARCHIVED')]),
  active_from: Nullable(Timestamp),
  active_to: Nullable(Timestamp),
});
/** A schedule with its fee tiers or limit rows (view). */
export const Schedule = Type.Intersect([
  ScheduleSummary,
  Type.Object({
    promoted_from: Nullable(Uuid),
    created_at: Timestamp,
    updated_at: Timestamp,
    items: Type.Union([Type.Array(TierOut), Type.Array(LimitOut)]),
  }),
]);
const Validation = Type.Object({
  valid: Type.Boolean(),
  issues: Type.Array(
    Type.Object({
      code: Type.String(),
      message: Type.String(),
      items: Type.Array(Type.Integer({ minimum: 0 })),
    }),
  ),
});
const FeeQuote = Type.Object({
  scheduleId: Uuid,
  tierId: Uuid,
  amount: AmountOut,
  fee: AmountOut,
  currency: CurrencyCode,
  tier: TierOut,
});
const LimitCheck = Type.Object({
  rows: Type.Array(
    Type.Object({
      scheduleId: Uuid,
      rowId: Uuid,
      action: Type.String(),
      period: Period,
      max_amount: Nullable(AmountOut),
      max_count: Nullable(Type.Integer()),
      kyc_level: Nullable(Type.String()),
    }),
  ),
  within_transaction_limit: Nullable(Type.Boolean()),
});
export const Items = Type.Optional(Type.Array(Type.Union([TierIn, LimitIn]), { maxItems: 100 }));
const Params = Type.Object({ scheduleId: Uuid });
/**
 * The environment is `envId`, as in configs and flags (issue 15 item 8); `env`, its former name
 * here, is still read for one release (README "Renamed parameters").
 */
const Ctx = {
  envId: Type.Optional(Type.String({ maxLength: 64 })),
  env: Type.Optional(
    Type.String({
      maxLength: 64,
      deprecated: true,
      description: 'Former name of envId; read until the next release',
    }),
  ),
  country: Type.Optional(Type.String({ pattern: '^[A-Z]{2}$' })),
};

/** The environment a request names, by either name; both naming different ones is refused. */
function envOf(c: { envId?: string | undefined; env?: string | undefined }): string | undefined {
  if (c.envId !== undefined && c.env !== undefined && c.envId !== c.env) {
    throw new AppError('VALIDATION_FAILED', 'envId and its former name env name different environments');
  }
  return c.envId ?? c.env;
}

export function split(
  kind: string,
  items: readonly unknown[],
): { tiers?: ReturnType<typeof parseTiers>; limits?: ReturnType<typeof parseLimits> } {
  const tiered = tieredKinds.includes(kind as ScheduleRow['kind']);
  for (const [i, it] of items.entries()) {
    const isTier = typeof it === 'object' && it !== null && 'min_amount' in it;
    if (isTier !== tiered)
      throw new AppError(
        'SCHEDULE_INVALID',
        `items[${i}]: a ${kind} schedule takes ${tiered ? 'fee tiers' : 'limit rows'}`,
      );
  }
  return tiered
    ? { tiers: parseTiers(items as Parameters<typeof parseTiers>[0]) }
    : { limits: parseLimits(items as Parameters<typeof parseLimits>[0]) };
}

export async function view(q: Queryable, s: ScheduleRow) {
  const minor = await requireMinorUnits(q, s.currency);
  const m = (v: bigint | null) => (v === null ? null : format(v, minor));
  const items = tieredKinds.includes(s.kind)
    ? (await tiersOf(q, s.tenant_id, s.id)).map((t) => ({
        id: t.id,
        min_amount: m(t.minAmount),
        max_amount: m(t.maxAmount),
        fixed: m(t.fixed),
        percent_bps: t.percentBps,
        fee_min: m(t.feeMin),
        fee_max: m(t.feeMax),
      }))
    : (await limitsOf(q, s.tenant_id, s.id)).map((r) => ({
        id: r.id,
        action: r.action,
        period: r.period,
        max_amount: m(r.maxAmount),
        max_count: r.maxCount,
        kyc_level: r.kycLevel,
      }));
  return {
    id: s.id,
    kind: s.kind,
    product: s.product,
    currency: s.currency,
    scope: s.scope,
    scopeRef: s.scope_ref,
    name: s.name,
    status: s.status,
    active_from: iso(s.active_from),
    active_to: iso(s.active_to),
    promoted_from: s.promoted_from,
    created_at: iso(s.created_at),
    updated_at: iso(s.updated_at),
    items,
  };
}

async function requireSchedule(
  q: Queryable,
  tenantId: string,
  id: string,
  lock = false,
): Promise<ScheduleRow> {
  const s = await getSchedule(q, tenantId, id, lock);
  if (!s) throw new AppError('SCHEDULE_NOT_FOUND', `no schedule ${id}`);
  return s;
}

function money(text: string, minor: number, field: string): bigint {
  const r = parseAmount(text, { minorUnits: minor, allowZero: true });
  if (!r.ok) throw new AppError('INVALID_AMOUNT', `${field} ${r.reason}`);
  return r.micro;
}

const tags = ['admin.schedules'];

const listSchedulesRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/schedules'),
    operationId: 'listSchedules',
    summary: 'Schedules (filters: kind, product, scope, scopeRef, active)',
    tags,
    mode: 'read',
    query: Type.Object({
      ...pageQuery,
      kind: Type.Optional(Kind),
      product: Type.Optional(ProductCode),
      scope: Type.Optional(Scope),
      scopeRef: Type.Optional(Type.String({ maxLength: 64 })),
      active: Type.Optional(Type.Boolean()),
    }),
    responses: {
      200: { description: 'A page of schedules (without items)', schema: Page(ScheduleSummary) },
    },
    read: async (ctx, caller) => {
      const page = await deps.pages.open(ctx, caller.tenantId, 1);
      const after = page.after?.[0];
      const { rows } = await deps.db.query<ScheduleRow>(
        `SELECT ${scheduleColumns} FROM admin_schedules WHERE tenant_id = $1 AND ($2::text IS NULL OR kind = $2) AND ($3::text IS NULL OR product = $3)
              AND ($4::text IS NULL OR scope = $4) AND ($5::text IS NULL OR scope_ref = $5) AND ($6::boolean IS NULL OR (status = 'ACTIVE') = $6)
              AND ($7::uuid IS NULL OR id > $7) ORDER BY id LIMIT $8`,
        [
          caller.tenantId,
          ctx.query.kind ?? null,
          ctx.query.product ?? null,
          ctx.query.scope ?? null,
          ctx.query.scopeRef ?? null,
          ctx.query.active ?? null,
          after ?? null,
          page.limit + 1,
        ],
      );
      const { items, next_cursor } = page.finish(rows, (r) => [r.id]);
      return {
        status: 200,
        body: {
          items: items.map((s) => ({
            id: s.id,
            kind: s.kind,
            product: s.product,
            currency: s.currency,
            scope: s.scope,
            scopeRef: s.scope_ref,
            name: s.name,
            status: s.status,
            active_from: iso(s.active_from),
            active_to: iso(s.active_to),
          })),
          next_cursor,
        },
      };
    },
  });

const createScheduleRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/schedules'),
    operationId: 'createSchedule',
    summary: 'Create a schedule (always INACTIVE) with optional items',
    tags,
    mode: 'create',
    body: Type.Object(
      {
        kind: Kind,
        product: ProductCode,
        currency: CurrencyCode,
        scope: Type.Optional(Scope),
        scopeRef: Type.Optional(Type.String({ maxLength: 64 })),
        name: Type.Optional(Type.String({ maxLength: 100 })),
        active_from: Type.Optional(Type.String({ format: 'date-time' })),
        active_to: Type.Optional(Type.String({ format: 'date-time' })),
        items: Items,
      },
      { additionalProperties: false },
    ),
    responses: { 201: { description: 'The schedule', schema: Schedule } },
    write: async (ctx, w) => {
      const b = ctx.body;
      await requireMinorUnits(w.q, b.currency);
      const scope = b.scope ?? 'TENANT';
      const scopeRef = scope === 'TENANT' ? w.caller.tenantId : b.scopeRef;
      if (!scopeRef || (scope === 'TENANT' && b.scopeRef !== undefined && b.scopeRef !== w.caller.tenantId))
        throw new AppError(
          'SCHEDULE_INVALID',
          `scopeRef is required for ${scope} (a TENANT schedule's is the caller's tenant)`,
        );
      if (
        scope === 'ENVIRONMENT' &&
        !(
          await w.q.query('SELECT 1 FROM admin_environments WHERE tenant_id = $1 AND id::text = $2', [
            w.caller.tenantId,
            scopeRef,
          ])
        ).rows[0]
      )
        throw new AppError('ENVIRONMENT_NOT_FOUND', `no environment ${scopeRef}`);
      if (
        scope === 'COUNTRY' &&
        !(await w.q.query('SELECT 1 FROM admin_countries WHERE code = $1', [scopeRef])).rows[0]
      )
        throw new AppError('COUNTRY_NOT_FOUND', `country ${scopeRef} is not enabled`);
      const s = await createSchedule(
        w.q,
        {
          tenantId: w.caller.tenantId,
          kind: b.kind,
          product: b.product,
          currency: b.currency,
          scope,
          scopeRef,
          name: b.name ?? '',
          activeFrom: b.active_from ? new Date(b.active_from) : null,
          activeTo: b.active_to ? new Date(b.active_to) : null,
        },
        split(b.kind, b.items ?? []),
      );
      await w.audit(
        'schedule.create',
        { type: 'schedule', id: s.id },
        { kind: s.kind, product: s.product, currency: s.currency, scope, scopeRef },
      );
      return { status: 201, body: await view(w.q, s) };
    },
  });

const effectiveScheduleRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/schedules:effective'),
    operationId: 'effectiveSchedule',
    summary: 'The ACTIVE schedule for tenant, environment and country',
    tags,
    mode: 'read',
    query: Type.Object({ kind: Kind, product: ProductCode, currency: CurrencyCode, ...Ctx }),
    responses: { 200: { description: 'The schedule with items', schema: Schedule } },
    read: async (ctx, caller) => {
      const { envId: _envId, env: _env, ...rest } = ctx.query;
      const s = await resolveSchedule(deps.db, {
        tenantId: caller.tenantId,
        ...rest,
        env: envOf(ctx.query),
      });
      if (!s)
        throw new AppError(
          'NO_ACTIVE_SCHEDULE',
          `no active ${ctx.query.kind} schedule for ${ctx.query.product} in ${ctx.query.currency}`,
        );
      return { status: 200, body: await view(deps.db, s) };
    },
  });

const validateScheduleRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/schedules:validate'),
    operationId: 'validateSchedule',
    summary: 'Report overlaps, gaps and precision errors (a stored schedule or inline items)',
    tags,
    mode: 'read',
    body: Type.Object(
      {
        scheduleId: Type.Optional(Uuid),
        kind: Type.Optional(Kind),
        currency: Type.Optional(CurrencyCode),
        items: Items,
      },
      { additionalProperties: false },
    ),
    responses: { 200: { description: '{valid, issues[{code, message, items}]}', schema: Validation } },
    read: async (ctx, caller) => {
      let issues: Issue[];
      if (ctx.body.scheduleId) {
        const s = await requireSchedule(deps.db, caller.tenantId, ctx.body.scheduleId);
        const minor = await requireMinorUnits(deps.db, s.currency);
        issues = tieredKinds.includes(s.kind)
          ? validateTiers(await tiersOf(deps.db, caller.tenantId, s.id), minor)
          : validateLimits(await limitsOf(deps.db, caller.tenantId, s.id), minor);
      } else {
        if (!ctx.body.kind || !ctx.body.currency)
          throw new AppError('SCHEDULE_INVALID', 'give scheduleId, or kind, currency and items');
        const minor = await requireMinorUnits(deps.db, ctx.body.currency);
        const parts = split(ctx.body.kind, ctx.body.items ?? []);
        issues = parts.tiers ? validateTiers(parts.tiers, minor) : validateLimits(parts.limits ?? [], minor);
      }
      return { status: 200, body: { valid: issues.length === 0, issues } };
    },
  });

const promoteSchedulesRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/schedules:promote'),
    operationId: 'promoteSchedules',
    summary: 'Promote ENVIRONMENT schedules STG → PRD (product filter, one transaction)',
    tags,
    mode: 'create',
    body: PromoteBody,
    responses: { 200: { description: 'What was copied', schema: PromoteResultSchema } },
    write: async (ctx, w) => {
      const r = await promote(w.q, w.caller.tenantId, w.caller.principalId, {
        ...ctx.body,
        configs: false,
        schedules: true,
      });
      await w.audit(
        'schedule.promote',
        { type: 'environment', id: r.to },
        {
          from: r.from,
          products: ctx.body.products ?? null,
          copied: r.schedules.filter((s) => !s.skipped).length,
        },
      );
      return { status: 200, body: r };
    },
  });

const getScheduleRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/schedules/{scheduleId}'),
    operationId: 'getSchedule',
    summary: 'One schedule with its items',
    tags,
    mode: 'read',
    params: Params,
    responses: { 200: { description: 'The schedule', schema: Schedule } },
    read: async (ctx, caller) => ({
      status: 200,
      body: await view(deps.db, await requireSchedule(deps.db, caller.tenantId, ctx.params.scheduleId)),
    }),
  });

const updateScheduleRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('PATCH', '/v1/schedules/{scheduleId}'),
    operationId: 'updateSchedule',
    summary: 'Activate or deactivate; change name or window while inactive (If-Match)',
    tags,
    mode: 'write',
    ifMatch: true,
    params: Params,
    body: Type.Object(
      {
        status: Type.Optional(Type.Union([Type.Literal('ACTIVE'), Type.Literal('INACTIVE')])),
        name: Type.Optional(Type.String({ maxLength: 100 })),
        active_from: Type.Optional(Type.Union([Type.String({ format: 'date-time' }), Type.Null()])),
        active_to: Type.Optional(Type.Union([Type.String({ format: 'date-time' }), Type.Null()])),
      },
      { additionalProperties: false, minProperties: 1 },
    ),
    responses: { 200: { description: 'The schedule', schema: Schedule } },
    write: async (ctx, w) => {
      let s = await requireSchedule(w.q, w.caller.tenantId, ctx.params.scheduleId, true);
      checkIfMatch(ctx.headers, await view(w.q, s));
      const b = ctx.body;
      if (b.name !== undefined || b.active_from !== undefined || b.active_to !== undefined) {
        if (s.status !== 'INACTIVE')
          throw new AppError('SCHEDULE_NOT_EDITABLE', `schedule ${s.id} is ${s.status}`);
        await w.q.query(
          `UPDATE admin_schedules SET name = coalesce($2, name), active_from = CASE WHEN $3 THEN $4::timestamptz ELSE active_from END,
              active_to = CASE WHEN $5 THEN $6::timestamptz ELSE active_to END, version = version + 1, updated_at = now() WHERE id = $1`,
          [
            s.id,
            b.name ?? null,
            b.active_from !== undefined,
            b.active_from ?? null,
            b.active_to !== undefined,
            b.active_to ?? null,
          ],
        );
        s = await requireSchedule(w.q, w.caller.tenantId, s.id);
      }
      if (b.status === 'ACTIVE') await activateSchedule(w.q, s);
      if (b.status === 'INACTIVE') await deactivateSchedule(w.q, s);
      await w.audit(
        b.status === 'ACTIVE'
          ? 'schedule.activate'
          : b.status === 'INACTIVE'
            ? 'schedule.deactivate'
            : 'schedule.update',
        { type: 'schedule', id: s.id },
        { fields: Object.keys(b) },
      );
      return { status: 200, body: await view(w.q, await requireSchedule(w.q, w.caller.tenantId, s.id)) };
    },
  });

const deleteScheduleRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('DELETE', '/v1/schedules/{scheduleId}'),
    operationId: 'deleteSchedule',
    summary: 'Archive a schedule that is not active',
    tags,
    mode: 'write',
    params: Params,
    responses: { 204: { description: 'Archived' } },
    write: async (ctx, w) => {
      const s = await requireSchedule(w.q, w.caller.tenantId, ctx.params.scheduleId, true);
      await archiveSchedule(w.q, s);
      await w.audit('schedule.archive', { type: 'schedule', id: s.id });
      return { status: 204 };
    },
  });

const quoteFeeRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/fees:quote'),
    operationId: 'quoteFee',
    summary: 'Resolve the fee tier and fee for product, amount, currency, env, country',
    tags,
    mode: 'read',
    body: Type.Object(
      { product: ProductCode, amount: Decimal, currency: CurrencyCode, ...Ctx },
      { additionalProperties: false },
    ),
    responses: {
      200: { description: '{scheduleId, tierId, amount, fee, currency, tier}', schema: FeeQuote },
    },
    read: async (ctx, caller) => {
      const minor = await requireMinorUnits(deps.db, ctx.body.currency);
      const amount = money(ctx.body.amount, minor, 'amount');
      const q = await quoteFee(deps.db, {
        tenantId: caller.tenantId,
        product: ctx.body.product,
        amount,
        currency: ctx.body.currency,
        env: envOf(ctx.body),
        country: ctx.body.country,
      });
      const tier = (
        await view(deps.db, await requireSchedule(deps.db, caller.tenantId, q.scheduleId))
      ).items.find((i) => i.id === q.tierId);
      return {
        status: 200,
        body: {
          scheduleId: q.scheduleId,
          tierId: q.tierId,
          amount: format(amount, minor),
          fee: format(q.fee, minor),
          currency: q.currency,
          tier,
        },
      };
    },
  });

const checkLimitRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/limits:check'),
    operationId: 'checkLimit',
    summary:
      'The applicable limit rows for product, action, period (and whether an amount fits one transaction)',
    tags,
    mode: 'read',
    // SPEC 4.6: currency is optional; without it the tenant's base currency is checked.
    body: Type.Object(
      {
        product: ProductCode,
        action: ProductCode,
        currency: Type.Optional(CurrencyCode),
        period: Type.Optional(
          Type.Union([Type.Literal('transaction'), Type.Literal('day'), Type.Literal('month')]),
        ),
        amount: Type.Optional(Decimal),
        kyc_level: Type.Optional(Type.String({ maxLength: 16 })),
        ...Ctx,
      },
      { additionalProperties: false },
    ),
    responses: { 200: { description: '{rows, within_transaction_limit}', schema: LimitCheck } },
    read: async (ctx, caller) => {
      const b = {
        ...ctx.body,
        currency: ctx.body.currency ?? (await baseCurrencyOf(deps.db, caller.tenantId)),
      };
      const minor = await requireMinorUnits(deps.db, b.currency);
      const rows = (
        await limitRowsFor(deps.db, {
          tenantId: caller.tenantId,
          product: b.product,
          action: b.action,
          currency: b.currency,
          kycLevel: b.kyc_level,
          env: envOf(b),
          country: b.country,
        })
      ).filter((r) => !b.period || r.period === b.period);
      if (rows.length === 0)
        throw new AppError(
          'NO_ACTIVE_SCHEDULE',
          `no active limit row for ${b.product}/${b.action}${b.period ? ` per ${b.period}` : ''} in ${b.currency}`,
        );
      const amount = b.amount === undefined ? undefined : money(b.amount, minor, 'amount');
      const perTx = rows.find((r) => r.period === 'transaction');
      return {
        status: 200,
        body: {
          rows: rows.map((r) => ({
            scheduleId: r.scheduleId,
            rowId: r.rowId,
            action: r.action,
            period: r.period,
            max_amount: r.maxAmount === null ? null : format(r.maxAmount, minor),
            max_count: r.maxCount,
            kyc_level: r.kycLevel,
          })),
          within_transaction_limit:
            amount === undefined || !perTx || perTx.maxAmount === null ? null : amount <= perTx.maxAmount,
        },
      };
    },
  });

/** Adding fee tiers and adding limit rows are one route each, declared alike. */
const itemRoute = (deps: AdminDeps, kind: 'fees' | 'limits'): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', `/v1/schedules/{scheduleId}/${kind}`),
    operationId: kind === 'fees' ? 'addFeeTiers' : 'addLimitRows',
    summary: `Add ${kind === 'fees' ? 'fee tiers' : 'limit rows'} to an inactive schedule`,
    tags,
    mode: 'create',
    params: Params,
    body: Type.Object(
      { items: Type.Array(kind === 'fees' ? TierIn : LimitIn, { minItems: 1, maxItems: 100 }) },
      { additionalProperties: false },
    ),
    responses: { 200: { description: 'The schedule', schema: Schedule } },
    write: async (ctx, w) => {
      const s = await requireSchedule(w.q, w.caller.tenantId, ctx.params.scheduleId, true);
      if ((kind === 'fees') !== tieredKinds.includes(s.kind))
        throw new AppError(
          'SCHEDULE_INVALID',
          `a ${s.kind} schedule takes ${kind === 'fees' ? 'limit rows' : 'fee tiers'}`,
        );
      await addItems(w.q, s, split(s.kind, ctx.body.items));
      await w.audit('schedule.items_add', { type: 'schedule', id: s.id }, { count: ctx.body.items.length });
      return { status: 200, body: await view(w.q, await requireSchedule(w.q, w.caller.tenantId, s.id)) };
    },
  });

export function scheduleRoutes(deps: AdminDeps): RouteSpec[] {
  return [
    listSchedulesRoute(deps),
    createScheduleRoute(deps),
    effectiveScheduleRoute(deps),
    validateScheduleRoute(deps),
    promoteSchedulesRoute(deps),
    getScheduleRoute(deps),
    updateScheduleRoute(deps),
    deleteScheduleRoute(deps),
    itemRoute(deps, 'fees'),
    itemRoute(deps, 'limits'),
    quoteFeeRoute(deps),
    checkLimitRoute(deps),
  ];
}

async function baseCurrencyOf(q: Queryable, tenantId: string): Promise<string> {
  const { rows } = await q.query<{ base_currency: string }>(
    'SELECT base_currency FROM tenants WHERE id = $1',
    [tenantId],
  );
  if (!rows[0]) throw new AppError('NOT_FOUND', 'tenant not found');
  return rows[0].base_currency;
}
