/** Currencies (ISO 4217 plus local metadata), the country-currency mapping and country config (SPEC 4.6). */
import { Type } from '@sinclair/typebox';
import { AppError } from '../../../shared/errors.ts';
import type { RouteSpec } from '../../http/route.ts';
import { adminRoute, checkIfMatch, platformTable, type AdminDeps } from '../http.ts';
import { isoCurrencies, isoCurrency } from '../reference/iso.ts';
import { newVersion } from '../configs/store.ts';
import { CountryCode, CurrencyCode, JsonObject, Metadata, Nullable, Page, pageQuery } from '../schemas.ts';
import { Country, countryView, requireCountry } from './routes.ts';
import type { Queryable } from '../../../shared/db/pool.ts';
import { declared } from '../../http/declared.ts';
import { currencyHeld, currencyInSavingsProduct } from '../../ledger/reads.ts';
import { configuredAmountFinerThan } from '../reference/configured-amounts.ts';
import { applyCommittedCurrency, lockCurrencyCode } from '../reference/currencies.ts';

interface LocalRow {
  code: string;
  name: string;
  minor_units: number;
  symbol: string;
  format: Record<string, unknown>;
  metadata: Record<string, unknown>;
}

/**
 * The table's rows (one with `code`); `lock` takes the row for the write that follows, so two
 * writes with the same If-Match cannot both pass the check (the second waits and sees the first).
 */
async function locals(q: Queryable, code?: string, lock = false): Promise<Map<string, LocalRow>> {
  const { rows } = await q.query<LocalRow>(
    `SELECT code, name, minor_units, symbol, format, metadata FROM admin_currencies WHERE ($1::text IS NULL OR code = $1)${lock ? ' FOR UPDATE' : ''}`,
    [code ?? null],
  );
  return new Map(rows.map((r) => [r.code, r]));
}

function view(code: string, local: LocalRow | undefined) {
  const ref = isoCurrency(code);
  return {
    code,
    number: ref?.number ?? null,
    name: local?.name ?? ref?.name ?? code,
    minor_units: local?.minor_units ?? ref?.minorUnits ?? 2,
    symbol: local?.symbol ?? '',
    format: local?.format ?? {},
    metadata: local?.metadata ?? {},
    local_override: local !== undefined,
  };
}

/** A currency: ISO 4217 with this platform's local metadata over it (view). */
const Currency = Type.Object({
  code: CurrencyCode,
  number: Nullable(Type.String({ pattern: '^[0-9]{3}$' })),
  name: Type.String(),
  minor_units: Type.Integer({ minimum: 0, maximum: 6 }),
  symbol: Type.String(),
  format: JsonObject,
  metadata: JsonObject,
  local_override: Type.Boolean(),
});
const CountryCurrencies = Type.Object({
  code: CountryCode,
  base: Nullable(CurrencyCode),
  allowed: Type.Array(CurrencyCode),
});
const CountryConfig = Type.Object({
  code: CountryCode,
  version: Type.Integer({ minimum: 0 }),
  values: JsonObject,
  scopes: Type.Record(Type.String(), Type.Union([Type.Literal('GLOBAL'), Type.Literal('COUNTRY')])),
});
const CountryConfigReplaced = Type.Object({
  code: CountryCode,
  version: Type.Integer({ minimum: 1 }),
  values: JsonObject,
  country: Country,
});

const Params = Type.Object({ code: CurrencyCode });
const CountryParams = Type.Object({ code: CountryCode });

/**
 * Issue 21 item 2: this table is the ledger's source of minor units, and amounts already booked
 * in a currency are exact in its minor units: once a ledger account holds the currency they
 * cannot change (409 CURRENCY_MINOR_UNITS_LOCKED). A write here reaches this core's snapshot
 * (core/ledger/currency.ts) once it has committed (`afterCommit`): one that rolls back (its
 * COMMIT refused, its connection lost) announces nothing, so no reload would undo it.
 */
async function checkMinorUnitsChange(
  q: Queryable,
  local: LocalRow,
  minor: number | undefined,
): Promise<void> {
  if (minor === undefined || minor === local.minor_units) return;
  if (await currencyHeld(q, local.code))
    throw new AppError(
      'CURRENCY_MINOR_UNITS_LOCKED',
      `${local.code} has ${local.minor_units} minor units and ledger accounts hold it: its minor units cannot change`,
    );
  if (minor < local.minor_units) await checkAmountsFit(q, local.code, minor);
}

/**
 * Amounts configured in the currency (active schedules' fees, commissions and limits, savings
 * products' min_balance, API-key budgets, ledger limits: ../reference/configured-amounts.ts),
 * each validated against its minor units when written: fewer minor units than one needs would
 * make it an amount the ledger refuses, and each transfer or account that uses it. The caller
 * holds the currency's row FOR UPDATE; those writers share it, so none slips in beside this check.
 */
async function checkAmountsFit(q: Queryable, code: string, minor: number): Promise<void> {
  const finer = await configuredAmountFinerThan(q, code, minor);
  if (finer)
    throw new AppError('CURRENCY_MINOR_UNITS_LOCKED', `${code} cannot have ${minor} minor units: ${finer}`);
}

async function currencyInUse(q: Queryable, code: string): Promise<string | undefined> {
  // The ledger accepts exactly this table's currencies: one an account holds stays, and so does
  // one an amount is configured in (migration 1104 refuses such amounts in a currency it lacks).
  if (await currencyHeld(q, code)) return 'a ledger account';
  if (await currencyInSavingsProduct(q, code)) return 'a savings product';
  const { rows } = await q.query<{ what: string }>(
    `SELECT 'a country' AS what FROM admin_countries WHERE base_currency = $1 OR $1 = ANY(allowed_currencies)
     UNION ALL SELECT 'a tenant' FROM tenants WHERE base_currency = $1
     UNION ALL SELECT 'a schedule' FROM admin_schedules WHERE currency = $1 AND status <> 'ARCHIVED'
     UNION ALL SELECT 'an API key budget' FROM api_keys
                WHERE revoked_at IS NULL AND budget ->> 'currency' = $1 AND budget ? 'daily_amount' LIMIT 1`,
    [code],
  );
  return rows[0]?.what;
}

async function checkIso(q: Queryable, codes: string[]): Promise<void> {
  const local = await locals(q);
  for (const c of codes)
    if (!isoCurrency(c) && !local.has(c))
      throw new AppError('CURRENCY_INVALID', `${c} is not an ISO 4217 currency`);
}

const tags = ['admin.currencies'];
const FieldsBody = {
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
  minor_units: Type.Optional(Type.Integer({ minimum: 0, maximum: 6 })),
  symbol: Type.Optional(Type.String({ maxLength: 8 })),
  format: Type.Optional(Metadata),
  metadata: Type.Optional(Metadata),
};

const listCurrenciesRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/currencies'),
    operationId: 'listCurrencies',
    summary: 'ISO 4217 currencies with local metadata (cursor by code)',
    tags,
    mode: 'read',
    query: Type.Object({ ...pageQuery, search: Type.Optional(Type.String({ maxLength: 32 })) }),
    responses: { 200: { description: 'A page of currencies', schema: Page(Currency) } },
    read: async (ctx, caller) => {
      const page = await deps.pages.open(ctx, caller.tenantId, 1);
      const after = page.after?.[0];
      const local = await locals(deps.db);
      const s = ctx.query.search?.toLowerCase();
      const all = isoCurrencies()
        .map((c) => view(c.code, local.get(c.code)))
        .sort((a, b) => (a.code < b.code ? -1 : a.code > b.code ? 1 : 0))
        .filter(
          (c) =>
            (after === undefined || c.code > String(after)) &&
            (!s || c.code.toLowerCase().startsWith(s) || c.name.toLowerCase().includes(s)),
        );
      return { status: 200, body: page.finish(all.slice(0, page.limit + 1), (c) => [c.code]) };
    },
  });

const createCurrencyRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/currencies'),
    operationId: 'createCurrency',
    summary: 'Add local metadata for an ISO 4217 currency (idempotent)',
    tags,
    mode: 'create',
    body: Type.Object(
      { code: Type.String({ maxLength: 8 }), ...FieldsBody },
      { additionalProperties: false },
    ),
    responses: { 201: { description: 'The currency', schema: Currency } },
    write: async (ctx, w) => {
      await platformTable(w, 'the currency table');
      const ref = /^[A-Z]{3}$/.test(ctx.body.code) ? isoCurrency(ctx.body.code) : undefined;
      if (!ref) throw new AppError('CURRENCY_INVALID', `${ctx.body.code} is not an ISO 4217 currency code`);
      // Until now its ISO minor units were the schedules' (core/admin/reference/currencies.ts);
      // a schedule validated against them meanwhile is waited for, and seen.
      await lockCurrencyCode(w.q, ref.code, 'exclusive');
      if ((ctx.body.minor_units ?? ref.minorUnits) < ref.minorUnits)
        await checkAmountsFit(w.q, ref.code, ctx.body.minor_units ?? ref.minorUnits);
      const { rows } = await w.q.query<LocalRow>(
        `INSERT INTO admin_currencies (code, name, minor_units, symbol, format, metadata) VALUES ($1, $2, $3, $4, $5, $6)
           ON CONFLICT (code) DO NOTHING RETURNING code, name, minor_units, symbol, format, metadata`,
        [
          ref.code,
          ctx.body.name ?? ref.name,
          ctx.body.minor_units ?? ref.minorUnits,
          ctx.body.symbol ?? '',
          JSON.stringify(ctx.body.format ?? {}),
          JSON.stringify(ctx.body.metadata ?? {}),
        ],
      );
      if (!rows[0]) throw new AppError('CURRENCY_EXISTS', `currency ${ref.code} already has local metadata`);
      const minor = rows[0].minor_units;
      await w.audit('currency.create', { type: 'currency', id: ref.code }, { minor_units: minor });
      w.afterCommit(() => applyCommittedCurrency(ref.code, minor));
      return { status: 201, body: view(ref.code, rows[0]) };
    },
  });

const getCurrencyRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/currencies/{code}'),
    operationId: 'getCurrency',
    summary: 'One currency',
    tags,
    mode: 'read',
    params: Params,
    responses: { 200: { description: 'The currency', schema: Currency } },
    read: async (ctx) => {
      const local = (await locals(deps.db, ctx.params.code)).get(ctx.params.code);
      if (!local && !isoCurrency(ctx.params.code))
        throw new AppError('CURRENCY_NOT_FOUND', `no currency ${ctx.params.code}`);
      return { status: 200, body: view(ctx.params.code, local) };
    },
  });

const updateCurrencyRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('PATCH', '/v1/currencies/{code}'),
    operationId: 'updateCurrency',
    summary: 'Update local metadata (If-Match)',
    tags,
    mode: 'write',
    ifMatch: true,
    params: Params,
    body: Type.Object(FieldsBody, { additionalProperties: false, minProperties: 1 }),
    responses: { 200: { description: 'The currency', schema: Currency } },
    write: async (ctx, w) => {
      await platformTable(w, 'the currency table');
      const local = (await locals(w.q, ctx.params.code, true)).get(ctx.params.code);
      if (!local)
        throw new AppError(
          'CURRENCY_NOT_FOUND',
          `currency ${ctx.params.code} has no local metadata: POST it first`,
        );
      checkIfMatch(ctx.headers, view(ctx.params.code, local));
      const b = ctx.body;
      await checkMinorUnitsChange(w.q, local, b.minor_units);
      const { rows } = await w.q.query<LocalRow>(
        `UPDATE admin_currencies SET name = coalesce($2, name), minor_units = coalesce($3, minor_units), symbol = coalesce($4, symbol),
                  format = coalesce($5, format), metadata = coalesce($6, metadata), version = version + 1, updated_at = now()
            WHERE code = $1 RETURNING code, name, minor_units, symbol, format, metadata`,
        [
          ctx.params.code,
          b.name ?? null,
          b.minor_units ?? null,
          b.symbol ?? null,
          b.format ? JSON.stringify(b.format) : null,
          b.metadata ? JSON.stringify(b.metadata) : null,
        ],
      );
      // What the ledger's amounts are read with, before and after: the record says both.
      await w.audit(
        'currency.update',
        { type: 'currency', id: ctx.params.code },
        { fields: Object.keys(b), minor_units: { from: local.minor_units, to: rows[0]?.minor_units } },
      );
      const minor = rows[0]?.minor_units;
      if (minor !== undefined) w.afterCommit(() => applyCommittedCurrency(ctx.params.code, minor));
      return { status: 200, body: view(ctx.params.code, rows[0]) };
    },
  });

const deleteCurrencyRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('DELETE', '/v1/currencies/{code}'),
    operationId: 'deleteCurrency',
    summary: 'Remove local metadata of a currency not in use',
    tags,
    mode: 'write',
    params: Params,
    responses: { 204: { description: 'Deleted' } },
    write: async (ctx, w) => {
      await platformTable(w, 'the currency table');
      const local = (await locals(w.q, ctx.params.code, true)).get(ctx.params.code);
      if (!local)
        throw new AppError('CURRENCY_NOT_FOUND', `currency ${ctx.params.code} has no local metadata`);
      const use = await currencyInUse(w.q, ctx.params.code);
      if (use) throw new AppError('CURRENCY_IN_USE', `currency ${ctx.params.code} is used by ${use}`);
      await w.q.query('DELETE FROM admin_currencies WHERE code = $1', [ctx.params.code]);
      await w.audit(
        'currency.delete',
        { type: 'currency', id: ctx.params.code },
        { minor_units: local.minor_units },
      );
      w.afterCommit(() => applyCommittedCurrency(ctx.params.code, undefined));
      return { status: 204 };
    },
  });

// mapping
const countryCurrenciesRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/countries/{code}/currencies'),
    operationId: 'countryCurrencies',
    summary: 'Allowed currencies and base of a country',
    tags,
    mode: 'read',
    params: CountryParams,
    responses: { 200: { description: '{code, base, allowed}', schema: CountryCurrencies } },
    read: async (ctx) => {
      const c = await requireCountry(deps.db, ctx.params.code);
      return { status: 200, body: { code: c.code, base: c.base_currency, allowed: c.allowed_currencies } };
    },
  });

const setBaseCurrencyRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('PUT', '/v1/countries/{code}/currencies/base'),
    operationId: 'setBaseCurrency',
    summary: 'Set the base currency (must be allowed)',
    tags,
    mode: 'create',
    params: CountryParams,
    body: Type.Object({ currency: CurrencyCode }, { additionalProperties: false }),
    responses: { 200: { description: '{code, base, allowed}', schema: CountryCurrencies } },
    write: async (ctx, w) => {
      await platformTable(w, "a country's currencies");
      const c = await requireCountry(w.q, ctx.params.code, true);
      await checkIso(w.q, [ctx.body.currency]);
      if (!c.allowed_currencies.includes(ctx.body.currency))
        throw new AppError(
          'BASE_CURRENCY_NOT_ALLOWED',
          `${ctx.body.currency} is not in ${c.code}'s allowed currencies`,
        );
      await w.q.query(
        'UPDATE admin_countries SET base_currency = $2, version = version + 1, updated_at = now() WHERE code = $1',
        [c.code, ctx.body.currency],
      );
      await w.audit(
        'country.currency_base_set',
        { type: 'country', id: c.code },
        { base: ctx.body.currency, previous: c.base_currency },
      );
      return {
        status: 200,
        body: { code: c.code, base: ctx.body.currency, allowed: c.allowed_currencies },
      };
    },
  });

const setAllowedCurrenciesRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('PUT', '/v1/countries/{code}/currencies/allowed'),
    operationId: 'setAllowedCurrencies',
    summary: 'Set the allowed currencies (must include the base)',
    tags,
    mode: 'create',
    params: CountryParams,
    body: Type.Object(
      { currencies: Type.Array(CurrencyCode, { minItems: 1, maxItems: 50, uniqueItems: true }) },
      { additionalProperties: false },
    ),
    responses: { 200: { description: '{code, base, allowed}', schema: CountryCurrencies } },
    write: async (ctx, w) => {
      await platformTable(w, "a country's currencies");
      const c = await requireCountry(w.q, ctx.params.code, true);
      await checkIso(w.q, ctx.body.currencies);
      if (c.base_currency && !ctx.body.currencies.includes(c.base_currency))
        throw new AppError(
          'BASE_CURRENCY_NOT_ALLOWED',
          `the allowed currencies must include the base ${c.base_currency}`,
        );
      await w.q.query(
        'UPDATE admin_countries SET allowed_currencies = $2, version = version + 1, updated_at = now() WHERE code = $1',
        [c.code, ctx.body.currencies],
      );
      await w.audit(
        'country.currency_allowed_set',
        { type: 'country', id: c.code },
        { allowed: ctx.body.currencies },
      );
      return { status: 200, body: { code: c.code, base: c.base_currency, allowed: ctx.body.currencies } };
    },
  });

// country config (SPEC 9.4: replacing it bumps the version)
const getCountryConfigRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/countries/{code}/config'),
    operationId: 'getCountryConfig',
    summary: "The country's config (COUNTRY over GLOBAL) and its version",
    tags,
    mode: 'read',
    params: CountryParams,
    responses: { 200: { description: '{code, version, values, scopes}', schema: CountryConfig } },
    read: async (ctx) => {
      const c = await requireCountry(deps.db, ctx.params.code);
      const { rows } = await deps.db.query<{ key: string; value: unknown; scope: string }>(
        `SELECT DISTINCT ON (key) key, value, scope FROM admin_configs WHERE status = 'ACTIVE' AND tenant_id IS NULL
              AND (scope = 'GLOBAL' OR (scope = 'COUNTRY' AND scope_ref = $1)) ORDER BY key, scope = 'COUNTRY' DESC`,
        [c.code],
      );
      return {
        status: 200,
        body: {
          code: c.code,
          version: c.config_version,
          values: Object.fromEntries(rows.map((r) => [r.key, r.value])),
          scopes: Object.fromEntries(rows.map((r) => [r.key, r.scope])),
        },
      };
    },
  });

const putCountryConfigRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('PUT', '/v1/countries/{code}/config'),
    operationId: 'putCountryConfig',
    summary: "Replace the country's config; bumps its version",
    tags,
    mode: 'create',
    params: CountryParams,
    body: Type.Object(
      {
        values: Type.Record(Type.String({ pattern: '^[a-z][a-z0-9_.-]{0,127}$' }), Type.Unknown(), {
          maxProperties: 100,
        }),
      },
      { additionalProperties: false },
    ),
    responses: { 200: { description: '{code, version, values, country}', schema: CountryConfigReplaced } },
    write: async (ctx, w) => {
      await platformTable(w, "a country's configuration");
      const c = await requireCountry(w.q, ctx.params.code, true);
      if (Buffer.byteLength(JSON.stringify(ctx.body.values)) > 65_536)
        throw new AppError('CONFIG_INVALID', 'country config is larger than 64 KiB');
      await w.q.query(
        `UPDATE admin_configs SET status = 'SUPERSEDED', updated_at = now() WHERE tenant_id IS NULL AND scope = 'COUNTRY' AND scope_ref = $1 AND status = 'ACTIVE' AND NOT (key = ANY($2))`,
        [c.code, Object.keys(ctx.body.values)],
      );
      for (const [key, value] of Object.entries(ctx.body.values)) {
        await newVersion(w.q, {
          owner: null,
          scope: 'COUNTRY',
          scopeRef: c.code,
          key,
          value,
          activate: true,
          createdBy: w.caller.principalId,
        });
      }
      const { rows } = await w.q.query<{ config_version: number }>(
        'UPDATE admin_countries SET config_version = config_version + 1, updated_at = now() WHERE code = $1 RETURNING config_version',
        [c.code],
      );
      const version = rows[0]?.config_version ?? c.config_version + 1;
      await w.audit(
        'country.config_replace',
        { type: 'country', id: c.code },
        { version, keys: Object.keys(ctx.body.values) },
      );
      return {
        status: 200,
        body: {
          code: c.code,
          version,
          values: ctx.body.values,
          country: countryView({ ...c, config_version: version }),
        },
      };
    },
  });

export function currencyRoutes(deps: AdminDeps): RouteSpec[] {
  return [
    listCurrenciesRoute(deps),
    createCurrencyRoute(deps),
    getCurrencyRoute(deps),
    updateCurrencyRoute(deps),
    deleteCurrencyRoute(deps),
    countryCurrenciesRoute(deps),
    setBaseCurrencyRoute(deps),
    setAllowedCurrenciesRoute(deps),
    getCountryConfigRoute(deps),
    putCountryConfigRoute(deps),
  ];
}
