/**
 * Promotion STG → PRD (SPEC 4.6 environments:promote, configs:promote, schedules:promote): the
 * ACTIVE ENVIRONMENT-scope configs (filtered by key) and schedules (filtered by product) of the
 * tenant's STG environment become ACTIVE in its PRD environment, in the caller's one
 * transaction. Re-running changes nothing: a value already active in PRD is skipped, and a
 * schedule whose copy of the same source is active in PRD is skipped.
 */
import { Type } from '@sinclair/typebox';
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { newVersion, type ConfigRow, configCols } from './configs/store.ts';
import { limitsOf, scheduleColumns, tiersOf, type ScheduleRow } from './schedules/store.ts';
import { activateSchedule, createSchedule } from './schedules/write.ts';
import { canonicalJson } from '../../shared/canonical-json.ts';

export interface PromoteInput {
  fromEnvId?: string | undefined;
  toEnvId?: string | undefined;
  keys?: string[] | undefined;
  products?: string[] | undefined;
  configs: boolean;
  schedules: boolean;
}
/** What a promotion copied (PromoteResult), as the promote routes answer it. */
export const PromoteResultSchema = Type.Object({
  from: Type.String(),
  to: Type.String(),
  configs: Type.Array(
    Type.Object({
      key: Type.String(),
      from: Type.String(),
      to: Type.Union([Type.String(), Type.Null()]),
      skipped: Type.Boolean(),
    }),
  ),
  schedules: Type.Array(
    Type.Object({
      source: Type.String(),
      copy: Type.Union([Type.String(), Type.Null()]),
      product: Type.String(),
      kind: Type.String(),
      skipped: Type.Boolean(),
    }),
  ),
});
export interface PromoteResult {
  from: string;
  to: string;
  configs: { key: string; from: string; to: string | null; skipped: boolean }[];
  schedules: { source: string; copy: string | null; product: string; kind: string; skipped: boolean }[];
}

async function envOf(
  q: Queryable,
  tenantId: string,
  id: string | undefined,
  type: 'STG' | 'PRD',
): Promise<string> {
  const { rows } = await q.query<{ id: string; env_type: string }>(
    `SELECT id, env_type FROM admin_environments WHERE tenant_id = $1 AND ($2::text IS NULL OR id::text = $2) AND ($2::text IS NOT NULL OR env_type = $3) ORDER BY created_at`,
    [tenantId, id ?? null, type],
  );
  if (rows.length === 0)
    throw new AppError(
      'ENVIRONMENT_NOT_FOUND',
      id ? `no environment ${id}` : `this tenant has no ${type} environment`,
    );
  if (rows.length > 1)
    throw new AppError('PROMOTION_INVALID', `this tenant has several ${type} environments: name one`);
  const env = rows[0];
  if (!env || env.env_type !== type)
    throw new AppError('PROMOTION_INVALID', `environment ${id ?? ''} is not ${type}`);
  return env.id;
}

export async function promote(
  q: Queryable,
  tenantId: string,
  actor: string,
  input: PromoteInput,
): Promise<PromoteResult> {
  const from = await envOf(q, tenantId, input.fromEnvId, 'STG');
  const to = await envOf(q, tenantId, input.toEnvId, 'PRD');
  const result: PromoteResult = { from, to, configs: [], schedules: [] };
  if (input.configs) {
    const { rows } = await q.query<ConfigRow>(
      `SELECT ${configCols} FROM admin_configs WHERE tenant_id = $1 AND scope = 'ENVIRONMENT' AND scope_ref = $2 AND status = 'ACTIVE'
          AND ($3::text[] IS NULL OR key = ANY($3)) ORDER BY key`,
      [tenantId, from, input.keys ?? null],
    );
    for (const src of rows) {
      const { rows: cur } = await q.query<{ value: unknown }>(
        `SELECT value FROM admin_configs WHERE tenant_id = $1 AND scope = 'ENVIRONMENT' AND scope_ref = $2 AND key = $3 AND status = 'ACTIVE'`,
        [tenantId, to, src.key],
      );
      if (cur[0] && canonicalJson(cur[0].value) === canonicalJson(src.value)) {
        result.configs.push({ key: src.key, from: src.id, to: null, skipped: true });
        continue;
      }
      const copy = await newVersion(q, {
        owner: tenantId,
        scope: 'ENVIRONMENT',
        scopeRef: to,
        key: src.key,
        value: src.value,
        activate: true,
        createdBy: actor,
        promotedFrom: src.id,
      });
      result.configs.push({ key: src.key, from: src.id, to: copy.id, skipped: false });
    }
  }
  if (input.schedules) {
    const { rows } = await q.query<ScheduleRow>(
      `SELECT ${scheduleColumns} FROM admin_schedules WHERE tenant_id = $1 AND scope = 'ENVIRONMENT' AND scope_ref = $2 AND status = 'ACTIVE'
          AND ($3::text[] IS NULL OR product = ANY($3)) ORDER BY product, kind`,
      [tenantId, from, input.products ?? null],
    );
    for (const src of rows) {
      const { rows: cur } = await q.query<{ id: string }>(
        `SELECT id FROM admin_schedules WHERE tenant_id = $1 AND scope = 'ENVIRONMENT' AND scope_ref = $2 AND status = 'ACTIVE' AND promoted_from = $3`,
        [tenantId, to, src.id],
      );
      if (cur[0]) {
        result.schedules.push({
          source: src.id,
          copy: null,
          product: src.product,
          kind: src.kind,
          skipped: true,
        });
        continue;
      }
      const items =
        src.kind === 'LIMIT'
          ? { limits: await limitsOf(q, tenantId, src.id) }
          : { tiers: await tiersOf(q, tenantId, src.id) };
      const copy = await createSchedule(
        q,
        {
          tenantId,
          kind: src.kind,
          product: src.product,
          currency: src.currency,
          scope: 'ENVIRONMENT',
          scopeRef: to,
          name: src.name,
          activeFrom: src.active_from,
          activeTo: src.active_to,
          promotedFrom: src.id,
        },
        items,
      );
      await activateSchedule(q, copy);
      result.schedules.push({
        source: src.id,
        copy: copy.id,
        product: src.product,
        kind: src.kind,
        skipped: false,
      });
    }
  }
  return result;
}
