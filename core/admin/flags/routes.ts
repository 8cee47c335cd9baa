/**
 * Feature flags (SPEC 2.11, 4.6 flags): enabled, scopes and an optional rollout percentage.
 * A user's bucket is the first 32 bits of SHA-256(flag key ":" user id) mod 10 000, so the same
 * user always gets the same answer and the share of users in the rollout matches it to 0.01 %.
 */
import { createHash } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import { AppError } from '../../../shared/errors.ts';
import type { RouteSpec } from '../../http/route.ts';
import { adminRoute, type AdminDeps } from '../http.ts';
import { Nullable, Page, pageQuery, Timestamp } from '../schemas.ts';
import { declared } from '../../http/declared.ts';

export interface FlagScope {
  scope: 'GLOBAL' | 'COUNTRY' | 'TENANT' | 'ENVIRONMENT';
  ref?: string | undefined;
}
interface FlagRow {
  key: string;
  enabled: boolean;
  scopes: FlagScope[];
  rollout: string | null;
  version: number;
  updated_at: Date;
}

/** Bucket 0–9999 of a user for a flag. */
export function bucketOf(flagKey: string, userId: string): number {
  return createHash('sha256').update(`${flagKey}:${userId}`).digest().readUInt32BE(0) % 10_000;
}

export function evaluateFlag(
  f: { key: string; enabled: boolean; scopes: FlagScope[]; rollout: number | null },
  c: {
    tenantId: string;
    envId?: string | undefined;
    country?: string | undefined;
    userId?: string | undefined;
  },
): { value: boolean; reason: string } {
  if (!f.enabled) return { value: false, reason: 'disabled' };
  const inScope =
    f.scopes.length === 0 ||
    f.scopes.some(
      (s) =>
        s.scope === 'GLOBAL' ||
        (s.scope === 'TENANT' && (s.ref ?? c.tenantId) === c.tenantId) ||
        (s.scope === 'COUNTRY' && s.ref === c.country) ||
        (s.scope === 'ENVIRONMENT' && s.ref === c.envId),
    );
  if (!inScope) return { value: false, reason: 'out_of_scope' };
  if (f.rollout === null || f.rollout >= 100) return { value: true, reason: 'enabled' };
  if (c.userId === undefined) return { value: false, reason: 'rollout_needs_user' };
  return bucketOf(f.key, c.userId) < Math.round(f.rollout * 100)
    ? { value: true, reason: 'rollout_in' }
    : { value: false, reason: 'rollout_out' };
}

const view = (f: FlagRow) => ({
  key: f.key,
  enabled: f.enabled,
  scopes: f.scopes,
  rollout: f.rollout === null ? null : Number(f.rollout),
  version: f.version,
  updated_at: f.updated_at.toISOString(),
});
const Key = Type.String({ pattern: '^[a-z][a-z0-9_.-]{0,63}$' });
const ScopeName = Type.Union([
  Type.Literal('GLOBAL'),
  Type.Literal('COUNTRY'),
  Type.Literal('TENANT'),
  Type.Literal('ENVIRONMENT'),
]);
/** A flag as the flag routes show it (view). */
const Flag = Type.Object({
  key: Key,
  enabled: Type.Boolean(),
  scopes: Type.Array(Type.Object({ scope: ScopeName, ref: Type.Optional(Type.String()) })),
  rollout: Nullable(Type.Number({ minimum: 0, maximum: 100 })),
  version: Type.Integer({ minimum: 1 }),
  updated_at: Timestamp,
});
const EffectiveFlags = Type.Object({
  context: Type.Object({
    tenantId: Type.String(),
    envId: Type.Optional(Type.String()),
    country: Type.Optional(Type.String()),
    userId: Type.Optional(Type.String()),
  }),
  flags: Type.Record(Type.String(), Type.Object({ value: Type.Boolean(), reason: Type.String() })),
});

const tags = ['admin.flags'];

const listFlagsRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/flags'),
    operationId: 'listFlags',
    summary: 'Flags with scopes and rollout (cursor by key)',
    tags,
    mode: 'read',
    query: Type.Object(pageQuery),
    responses: { 200: { description: 'A page of flags, by key', schema: Page(Flag) } },
    read: async (ctx, caller) => {
      const page = await deps.pages.open(ctx, caller.tenantId, 1);
      const { rows } = await deps.db.query<FlagRow>(
        'SELECT key, enabled, scopes, rollout, version, updated_at FROM admin_flags WHERE tenant_id = $1 AND ($2::text IS NULL OR key > $2) ORDER BY key LIMIT $3',
        [caller.tenantId, page.after?.[0] ?? null, page.limit + 1],
      );
      const { items, next_cursor } = page.finish(rows, (r) => [r.key]);
      return { status: 200, body: { items: items.map(view), next_cursor } };
    },
  });

const putFlagRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('PUT', '/v1/flags/{flagKey}'),
    operationId: 'putFlag',
    summary: 'Set enabled, scopes and rollout (upsert; idempotent)',
    tags,
    mode: 'create',
    params: Type.Object({ flagKey: Key }),
    body: Type.Object(
      {
        enabled: Type.Boolean(),
        scopes: Type.Optional(
          Type.Array(
            Type.Object(
              { scope: ScopeName, ref: Type.Optional(Type.String({ maxLength: 64 })) },
              { additionalProperties: false },
            ),
            { maxItems: 50 },
          ),
        ),
        rollout: Type.Optional(
          Type.Union([
            Type.Number({ minimum: 0, maximum: 100, description: 'percent, two decimals kept' }),
            Type.Null(),
          ]),
        ),
      },
      { additionalProperties: false },
    ),
    responses: { 200: { description: 'The flag', schema: Flag } },
    write: async (ctx, w) => {
      for (const s of ctx.body.scopes ?? []) {
        if ((s.scope === 'COUNTRY' || s.scope === 'ENVIRONMENT') && !s.ref)
          throw new AppError('FLAG_INVALID', `a ${s.scope} scope needs a ref`);
        if (s.scope === 'TENANT' && s.ref !== undefined && s.ref !== w.caller.tenantId)
          throw new AppError('FLAG_INVALID', "a TENANT scope names the caller's tenant");
      }
      const { rows } = await w.q.query<FlagRow>(
        `INSERT INTO admin_flags (tenant_id, key, enabled, scopes, rollout) VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (tenant_id, key) DO UPDATE SET enabled = EXCLUDED.enabled, scopes = EXCLUDED.scopes, rollout = EXCLUDED.rollout, version = admin_flags.version + 1, updated_at = now()
           RETURNING key, enabled, scopes, rollout, version, updated_at`,
        [
          w.caller.tenantId,
          ctx.params.flagKey,
          ctx.body.enabled,
          JSON.stringify(ctx.body.scopes ?? []),
          ctx.body.rollout ?? null,
        ],
      );
      const f = rows[0];
      if (!f) throw new AppError('INTERNAL', 'flag upsert returned nothing');
      await w.audit(
        'flag.put',
        { type: 'flag', id: f.key },
        { enabled: f.enabled, rollout: f.rollout, version: f.version },
      );
      return { status: 200, body: view(f) };
    },
  });

const effectiveFlagsRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/flags/effective'),
    operationId: 'effectiveFlags',
    summary: 'Resolve flags for tenant, environment, country and an optional user',
    tags,
    mode: 'read',
    query: Type.Object({
      envId: Type.Optional(Type.String({ maxLength: 64 })),
      country: Type.Optional(Type.String({ pattern: '^[A-Z]{2}$' })),
      userId: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
      key: Type.Optional(Key),
    }),
    responses: { 200: { description: '{context, flags: {key: {value, reason}}}', schema: EffectiveFlags } },
    read: async (ctx, caller) => {
      const { rows: t } = await deps.db.query<{ country: string }>(
        'SELECT country FROM tenants WHERE id = $1',
        [caller.tenantId],
      );
      const { rows } = await deps.db.query<FlagRow>(
        'SELECT key, enabled, scopes, rollout, version, updated_at FROM admin_flags WHERE tenant_id = $1 AND ($2::text IS NULL OR key = $2) ORDER BY key',
        [caller.tenantId, ctx.query.key ?? null],
      );
      if (ctx.query.key && rows.length === 0)
        throw new AppError('FLAG_NOT_FOUND', `no flag ${ctx.query.key}`);
      const c = {
        tenantId: caller.tenantId,
        envId: ctx.query.envId,
        country: ctx.query.country ?? t[0]?.country,
        userId: ctx.query.userId,
      };
      return {
        status: 200,
        body: {
          context: c,
          flags: Object.fromEntries(
            rows.map((f) => [
              f.key,
              evaluateFlag({ ...f, rollout: f.rollout === null ? null : Number(f.rollout) }, c),
            ]),
          ),
        },
      };
    },
  });

export function flagRoutes(deps: AdminDeps): RouteSpec[] {
  return [listFlagsRoute(deps), putFlagRoute(deps), effectiveFlagsRoute(deps)];
}
