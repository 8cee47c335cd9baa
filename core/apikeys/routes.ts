/** `/api-keys` (SPEC 4.4): create or rotate (secret shown once), list, view, revoke. Tenant admins only. */
import { tenantAdmin } from '../http/tenant-admin.ts';
import { Type } from '@sinclair/typebox';
import { AppError } from '../../shared/errors.ts';
import { hostBitsSet, parseCidr, rangeText } from '../../shared/ip-ranges.ts';
import { cursorParam, cursorsOf, NextCursor } from '../http/cursor.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import type { KeyStore } from '../keys/keys.ts';
import type { Db } from '../../shared/db/pool.ts';
import { ApiKeys, defaultRotationGraceS, maxRotationGraceS } from './store.ts';
import { declared } from '../http/declared.ts';
import { parseAmount } from '../../shared/money.ts';
import { dailyBudgetMaxMicros, dailyBudgetMaxUnits } from '../../shared/api-key-budget.ts';

const Decimal = Type.String({
  pattern: '^(0|[1-9][0-9]{0,13})(\\.[0-9]{1,6})?$',
  description: 'decimal string, up to 6 places',
});
const Budget = Type.Object(
  {
    daily_amount: Type.Optional(Decimal),
    currency: Type.Optional(Type.String({ pattern: '^[A-Z]{3}$' })),
    per_minute: Type.Optional(Type.Integer({ minimum: 1, maximum: 100_000 })),
  },
  {
    additionalProperties: false,
    // Migration 1104's guard under the key's INSERT.
    description:
      '`daily_amount` is exact in the minor units of `currency`, a currency of the platform table, and at most 9000000000000 (422 INVALID_AMOUNT, 422 UNKNOWN_CURRENCY)',
  },
);
const Scope = Type.String({ pattern: '^[a-z][a-z_]*:[a-z_]+$', maxLength: 64 });
const CreateBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 100 }),
    scopes: Type.Array(Scope, { minItems: 1, maxItems: 32, uniqueItems: true }),
    budget: Type.Optional(Budget),
    ip_allowlist: Type.Optional(Type.Array(Type.String({ maxLength: 64 }), { maxItems: 64 })),
    expires_at: Type.Optional(Type.String({ format: 'date-time' })),
    /** Rotate this existing key instead of creating one. */
    rotate: Type.Optional(Type.String({ pattern: '^pk_(live|test)_[A-Za-z0-9]{16,64}$' })),
    grace_seconds: Type.Optional(Type.Integer({ minimum: 0, maximum: maxRotationGraceS })),
  },
  { additionalProperties: false },
);
const KeyView = Type.Object({
  id: Type.String(),
  name: Type.String(),
  scopes: Type.Array(Type.String()),
  budget: Type.Record(Type.String(), Type.Unknown()),
  ip_allowlist: Type.Array(Type.String(), {
    description:
      'CIDR ranges (SPEC 2.9) as stored and as the edge reads them, the same on create, GET and list: ' +
      "PostgreSQL's cidr text, always address/prefix (10.0.0.1 is 10.0.0.1/32), IPv6 lower-case and " +
      'shortest (2001:DB8::/32 is 2001:db8::/32), an IPv4-mapped address with its dotted tail (::ffff:10.0.0.1/128)',
  }),
  expires_at: Type.Union([Type.String(), Type.Null()]),
  created_by: Type.String(),
  created_at: Type.String(),
  rotated_at: Type.Union([Type.String(), Type.Null()]),
  revoked_at: Type.Union([Type.String(), Type.Null()]),
});
const Created = Type.Intersect([
  KeyView,
  Type.Object({ secret: Type.String({ description: 'shown once, never again' }) }),
]);
const IdParams = Type.Object({ id: Type.String({ pattern: '^pk_(live|test)_[A-Za-z0-9]{16,64}$' }) });
const ListQuery = Type.Object({
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
  cursor: Type.Optional(cursorParam),
});

const caller = tenantAdmin;
const tags = ['api-keys'];

function createApiKey(store: ApiKeys): RouteSpec {
  return defineRoute({
    ...declared('POST', '/api-keys'),
    operationId: 'createApiKey',
    summary: 'Create an API key, or rotate one (`rotate`); the secret is returned once',
    tags,
    body: CreateBody,
    responses: { 201: { description: 'Created; keep the secret', schema: Created } },
    handler: async (ctx) => {
      const { tenantId, actor } = caller(ctx);
      const b = ctx.body;
      if (b.rotate) {
        const { key, secret } = await store.rotate(
          tenantId,
          actor,
          b.rotate,
          b.grace_seconds ?? defaultRotationGraceS,
        );
        return { status: 201, headers: { 'cache-control': 'no-store' }, body: { ...key, secret } };
      }
      // Read and stored as the edge reads them (shared/ip-ranges.ts): `address/prefix`.
      const allowlist = (b.ip_allowlist ?? []).map((c) => parseCidr(c));
      const bad = (b.ip_allowlist ?? []).filter((_, i) => !allowlist[i]);
      if (bad.length > 0) throw new AppError('VALIDATION_FAILED', `not a CIDR: ${bad.join(', ')}`);
      const loose = allowlist.flatMap((c) => (c && hostBitsSet(c) ? [rangeText(c)] : []));
      if (loose.length > 0)
        throw new AppError(
          'VALIDATION_FAILED',
          `address bits set past the prefix (give the network address, or /32 or /128 for one host): ${loose.join(', ')}`,
        );
      if (b.budget?.daily_amount !== undefined && !b.budget.currency)
        throw new AppError('VALIDATION_FAILED', 'budget.daily_amount needs budget.currency');
      const daily =
        b.budget?.daily_amount !== undefined
          ? parseAmount(b.budget.daily_amount, { allowZero: true })
          : undefined;
      if (daily?.ok && daily.micro > dailyBudgetMaxMicros)
        throw new AppError(
          'INVALID_AMOUNT',
          `budget.daily_amount: at most ${dailyBudgetMaxUnits} (migration 1118)`,
        );
      if (b.expires_at && Date.parse(b.expires_at) <= Date.now())
        throw new AppError('VALIDATION_FAILED', 'expires_at is in the past');
      const { key, secret } = await store.create(tenantId, actor, {
        name: b.name,
        scopes: b.scopes,
        budget: b.budget ?? {},
        ipAllowlist: allowlist.flatMap((c) => (c ? [rangeText(c)] : [])),
        expiresAt: b.expires_at,
      });
      return { status: 201, headers: { 'cache-control': 'no-store' }, body: { ...key, secret } };
    },
  });
}

function listApiKeys(deps: { db: Db; keys: KeyStore }, store: ApiKeys): RouteSpec {
  return defineRoute({
    ...declared('GET', '/api-keys'),
    operationId: 'listApiKeys',
    summary: "The tenant's API keys (never their secrets)",
    tags,
    query: ListQuery,
    responses: {
      200: {
        description: 'A page',
        schema: Type.Object({
          items: Type.Array(KeyView),
          next_cursor: NextCursor,
        }),
      },
    },
    handler: async (ctx) => {
      const tenantId = caller(ctx).tenantId;
      const page = await cursorsOf(deps.db, deps.keys).open(ctx, tenantId, 2, 20);
      return { status: 200, body: await store.list(tenantId, page) };
    },
  });
}

function getApiKey(store: ApiKeys): RouteSpec {
  return defineRoute({
    ...declared('GET', '/api-keys/{id}'),
    operationId: 'getApiKey',
    summary: 'One API key (never its secret)',
    tags,
    params: IdParams,
    responses: { 200: { description: 'The key', schema: KeyView } },
    handler: async (ctx) => ({
      status: 200,
      body: await store.get(caller(ctx).tenantId, ctx.params.id),
    }),
  });
}

function revokeApiKey(store: ApiKeys): RouteSpec {
  return defineRoute({
    ...declared('DELETE', '/api-keys/{id}'),
    operationId: 'revokeApiKey',
    summary: 'Revoke an API key; edges refuse it from the next request',
    tags,
    params: IdParams,
    responses: { 204: { description: 'Revoked' } },
    handler: async (ctx) => {
      const { tenantId, actor } = caller(ctx);
      await store.revoke(tenantId, actor, ctx.params.id);
      return { status: 204 };
    },
  });
}

export function apiKeyRoutes(deps: { db: Db; keys: KeyStore }): RouteSpec[] {
  const store = new ApiKeys(deps.db, deps.keys);
  return [createApiKey(store), listApiKeys(deps, store), getApiKey(store), revokeApiKey(store)];
}
