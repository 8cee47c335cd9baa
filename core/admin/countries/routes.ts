/** Countries (SPEC 4.6 countries): enabled ISO 3166 countries with metadata, list, CRUD, history. */
import { Type } from '@sinclair/typebox';
import type { Queryable } from '../../../shared/db/pool.ts';
import { AppError } from '../../../shared/errors.ts';
import type { RouteSpec } from '../../http/route.ts';
import { adminRoute, checkIfMatch, type AdminDeps, platformTable } from '../http.ts';
import { countryProblems } from '../reference/routes.ts';
import { isTimeZone, isoCountry } from '../reference/iso.ts';
import {
  AuditPage,
  CountryCode,
  CurrencyCode,
  JsonObject,
  Metadata,
  Nullable,
  Page,
  Timestamp,
  iso,
  pageQuery,
} from '../schemas.ts';
import { auditPage } from '../audit/query.ts';
import { declared } from '../../http/declared.ts';

interface CountryRow {
  code: string;
  name: string;
  region: string;
  subregion: string;
  timezones: string[];
  locales: string[];
  metadata: Record<string, unknown>;
  base_currency: string | null;
  allowed_currencies: string[];
  config_version: number;
  created_at: Date;
  updated_at: Date;
}
const cols =
  'code, name, region, subregion, timezones, locales, metadata, base_currency, allowed_currencies, config_version, created_at, updated_at';

/** An enabled country as every route shows it (countryView). */
export const Country = Type.Object({
  code: CountryCode,
  name: Type.String(),
  region: Type.String(),
  subregion: Type.String(),
  timezones: Type.Array(Type.String()),
  locales: Type.Array(Type.String()),
  metadata: JsonObject,
  base_currency: Nullable(CurrencyCode),
  allowed_currencies: Type.Array(CurrencyCode),
  config_version: Type.Integer({ minimum: 0 }),
  created_at: Timestamp,
  updated_at: Timestamp,
});

export const countryView = (r: CountryRow) => ({
  ...r,
  created_at: iso(r.created_at),
  updated_at: iso(r.updated_at),
});

export async function requireCountry(q: Queryable, code: string, lock = false): Promise<CountryRow> {
  const { rows } = await q.query<CountryRow>(
    `SELECT ${cols} FROM admin_countries WHERE code = $1${lock ? ' FOR UPDATE' : ''}`,
    [code],
  );
  const row = rows[0];
  if (!row) throw new AppError('COUNTRY_NOT_FOUND', `country ${code} is not enabled`);
  return row;
}

/** The first problem of a payload as its error (400). */
async function assertCountry(deps: AdminDeps, b: Parameters<typeof countryProblems>[1]): Promise<void> {
  const problems = await countryProblems(deps, b);
  const first = problems[0];
  if (first) {
    const code =
      first.code === 'CURRENCY_INVALID'
        ? 'CURRENCY_INVALID'
        : first.code === 'BASE_CURRENCY_NOT_ALLOWED'
          ? 'BASE_CURRENCY_NOT_ALLOWED'
          : 'COUNTRY_INVALID';
    throw new AppError(code, `${first.field}: ${first.message}`, { extra: { problems } });
  }
}

const Params = Type.Object({ code: CountryCode });
const CreateBody = Type.Object(
  {
    code: Type.String({ maxLength: 8, description: 'ISO 3166-1 alpha-2 (upper case)' }),
    base_currency: Type.Optional(CurrencyCode),
    allowed_currencies: Type.Optional(Type.Array(CurrencyCode, { maxItems: 50, uniqueItems: true })),
    timezones: Type.Optional(Type.Array(Type.String({ maxLength: 64 }), { maxItems: 20 })),
    metadata: Type.Optional(Metadata),
  },
  { additionalProperties: false },
);
const PatchBody = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    timezones: Type.Optional(Type.Array(Type.String({ maxLength: 64 }), { maxItems: 20 })),
    locales: Type.Optional(Type.Array(Type.String({ maxLength: 35 }), { maxItems: 20 })),
    metadata: Type.Optional(Metadata),
  },
  { additionalProperties: false, minProperties: 1 },
);

const tags = ['admin.countries'];

const listCountriesRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/countries'),
    operationId: 'listCountries',
    summary: 'Enabled countries (cursor, search, sort; offset as fallback)',
    tags,
    mode: 'read',
    query: Type.Object({
      ...pageQuery,
      search: Type.Optional(Type.String({ maxLength: 64 })),
      sort: Type.Optional(Type.Union([Type.Literal('code'), Type.Literal('name')])),
      offset: Type.Optional(Type.Integer({ minimum: 0 })),
    }),
    responses: { 200: { description: 'A page of countries', schema: Page(Country) } },
    read: async (ctx, caller) => {
      const sort = ctx.query.sort ?? 'code';
      if (ctx.query.cursor !== undefined && ctx.query.offset !== undefined)
        throw new AppError('VALIDATION_FAILED', 'send cursor or offset (the legacy fallback), not both');
      const page = await deps.pages.open(ctx, caller.tenantId, 2);
      const after = page.after;
      const { rows } = await deps.db.query<CountryRow>(
        `SELECT ${cols} FROM admin_countries
            WHERE ($1::text IS NULL OR code ILIKE $1 || '%' OR name ILIKE '%' || $1 || '%')
              AND ($2::text IS NULL OR (${sort}, code) > ($2, $3))
            ORDER BY ${sort}, code LIMIT $4 OFFSET $5`,
        [
          ctx.query.search ?? null,
          after?.[0] ?? null,
          after?.[1] ?? null,
          page.limit + 1,
          after ? 0 : (ctx.query.offset ?? 0),
        ],
      );
      const { items, next_cursor } = page.finish(rows, (r) => [r[sort], r.code]);
      return { status: 200, body: { items: items.map(countryView), next_cursor } };
    },
  });

const createCountryRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/countries'),
    operationId: 'createCountry',
    summary: 'Enable a country (validated against ISO 3166; idempotent)',
    tags,
    mode: 'create',
    body: CreateBody,
    responses: { 201: { description: 'The country', schema: Country } },
    write: async (ctx, w) => {
      await platformTable(w, 'the country table');
      const b = ctx.body;
      const allowed = b.allowed_currencies ?? (b.base_currency ? [b.base_currency] : []);
      await assertCountry(deps, {
        code: b.code,
        base_currency: b.base_currency,
        allowed_currencies: allowed,
      });
      for (const tz of b.timezones ?? [])
        if (!isTimeZone(tz))
          throw new AppError('COUNTRY_INVALID', `timezones: ${tz} is not an IANA time zone`);
      const ref = isoCountry(b.code);
      if (!ref) throw new AppError('COUNTRY_INVALID', `${b.code} is not an ISO 3166-1 country`);
      const { rows } = await w.q.query<CountryRow>(
        `INSERT INTO admin_countries (code, name, region, subregion, timezones, locales, metadata, base_currency, allowed_currencies)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (code) DO NOTHING RETURNING ${cols}`,
        [
          ref.code,
          ref.name,
          ref.region,
          ref.subregion,
          b.timezones ?? ref.timezones,
          ref.locales,
          JSON.stringify(b.metadata ?? {}),
          b.base_currency ?? null,
          allowed,
        ],
      );
      const row = rows[0];
      if (!row) throw new AppError('COUNTRY_EXISTS', `country ${b.code} is already enabled`);
      await w.audit('country.create', { type: 'country', id: row.code });
      return { status: 201, body: countryView(row) };
    },
  });

const getCountryRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/countries/{code}'),
    operationId: 'getCountry',
    summary: 'One country',
    tags,
    mode: 'read',
    params: Params,
    responses: { 200: { description: 'The country', schema: Country } },
    read: async (ctx) => ({
      status: 200,
      body: countryView(await requireCountry(deps.db, ctx.params.code)),
    }),
  });

const updateCountryRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('PATCH', '/v1/countries/{code}'),
    operationId: 'updateCountry',
    summary: 'Update name, time zones, locales, metadata (If-Match)',
    tags,
    mode: 'write',
    ifMatch: true,
    params: Params,
    body: PatchBody,
    responses: { 200: { description: 'The country', schema: Country } },
    write: async (ctx, w) => {
      await platformTable(w, 'the country table');
      const before = await requireCountry(w.q, ctx.params.code, true);
      checkIfMatch(ctx.headers, countryView(before));
      for (const tz of ctx.body.timezones ?? [])
        if (!isTimeZone(tz))
          throw new AppError('COUNTRY_INVALID', `timezones: ${tz} is not an IANA time zone`);
      for (const l of ctx.body.locales ?? []) {
        try {
          Intl.getCanonicalLocales(l);
        } catch {
          throw new AppError('COUNTRY_INVALID', `locales: ${l} is not a BCP 47 tag`);
        }
      }
      const { rows } = await w.q.query<CountryRow>(
        `UPDATE admin_countries SET name = coalesce($2, name), timezones = coalesce($3, timezones), locales = coalesce($4, locales),
                  metadata = coalesce($5, metadata), version = version + 1, updated_at = now() WHERE code = $1 RETURNING ${cols}`,
        [
          ctx.params.code,
          ctx.body.name ?? null,
          ctx.body.timezones ?? null,
          ctx.body.locales ?? null,
          ctx.body.metadata ? JSON.stringify(ctx.body.metadata) : null,
        ],
      );
      await w.audit(
        'country.update',
        { type: 'country', id: ctx.params.code },
        { fields: Object.keys(ctx.body) },
      );
      return { status: 200, body: countryView(rows[0] ?? before) };
    },
  });

const deleteCountryRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('DELETE', '/v1/countries/{code}'),
    operationId: 'deleteCountry',
    summary: 'Disable a country nothing refers to',
    tags,
    mode: 'write',
    params: Params,
    responses: { 204: { description: 'Deleted' } },
    write: async (ctx, w) => {
      await platformTable(w, 'the country table');
      await requireCountry(w.q, ctx.params.code, true);
      const { rows } = await w.q.query<{ what: string }>(
        `SELECT 'tenant' AS what FROM tenants WHERE country = $1
           UNION ALL SELECT 'config' FROM admin_configs WHERE scope = 'COUNTRY' AND scope_ref = $1 AND status = 'ACTIVE'
           UNION ALL SELECT 'schedule' FROM admin_schedules WHERE scope = 'COUNTRY' AND scope_ref = $1 AND status <> 'ARCHIVED' LIMIT 1`,
        [ctx.params.code],
      );
      if (rows[0])
        throw new AppError(
          'COUNTRY_IN_USE',
          `country ${ctx.params.code} is still referred to by a ${rows[0].what}`,
        );
      await w.q.query('DELETE FROM admin_countries WHERE code = $1', [ctx.params.code]);
      await w.audit('country.delete', { type: 'country', id: ctx.params.code });
      return { status: 204 };
    },
  });

const countryHistoryRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/countries/{code}/history'),
    operationId: 'countryHistory',
    summary: "Audit events of a country (this tenant's chain), paginated",
    tags,
    mode: 'read',
    params: Params,
    query: Type.Object(pageQuery),
    responses: { 200: { description: 'A page of audit records', schema: AuditPage } },
    read: async (ctx, caller) => {
      await requireCountry(deps.db, ctx.params.code);
      return {
        status: 200,
        body: await auditPage(
          deps.db,
          caller.tenantId,
          { targetType: 'country', targetId: ctx.params.code },
          await deps.pages.open(ctx, caller.tenantId, 1),
        ),
      };
    },
  });

export function countryRoutes(deps: AdminDeps): RouteSpec[] {
  return [
    listCountriesRoute(deps),
    createCountryRoute(deps),
    getCountryRoute(deps),
    updateCountryRoute(deps),
    deleteCountryRoute(deps),
    countryHistoryRoute(deps),
  ];
}
