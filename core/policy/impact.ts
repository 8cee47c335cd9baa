/**
 * Impact jobs (issue 22 item 2): a job replays a tenant's recorded decision inputs (migration
 * 0910) of a time window against a candidate and counts decisions unchanged, allow→deny and
 * deny→allow, grouped by purpose, route and reason, with a few samples of each flip showing
 * both traces (replay.ts). Queued here in the request's transaction; run by a core's
 * ImpactRunner (impact-runner.ts) on its impact worker thread, off the request path.
 */
import { Type, type Static } from '@sinclair/typebox';
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { lockTenantPolicy } from './candidates.ts';
import { emptyResult, ImpactResult } from './replay.ts';

/** The longest window one job may cover. */
export const impactMaxWindowMs = 31 * 24 * 3_600_000;

export const ImpactJob = Type.Object({
  id: Type.String({ format: 'uuid' }),
  status: Type.Union([
    Type.Literal('queued'),
    Type.Literal('running'),
    Type.Literal('done'),
    Type.Literal('failed'),
  ]),
  policy_ref: Type.String(),
  since: Type.String({ format: 'date-time' }),
  until: Type.String({ format: 'date-time' }),
  requested_by: Type.String(),
  created_at: Type.String({ format: 'date-time' }),
  finished_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  error: Type.Union([Type.String(), Type.Null()]),
  result: ImpactResult,
});
export type ImpactJob = Static<typeof ImpactJob>;

/** A job as stored (migration 0910). */
export interface JobRow {
  id: string;
  tenant_id: string;
  candidate_ref: string;
  since: Date;
  until: Date;
  status: ImpactJob['status'];
  requested_by: string;
  cursor_ts: Date | null;
  cursor_id: string | null;
  result: Partial<ImpactResult>;
  error: string | null;
  lease_until: Date | null;
  created_at: Date;
  finished_at: Date | null;
}

function view(r: JobRow): ImpactJob {
  return {
    id: r.id,
    status: r.status,
    policy_ref: r.candidate_ref,
    since: r.since.toISOString(),
    until: r.until.toISOString(),
    requested_by: r.requested_by,
    created_at: r.created_at.toISOString(),
    finished_at: r.finished_at?.toISOString() ?? null,
    error: r.error,
    result: { ...emptyResult(), ...r.result },
  };
}

/**
 * A tenant's jobs queued or running at once: each core runs one job at a time for every tenant,
 * so one tenant's authors queueing jobs without end would starve the others' (issue 22 item 2:
 * bounded in time and memory).
 */
export const impactMaxOpenJobs = 3;

/** Queue a job (caller's transaction: the request's audit record commits with it). */
export async function queueImpactJob(
  q: Queryable,
  job: { tenantId: string; ref: string; since: Date; until: Date; requestedBy: string },
): Promise<ImpactJob> {
  // Serialises a tenant's concurrent requests, so two at once cannot both pass the count.
  await lockTenantPolicy(q, job.tenantId);
  const open = await q.query<{ n: string }>(
    `SELECT count(*) AS n FROM policy_impact_jobs WHERE tenant_id = $1 AND status IN ('queued', 'running')`,
    [job.tenantId],
  );
  if (Number(open.rows[0]?.n) >= impactMaxOpenJobs) {
    throw new AppError(
      'RATE_LIMITED',
      `${impactMaxOpenJobs} impact jobs of this tenant are queued or running; wait for one to finish`,
    );
  }
  const { rows } = await q.query<JobRow>(
    `INSERT INTO policy_impact_jobs (id, tenant_id, candidate_ref, since, until, requested_by) VALUES ($1, $2, $3, $4, $5, $6) RETURNING *`,
    [uuidv7(), job.tenantId, job.ref, job.since, job.until, job.requestedBy],
  );
  return view(rows[0] as JobRow);
}

export async function impactJob(q: Queryable, tenantId: string, id: string): Promise<ImpactJob> {
  const { rows } = await q.query<JobRow>(
    'SELECT * FROM policy_impact_jobs WHERE tenant_id = $1 AND id = $2',
    [tenantId, id],
  );
  const row = rows[0];
  if (!row) throw new AppError('IMPACT_JOB_NOT_FOUND', `no impact job ${id}`);
  return view(row);
}
