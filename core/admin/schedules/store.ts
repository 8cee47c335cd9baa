/**
 * Schedule rows and their items in SQL, and resolution of the ACTIVE schedule for a context:
 * an ENVIRONMENT schedule for the request's environment beats a COUNTRY schedule for its
 * country, which beats the TENANT schedule; the active window must hold the instant asked for.
 */
import type { Queryable } from '../../../shared/db/pool.ts';
import { fromDb, type Micro } from '../../../shared/money.ts';
import type { LimitItem, Tier } from './tiers.ts';

export type ScheduleKind = 'FEE' | 'LIMIT' | 'COMMISSION';
export const tieredKinds: readonly ScheduleKind[] = ['FEE', 'COMMISSION'];

export interface ScheduleRow {
  id: string;
  tenant_id: string;
  kind: ScheduleKind;
  product: string;
  currency: string;
  scope: 'TENANT' | 'COUNTRY' | 'ENVIRONMENT';
  scope_ref: string;
  name: string;
  status: 'INACTIVE' | 'ACTIVE' | 'ARCHIVED';
  active_from: Date | null;
  active_to: Date | null;
  promoted_from: string | null;
  version: number;
  created_at: Date;
  updated_at: Date;
}

export const scheduleColumns =
  'id, tenant_id, kind, product, currency, scope, scope_ref, name, status, active_from, active_to, promoted_from, version, created_at, updated_at';

export async function getSchedule(
  q: Queryable,
  tenantId: string,
  id: string,
  lock = false,
): Promise<ScheduleRow | undefined> {
  const { rows } = await q.query<ScheduleRow>(
    `SELECT ${scheduleColumns} FROM admin_schedules WHERE tenant_id = $1 AND id = $2${lock ? ' FOR UPDATE' : ''}`,
    [tenantId, id],
  );
  return rows[0];
}

const micro = (v: string | null): Micro | null => (v === null ? null : fromDb(v));

/**
 * Whether an ACTIVE schedule in `currency` has an amount with more decimals than `minorUnits`
 * (an INACTIVE one is validated again when activated). Every tenant's, on purpose: the currency
 * table is the platform's, and a change of its minor units must fit each tenant's use of it.
 */
export async function activeScheduleFinerThan(
  q: Queryable,
  currency: string,
  minorUnits: number,
): Promise<boolean> {
  const { rows } = await q.query(
    `SELECT 1 FROM admin_schedules s
      WHERE s.currency = $1 AND s.status = 'ACTIVE'
        AND (EXISTS (SELECT 1 FROM admin_schedule_tiers t
                      WHERE t.tenant_id = s.tenant_id AND t.schedule_id = s.id
                        AND (t.min_amount <> round(t.min_amount, $2) OR t.max_amount <> round(t.max_amount, $2)
                             OR t.fixed <> round(t.fixed, $2) OR t.fee_min <> round(t.fee_min, $2)
                             OR t.fee_max <> round(t.fee_max, $2)))
             OR EXISTS (SELECT 1 FROM admin_schedule_limits l
                         WHERE l.tenant_id = s.tenant_id AND l.schedule_id = s.id
                           AND l.max_amount <> round(l.max_amount, $2)))
      LIMIT 1`,
    [currency, minorUnits],
  );
  return rows.length > 0;
}

export async function tiersOf(
  q: Queryable,
  tenantId: string,
  scheduleId: string,
): Promise<(Tier & { id: string })[]> {
  const { rows } = await q.query<{
    id: string;
    min_amount: string;
    max_amount: string | null;
    fixed: string;
    percent_bps: number;
    fee_min: string | null;
    fee_max: string | null;
  }>(
    `SELECT id, min_amount, max_amount, fixed, percent_bps, fee_min, fee_max FROM admin_schedule_tiers
      WHERE tenant_id = $1 AND schedule_id = $2 ORDER BY min_amount, id`,
    [tenantId, scheduleId],
  );
  return rows.map((r) => ({
    id: r.id,
    minAmount: fromDb(r.min_amount),
    maxAmount: micro(r.max_amount),
    fixed: fromDb(r.fixed),
    percentBps: r.percent_bps,
    feeMin: micro(r.fee_min),
    feeMax: micro(r.fee_max),
  }));
}

export async function limitsOf(
  q: Queryable,
  tenantId: string,
  scheduleId: string,
): Promise<(LimitItem & { id: string })[]> {
  const { rows } = await q.query<{
    id: string;
    action: string;
    period: LimitItem['period'];
    max_amount: string | null;
    max_count: number | null;
    kyc_level: string | null;
  }>(
    `SELECT id, action, period, max_amount, max_count, kyc_level FROM admin_schedule_limits
      WHERE tenant_id = $1 AND schedule_id = $2
      ORDER BY action, CASE period WHEN 'transaction' THEN 0 WHEN 'day' THEN 1 ELSE 2 END, kyc_level NULLS FIRST, id`,
    [tenantId, scheduleId],
  );
  return rows.map((r) => ({
    id: r.id,
    action: r.action,
    period: r.period,
    maxAmount: micro(r.max_amount),
    maxCount: r.max_count,
    kycLevel: r.kyc_level,
  }));
}

export interface ResolveContext {
  tenantId: string;
  kind: ScheduleKind;
  product: string;
  currency: string;
  /** Environment id or name; ENVIRONMENT schedules apply only when given. */
  env?: string | undefined;
  /** ISO alpha-2; defaults to the tenant's country. */
  country?: string | undefined;
  at?: Date | undefined;
}

/** The winning ACTIVE schedule for a context, or undefined. */
export async function resolveSchedule(q: Queryable, c: ResolveContext): Promise<ScheduleRow | undefined> {
  const { rows } = await q.query<ScheduleRow>(
    `WITH ctx AS (
       SELECT coalesce($6::text, t.country) AS country,
              (SELECT e.id::text FROM admin_environments e WHERE e.tenant_id = $1 AND (e.id::text = $5 OR e.name = $5) LIMIT 1) AS env
         FROM tenants t WHERE t.id = $1)
     SELECT ${scheduleColumns
       .split(', ')
       .map((c2) => `s.${c2}`)
       .join(', ')} FROM admin_schedules s, ctx
      WHERE s.tenant_id = $1 AND s.kind = $2 AND s.product = $3 AND s.currency = $4 AND s.status = 'ACTIVE'
        AND (s.active_from IS NULL OR s.active_from <= $7) AND (s.active_to IS NULL OR s.active_to > $7)
        AND ((s.scope = 'ENVIRONMENT' AND s.scope_ref = ctx.env) OR (s.scope = 'COUNTRY' AND s.scope_ref = ctx.country)
             OR (s.scope = 'TENANT' AND s.scope_ref = $1))
      ORDER BY CASE s.scope WHEN 'ENVIRONMENT' THEN 0 WHEN 'COUNTRY' THEN 1 ELSE 2 END LIMIT 1`,
    [c.tenantId, c.kind, c.product, c.currency, c.env ?? null, c.country ?? null, c.at ?? new Date()],
  );
  return rows[0];
}
