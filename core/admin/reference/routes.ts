/** Reference data routes (SPEC 4.6 reference, countries:reference) and country validation. */
import { Type, type TSchema } from '@sinclair/typebox';
import type { RouteSpec } from '../../http/route.ts';
import { adminRoute, type AdminDeps } from '../http.ts';
import { CountryCode, CurrencyCode, ItemsOf } from '../schemas.ts';
import { minorUnitsOf } from './currencies.ts';
import { isoCountries, isoCountry, isTimeZone, regionMap, timeZones } from './iso.ts';
import { declared } from '../../http/declared.ts';

const ValidateBody = Type.Object(
  {
    code: Type.String({ maxLength: 8 }),
    base_currency: Type.Optional(Type.String({ maxLength: 8 })),
    allowed_currencies: Type.Optional(Type.Array(Type.String({ maxLength: 8 }), { maxItems: 50 })),
    timezone: Type.Optional(Type.String({ maxLength: 64 })),
    locale: Type.Optional(Type.String({ maxLength: 35 })),
  },
  { additionalProperties: false },
);

/** reference/iso.ts IsoCountry. */
const ReferenceCountry = Type.Object({
  code: CountryCode,
  alpha3: Type.String({ pattern: '^[A-Z]{3}$' }),
  name: Type.String(),
  officialName: Type.String(),
  region: Type.String(),
  subregion: Type.String(),
  currencies: Type.Array(CurrencyCode),
  timezones: Type.Array(Type.String()),
  locales: Type.Array(Type.String()),
});
const FieldProblemSchema = Type.Object({ field: Type.String(), code: Type.String(), message: Type.String() });
const Validation = Type.Object({ valid: Type.Boolean(), problems: Type.Array(FieldProblemSchema) });

export interface FieldProblem {
  field: string;
  code: string;
  message: string;
}

/** Every problem of a country payload (nothing stops at the first). */
export async function countryProblems(
  deps: AdminDeps,
  b: {
    code: string;
    base_currency?: string | undefined;
    allowed_currencies?: string[] | undefined;
    timezone?: string | undefined;
    locale?: string | undefined;
  },
): Promise<FieldProblem[]> {
  const out: FieldProblem[] = [];
  if (!/^[A-Z]{2}$/.test(b.code))
    out.push({ field: 'code', code: 'COUNTRY_INVALID', message: 'must be ISO 3166-1 alpha-2 in upper case' });
  else if (!isoCountry(b.code))
    out.push({ field: 'code', code: 'COUNTRY_INVALID', message: `${b.code} is not an ISO 3166-1 country` });
  for (const [i, c] of [
    ...(b.allowed_currencies ?? []),
    ...(b.base_currency ? [b.base_currency] : []),
  ].entries()) {
    if (!/^[A-Z]{3}$/.test(c) || (await minorUnitsOf(deps.db, c)) === undefined)
      out.push({
        field: i < (b.allowed_currencies?.length ?? 0) ? `allowed_currencies[${i}]` : 'base_currency',
        code: 'CURRENCY_INVALID',
        message: `${c} is not an ISO 4217 currency`,
      });
  }
  if (b.base_currency && b.allowed_currencies && !b.allowed_currencies.includes(b.base_currency)) {
    out.push({
      field: 'allowed_currencies',
      code: 'BASE_CURRENCY_NOT_ALLOWED',
      message: 'the allowed currencies must include the base currency',
    });
  }
  if (b.timezone !== undefined && !isTimeZone(b.timezone))
    out.push({
      field: 'timezone',
      code: 'COUNTRY_INVALID',
      message: `${b.timezone} is not an IANA time zone`,
    });
  if (b.locale !== undefined) {
    try {
      Intl.getCanonicalLocales(b.locale);
    } catch {
      out.push({ field: 'locale', code: 'COUNTRY_INVALID', message: `${b.locale} is not a BCP 47 tag` });
    }
  }
  return out;
}

export function referenceRoutes(deps: AdminDeps): RouteSpec[] {
  const tags = ['admin.reference'];
  const json = (description: string, schema: TSchema) => ({ 200: { description, schema } });
  return [
    adminRoute(deps, {
      ...declared('GET', '/v1/countries:reference'),
      operationId: 'countriesReference',
      summary: 'ISO 3166 countries with regions, time zones and locale examples',
      tags,
      mode: 'read',
      query: Type.Object({ code: Type.Optional(CountryCode) }),
      responses: json('Reference countries', ItemsOf(ReferenceCountry)),
      read: async (ctx) => ({
        status: 200,
        body: { items: ctx.query.code ? [isoCountry(ctx.query.code)].filter(Boolean) : isoCountries() },
      }),
    }),
    adminRoute(deps, {
      ...declared('GET', '/v1/reference/timezones'),
      operationId: 'referenceTimezones',
      summary:
        'IANA time zones by canonical name (aliases such as Asia/Calcutta are accepted on input, listed as Asia/Kolkata)',
      tags,
      mode: 'read',
      responses: json('IANA zone names', ItemsOf(Type.String())),
      read: async () => ({
        status: 200,
        body: { items: timeZones() },
        headers: { 'cache-control': 'max-age=86400' },
      }),
    }),
    adminRoute(deps, {
      ...declared('GET', '/v1/reference/regions'),
      operationId: 'referenceRegions',
      summary: 'Region → subregion → country codes',
      tags,
      mode: 'read',
      responses: json(
        'Region map',
        Type.Object({
          regions: Type.Record(Type.String(), Type.Record(Type.String(), Type.Array(CountryCode))),
        }),
      ),
      read: async () => ({
        status: 200,
        body: { regions: regionMap() },
        headers: { 'cache-control': 'max-age=86400' },
      }),
    }),
    adminRoute(deps, {
      ...declared('GET', '/v1/reference/locales'),
      operationId: 'referenceLocales',
      summary: 'BCP 47 locale hints per country (CLDR likely subtags)',
      tags,
      mode: 'read',
      query: Type.Object({ country: Type.Optional(CountryCode) }),
      responses: json(
        'Locale hints',
        ItemsOf(Type.Object({ country: CountryCode, locales: Type.Array(Type.String()) })),
      ),
      read: async (ctx) => ({
        status: 200,
        body: {
          items: isoCountries()
            .filter((c) => !ctx.query.country || c.code === ctx.query.country)
            .map((c) => ({ country: c.code, locales: c.locales })),
        },
      }),
    }),
    adminRoute(deps, {
      ...declared('POST', '/v1/validate/country'),
      operationId: 'validateCountry',
      summary: 'Validate a country payload without saving it',
      tags,
      mode: 'read',
      body: ValidateBody,
      responses: json('{valid, problems}', Validation),
      read: async (ctx) => {
        const problems = await countryProblems(deps, ctx.body);
        return { status: 200, body: { valid: problems.length === 0, problems } };
      },
    }),
  ];
}
