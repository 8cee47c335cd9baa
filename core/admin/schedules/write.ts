/**
 * Schedule state changes (SPEC 3): created INACTIVE; items are added only while INACTIVE;
 * activation validates (no overlap, gap or precision error) and replaces the schedule active
 * for the same kind, product, currency and scope; DELETE archives, and only while not ACTIVE.
 * An activated TENANT-scope LIMIT schedule is copied into the ledger's limit rows (through
 * core/ledger/catalog.ts), which the ledger's own limit check reads (issue 6 item 5), and
 * deactivation switches those rows off.
 */
import type { Queryable } from '../../../shared/db/pool.ts';
import { AppError } from '../../../shared/errors.ts';
import { parseAmount, toDb, type Micro } from '../../../shared/money.ts';
import { uuidv7 } from '../../../shared/uuid.ts';
import { upsertLimitRow } from '../../ledger/catalog.ts';
import { requireMinorUnits } from '../reference/currencies.ts';
import { getSchedule, limitsOf, tieredKinds, tiersOf, type ScheduleKind, type ScheduleRow } from './store.ts';
import { validateLimits, validateTiers, type Issue, type LimitItem, type Tier } from './tiers.ts';

export interface TierInput {
  min_amount: string;
  max_amount?: string | null;
  fixed?: string;
  percent_bps?: number;
  fee_min?: string | null;
  fee_max?: string | null;
}
export interface LimitInput {
  action: string;
  period: 'transaction' | 'day' | 'month';
  max_amount?: string | null;
  max_count?: number | null;
  kyc_level?: string | null;
}

function amount(text: string | null | undefined, field: string, zeroOk: boolean): Micro | null {
  if (text === null || text === undefined) return null;
  const r = parseAmount(text, { allowZero: zeroOk });
  if (!r.ok) throw new AppError('VALIDATION_FAILED', `${field} ${r.reason}`);
  return r.micro;
}

export function parseTiers(items: readonly TierInput[]): Tier[] {
  return items.map((t, i) => ({
    minAmount: amount(t.min_amount, `items[${i}].min_amount`, true) ?? 0n,
    maxAmount: amount(t.max_amount, `items[${i}].max_amount`, false),
    fixed: amount(t.fixed, `items[${i}].fixed`, true) ?? 0n,
    percentBps: t.percent_bps ?? 0,
    feeMin: amount(t.fee_min, `items[${i}].fee_min`, true),
    feeMax: amount(t.fee_max, `items[${i}].fee_max`, true),
  }));
}

export function parseLimits(items: readonly LimitInput[]): LimitItem[] {
  return items.map((r, i) => ({
    action: r.action,
    period: r.period,
    maxAmount: amount(r.max_amount, `items[${i}].max_amount`, false),
    maxCount: r.max_count ?? null,
    kycLevel: r.kyc_level ?? null,
  }));
}

/** Throw the first issue as its code; gaps are tolerated while drafting (`allowGaps`). */
export function assertValid(issues: Issue[], allowGaps: boolean): void {
  const blocking = issues.filter((i) => !(allowGaps && i.code === 'SCHEDULE_GAP'));
  const first = blocking[0];
  if (first) throw new AppError(first.code, first.message, { extra: { issues: blocking } });
}

export async function insertTiers(q: Queryable, s: ScheduleRow, tiers: readonly Tier[]): Promise<void> {
  for (const t of tiers) {
    await q.query(
      `INSERT INTO admin_schedule_tiers (id, tenant_id, schedule_id, min_amount, max_amount, fixed, percent_bps, fee_min, fee_max)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
      [
        uuidv7(),
        s.tenant_id,
        s.id,
        toDb(t.minAmount),
        t.maxAmount === null ? null : toDb(t.maxAmount),
        toDb(t.fixed),
        t.percentBps,
        t.feeMin === null ? null : toDb(t.feeMin),
        t.feeMax === null ? null : toDb(t.feeMax),
      ],
    );
  }
}

export async function insertLimits(q: Queryable, s: ScheduleRow, rows: readonly LimitItem[]): Promise<void> {
  for (const r of rows) {
    await q.query(
      `INSERT INTO admin_schedule_limits (id, tenant_id, schedule_id, action, period, max_amount, max_count, kyc_level)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
      [
        uuidv7(),
        s.tenant_id,
        s.id,
        r.action,
        r.period,
        r.maxAmount === null ? null : toDb(r.maxAmount),
        r.maxCount,
        r.kycLevel,
      ],
    );
  }
}

/** Validate the schedule's current items plus `extra` ones (issues index the combined list). */
export async function issuesOf(
  q: Queryable,
  s: Pick<ScheduleRow, 'tenant_id' | 'id' | 'kind' | 'currency'>,
  extra: { tiers?: Tier[]; limits?: LimitItem[] } = {},
): Promise<Issue[]> {
  // Locked: a change of the currency's minor units (which checks active schedules) waits for
  // this activation, or this one reads the minor units it left.
  const minor = await requireMinorUnits(q, s.currency, { lock: true });
  if (tieredKinds.includes(s.kind))
    return validateTiers([...(await tiersOf(q, s.tenant_id, s.id)), ...(extra.tiers ?? [])], minor);
  return validateLimits([...(await limitsOf(q, s.tenant_id, s.id)), ...(extra.limits ?? [])], minor);
}

/** Add items to an INACTIVE schedule (409 SCHEDULE_NOT_EDITABLE otherwise). */
export async function addItems(
  q: Queryable,
  s: ScheduleRow,
  items: { tiers?: Tier[]; limits?: LimitItem[] },
): Promise<void> {
  if (s.status !== 'INACTIVE')
    throw new AppError(
      'SCHEDULE_NOT_EDITABLE',
      `schedule ${s.id} is ${s.status}; items change only while INACTIVE`,
    );
  const tiered = tieredKinds.includes(s.kind);
  if ((tiered && items.limits) || (!tiered && items.tiers))
    throw new AppError(
      'SCHEDULE_INVALID',
      `a ${s.kind} schedule takes ${tiered ? 'fee tiers' : 'limit rows'}`,
    );
  assertValid(await issuesOf(q, s, items), true);
  if (items.tiers) await insertTiers(q, s, items.tiers);
  if (items.limits) await insertLimits(q, s, items.limits);
  await q.query('UPDATE admin_schedules SET version = version + 1, updated_at = now() WHERE id = $1', [s.id]);
}

export interface NewSchedule {
  tenantId: string;
  kind: ScheduleKind;
  product: string;
  currency: string;
  scope: ScheduleRow['scope'];
  scopeRef: string;
  name?: string;
  activeFrom?: Date | null;
  activeTo?: Date | null;
  promotedFrom?: string | null;
}

/** Insert an INACTIVE schedule with its items (validated; gaps allowed while drafting). */
export async function createSchedule(
  q: Queryable,
  n: NewSchedule,
  items: { tiers?: Tier[]; limits?: LimitItem[] },
): Promise<ScheduleRow> {
  const id = uuidv7();
  await q.query(
    `INSERT INTO admin_schedules (id, tenant_id, kind, product, currency, scope, scope_ref, name, active_from, active_to, promoted_from)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
    [
      id,
      n.tenantId,
      n.kind,
      n.product,
      n.currency,
      n.scope,
      n.scopeRef,
      n.name ?? '',
      n.activeFrom ?? null,
      n.activeTo ?? null,
      n.promotedFrom ?? null,
    ],
  );
  const s = await getSchedule(q, n.tenantId, id);
  if (!s) throw new AppError('INTERNAL', 'schedule vanished');
  await addItems(q, s, items);
  return (await getSchedule(q, n.tenantId, id)) ?? s;
}

async function syncLedgerRows(q: Queryable, s: ScheduleRow, active: boolean): Promise<void> {
  if (s.kind !== 'LIMIT' || s.scope !== 'TENANT') return;
  const rows = (await limitsOf(q, s.tenant_id, s.id)).filter((r) => r.kycLevel === null);
  for (const r of rows) {
    await upsertLimitRow(q, {
      tenantId: s.tenant_id,
      product: s.product,
      action: r.action,
      currency: s.currency,
      period: r.period,
      maxAmount: r.maxAmount === null ? null : toDb(r.maxAmount),
      maxCount: r.maxCount,
      active,
    });
  }
}

/** INACTIVE → ACTIVE after full validation; the schedule it replaces becomes INACTIVE. */
export async function activateSchedule(q: Queryable, s: ScheduleRow): Promise<void> {
  if (s.status === 'ARCHIVED') throw new AppError('SCHEDULE_NOT_EDITABLE', `schedule ${s.id} is archived`);
  if (s.status === 'ACTIVE') return;
  const issues = await issuesOf(q, s);
  assertValid(issues, false);
  const empty = tieredKinds.includes(s.kind)
    ? (await tiersOf(q, s.tenant_id, s.id)).length === 0
    : (await limitsOf(q, s.tenant_id, s.id)).length === 0;
  if (empty) throw new AppError('SCHEDULE_INVALID', 'a schedule without items cannot be activated');
  const { rows: replaced } = await q.query<{ id: string }>(
    `UPDATE admin_schedules SET status = 'INACTIVE', version = version + 1, updated_at = now()
      WHERE tenant_id = $1 AND kind = $2 AND product = $3 AND currency = $4 AND scope = $5 AND scope_ref = $6 AND status = 'ACTIVE' RETURNING id`,
    [s.tenant_id, s.kind, s.product, s.currency, s.scope, s.scope_ref],
  );
  for (const r of replaced) {
    const old = await getSchedule(q, s.tenant_id, r.id);
    if (old) await syncLedgerRows(q, old, false);
  }
  await q.query(
    `UPDATE admin_schedules SET status = 'ACTIVE', version = version + 1, updated_at = now() WHERE id = $1`,
    [s.id],
  );
  await syncLedgerRows(q, s, true);
}

export async function deactivateSchedule(q: Queryable, s: ScheduleRow): Promise<void> {
  if (s.status !== 'ACTIVE') return;
  await q.query(
    `UPDATE admin_schedules SET status = 'INACTIVE', version = version + 1, updated_at = now() WHERE id = $1`,
    [s.id],
  );
  await syncLedgerRows(q, s, false);
}

/** SPEC 3: DELETE only while not active → ARCHIVED (409 SCHEDULE_ACTIVE otherwise). */
export async function archiveSchedule(q: Queryable, s: ScheduleRow): Promise<void> {
  if (s.status === 'ACTIVE')
    throw new AppError('SCHEDULE_ACTIVE', `schedule ${s.id} is active; deactivate it first`);
  await q.query(
    `UPDATE admin_schedules SET status = 'ARCHIVED', version = version + 1, updated_at = now() WHERE id = $1`,
    [s.id],
  );
}
