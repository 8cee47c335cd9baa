/**
 * Impact of a candidate bundle on recorded decisions (issue 22 item 2): a job replays a tenant's
 * recorded decision inputs (migration 0910) of a time window against the candidate and counts
 * decisions unchanged, allow→deny and deny→allow, grouped by purpose, route and reason, with a
 * few samples of each flip showing both traces. Jobs run off the request path: a runner in each
 * core claims one under a lease and advances it a page at a time, committing the cursor and the
 * partial result after each page (a job outlives the core that started it), yielding between
 * pages, bounded in decisions, time and the size of its result.
 */
import { Type, type Static } from '@sinclair/typebox';
import type { Logger } from 'pino';
import type { PolicyDecision, PolicyRevision } from '../../policy/runtime/bundle.ts';
import type { PolicyStore } from '../../policy/runtime/store.ts';
import type { Db, Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import type { CandidateLoader } from './candidates.ts';

/** Decisions read and replayed per page (one synchronous WASM burst between yields). */
export const impactPageSize = 200;
/** A job stops (complete: false) after this many decisions or this much running time. */
export const impactMaxDecisions = 1_000_000;
export const impactMaxRunMs = 5 * 60_000;
/** Result bounds: groups kept (the rest counted under `other`), samples per group and in all. */
const maxGroups = 500;
const samplesPerGroup = 3;
const maxSamples = 60;
/** A claimed job not advanced within this long is taken over by another runner. */
const leaseMs = 30_000;
/**
 * A lease's end, made here at millisecond precision: it doubles as the holder's token (the page
 * update matches it exactly), and a JavaScript Date cannot hold PostgreSQL's microseconds.
 */
const leaseEnd = () => new Date(Date.now() + leaseMs);
/** The longest window one job may cover. */
export const impactMaxWindowMs = 31 * 24 * 3_600_000;

const Change = Type.Union([
  Type.Literal('unchanged'),
  Type.Literal('allow_to_deny'),
  Type.Literal('deny_to_allow'),
  Type.Literal('error'),
]);
type Change = Static<typeof Change>;
const Trace = Type.Union([
  Type.Object({
    allow: Type.Boolean(),
    code: Type.String(),
    message: Type.String(),
    reasons: Type.Array(Type.Object({ check: Type.String(), ok: Type.Boolean(), detail: Type.Unknown() })),
  }),
  Type.Null(),
]);

export const ImpactResult = Type.Object({
  scanned: Type.Integer(),
  unchanged: Type.Integer(),
  allow_to_deny: Type.Integer(),
  deny_to_allow: Type.Integer(),
  errors: Type.Integer(),
  /** Recorded decisions their own policy version no longer reproduces from the recorded (scrubbed) input. */
  drift: Type.Integer(),
  complete: Type.Boolean(),
  stopped: Type.Optional(Type.Union([Type.Literal('decision_limit'), Type.Literal('time_limit')])),
  run_ms: Type.Integer(),
  groups: Type.Array(
    Type.Object({
      change: Change,
      purpose: Type.String(),
      route: Type.String(),
      reason: Type.String(),
      count: Type.Integer(),
    }),
  ),
  samples: Type.Array(
    Type.Object({
      change: Change,
      purpose: Type.String(),
      route: Type.String(),
      reason: Type.String(),
      decision_id: Type.String(),
      audit_id: Type.String(),
      recorded_at: Type.String({ format: 'date-time' }),
      /** The recorded input: secrets were never recorded; personal identifiers are keyed pseudonyms. */
      input: Type.Unknown(),
      recorded: Type.Object({ allow: Type.Boolean(), code: Type.String(), policy_version: Type.String() }),
      /** The recorded decision's policy replayed with its trace (null when that revision is no longer available). */
      baseline: Trace,
      candidate: Trace,
    }),
  ),
});
export type ImpactResult = Static<typeof ImpactResult>;

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

const emptyResult = (): ImpactResult => ({
  scanned: 0,
  unchanged: 0,
  allow_to_deny: 0,
  deny_to_allow: 0,
  errors: 0,
  drift: 0,
  complete: false,
  run_ms: 0,
  groups: [],
  samples: [],
});

interface JobRow {
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
 * A tenant's jobs queued or running at once: the runners are shared by every tenant and replay on
 * the core's event loop, so one tenant's authors queueing jobs without end would starve the
 * others' (issue 22 item 2: bounded in time and memory) and take core time from live requests.
 */
export const impactMaxOpenJobs = 3;

/** Queue a job (caller's transaction: the request's audit record commits with it). */
export async function queueImpactJob(
  q: Queryable,
  job: { tenantId: string; ref: string; since: Date; until: Date; requestedBy: string },
): Promise<ImpactJob> {
  // Serialises a tenant's concurrent requests, so two at once cannot both pass the count.
  await q.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`policy-impact:${job.tenantId}`]);
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

interface InputRow {
  recorded_at: Date;
  audit_id: string;
  decision_id: string;
  purpose: string;
  route: string;
  allow: boolean;
  code: string;
  policy_version: string;
  input: unknown;
}

const failedChecks = (d: PolicyDecision | undefined): string =>
  d
    ? d.reasons
        .filter((r) => !r.ok)
        .map((r) => r.check)
        .join(',')
    : '';
const traceOf = (d: PolicyDecision | undefined) =>
  d ? { allow: d.allow, code: d.code, message: d.message, reasons: d.reasons } : null;

/** Folds replayed decisions into a result, within its bounds. */
class Tally {
  private readonly groups = new Map<string, ImpactResult['groups'][number]>();
  private readonly sampled = new Map<string, number>();

  constructor(readonly result: ImpactResult) {
    for (const g of result.groups) this.groups.set(`${g.change}|${g.purpose}|${g.route}|${g.reason}`, g);
    for (const s of result.samples) {
      const k = `${s.change}|${s.purpose}|${s.route}|${s.reason}`;
      this.sampled.set(k, (this.sampled.get(k) ?? 0) + 1);
    }
  }

  count(change: Change, purpose: string, route: string, reason: string): string {
    let key = `${change}|${purpose}|${route}|${reason}`;
    let g = this.groups.get(key);
    if (!g && this.groups.size >= maxGroups) {
      key = `${change}|other|other|other`;
      g = this.groups.get(key);
    }
    if (!g) {
      const [, p = purpose, r = route, why = reason] = key.split('|');
      g = { change, purpose: p, route: r, reason: why, count: 0 };
      this.groups.set(key, g);
      this.result.groups.push(g);
    }
    g.count += 1;
    return key;
  }

  wantsSample(key: string): boolean {
    return this.result.samples.length < maxSamples && (this.sampled.get(key) ?? 0) < samplesPerGroup;
  }

  sample(key: string, s: ImpactResult['samples'][number]): void {
    this.sampled.set(key, (this.sampled.get(key) ?? 0) + 1);
    this.result.samples.push(s);
  }
}

function safely<T>(fn: () => T): T | undefined {
  try {
    return fn();
  } catch {
    return undefined;
  }
}

/**
 * Replay one recorded decision against the candidate and fold it into the tally. The candidate is
 * compared with the recorded decision's own policy version replayed on the same recorded input, so
 * what scrubbing changed (an address cut to its /24) cancels out; where that replay differs from
 * what was decided it is counted as `drift`, and where the revision is no longer available the
 * recorded verdict stands in for it.
 */
async function replayOne(
  row: InputRow,
  candidate: PolicyRevision,
  baselineOf: (ref: string) => Promise<PolicyRevision | undefined>,
  tally: Tally,
): Promise<void> {
  const r = tally.result;
  r.scanned += 1;
  const baseRev = await baselineOf(row.policy_version);
  const baseVerdict = baseRev ? safely(() => baseRev.decide(row.input)) : undefined;
  if (baseVerdict && baseVerdict.allow !== row.allow) r.drift += 1;
  const before = baseVerdict?.allow ?? row.allow;
  const verdict = safely(() => candidate.decide(row.input));
  let change: Change;
  if (!verdict) change = 'error';
  else if (verdict.allow === before) change = 'unchanged';
  else change = before ? 'allow_to_deny' : 'deny_to_allow';
  if (change === 'unchanged') {
    r.unchanged += 1;
    tally.count(change, row.purpose, row.route, '');
    return;
  }
  const cand = safely(() => candidate.evaluate(row.input));
  const base = baseRev ? safely(() => baseRev.evaluate(row.input)) : undefined;
  // The reason a flip happened: the checks failing on the side that now (or then) denies.
  const reason =
    change === 'allow_to_deny'
      ? failedChecks(cand)
      : change === 'deny_to_allow'
        ? failedChecks(base) || row.code
        : 'candidate produced no decision';
  if (change === 'allow_to_deny') r.allow_to_deny += 1;
  else if (change === 'deny_to_allow') r.deny_to_allow += 1;
  else r.errors += 1;
  const key = tally.count(change, row.purpose, row.route, reason);
  if (!tally.wantsSample(key)) return;
  tally.sample(key, {
    change,
    purpose: row.purpose,
    route: row.route,
    reason,
    decision_id: row.decision_id,
    audit_id: row.audit_id,
    recorded_at: row.recorded_at.toISOString(),
    input: row.input,
    recorded: { allow: row.allow, code: row.code, policy_version: row.policy_version },
    baseline: traceOf(base),
    candidate: traceOf(cand),
  });
}

export interface ImpactRunnerDeps {
  db: Db;
  log: Logger;
  candidates: CandidateLoader;
  /** The core's policy revisions: the baseline of a recorded decision is the revision that made it. */
  policies: PolicyStore | undefined;
  pollMs?: number;
}

/**
 * Claims queued (or abandoned) jobs one at a time and runs each to its end or its bounds. A
 * lease taken over by another runner stops this one at its next page (the update that would
 * commit the page matches no row).
 */
export class ImpactRunner {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(private readonly deps: ImpactRunnerDeps) {}

  start(): void {
    // Slow polling finds jobs another core queued or abandoned; a job queued here is poked at once.
    this.timer = setInterval(() => this.poke(), this.deps.pollMs ?? 2000);
    this.timer.unref();
  }

  /** Look for work now (also after a job is queued). */
  poke(): void {
    if (this.stopped || this.running) return;
    this.running = this.runAvailable()
      .catch((err: unknown) =>
        this.deps.log.warn({ err: (err as Error).message }, 'policy impact runner failed; will retry'),
      )
      .finally(() => {
        this.running = undefined;
      });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }

  private async claim(): Promise<JobRow | undefined> {
    const { rows } = await this.deps.db.query<JobRow>(
      `UPDATE policy_impact_jobs SET status = 'running', lease_until = $1, updated_at = now()
       WHERE id = (SELECT id FROM policy_impact_jobs WHERE status IN ('queued', 'running') AND (lease_until IS NULL OR lease_until < now())
                   ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
       RETURNING *`,
      [leaseEnd()],
    );
    return rows[0];
  }

  private async runAvailable(): Promise<void> {
    for (let job = await this.claim(); job && !this.stopped; job = await this.claim()) await this.run(job);
  }

  private async finish(
    job: JobRow,
    lease: Date,
    status: 'done' | 'failed',
    result: ImpactResult,
    error: string | null,
  ): Promise<void> {
    await this.deps.db.query(
      `UPDATE policy_impact_jobs SET status = $3, result = $4, error = $5, finished_at = now(), updated_at = now(), lease_until = NULL
       WHERE id = $1 AND lease_until = $2`,
      [job.id, lease, status, JSON.stringify(result), error],
    );
  }

  private async run(job: JobRow): Promise<void> {
    let lease = job.lease_until as Date;
    const result: ImpactResult = { ...emptyResult(), ...job.result };
    let candidate: PolicyRevision;
    try {
      candidate = await this.deps.candidates.load(job.tenant_id, job.candidate_ref);
    } catch (err) {
      await this.finish(
        job,
        lease,
        'failed',
        result,
        err instanceof AppError ? err.message : 'the candidate could not be loaded',
      );
      return;
    }
    const baselines = new Map<string, PolicyRevision | undefined>();
    const baselineOf = async (ref: string) => {
      if (!baselines.has(ref)) baselines.set(ref, await this.deps.policies?.resolve(ref));
      return baselines.get(ref);
    };
    const tally = new Tally(result);
    let cursor = { ts: job.cursor_ts ?? new Date(0), id: job.cursor_id ?? '0' };
    for (;;) {
      const started = Date.now();
      const { rows } = await this.deps.db.query<InputRow>(
        `SELECT recorded_at, audit_id::text AS audit_id, decision_id, purpose, route, allow, code, policy_version, input FROM decision_inputs
         WHERE tenant_id = $1 AND recorded_at >= $2 AND recorded_at < $3 AND (recorded_at, audit_id) > ($4, $5::bigint)
         ORDER BY recorded_at, audit_id LIMIT $6`,
        [job.tenant_id, job.since, job.until, cursor.ts, cursor.id, impactPageSize],
      );
      for (const row of rows) await replayOne(row, candidate, baselineOf, tally);
      const last = rows.at(-1);
      if (last) cursor = { ts: last.recorded_at, id: last.audit_id };
      result.run_ms += Date.now() - started;
      if (rows.length < impactPageSize) {
        result.complete = true;
        await this.finish(job, lease, 'done', result, null);
        return;
      }
      if (result.scanned >= impactMaxDecisions || result.run_ms >= impactMaxRunMs) {
        result.stopped = result.scanned >= impactMaxDecisions ? 'decision_limit' : 'time_limit';
        await this.finish(job, lease, 'done', result, null);
        return;
      }
      const moved = await this.deps.db.query<{ lease_until: Date }>(
        `UPDATE policy_impact_jobs SET cursor_ts = $3, cursor_id = $4, result = $5, updated_at = now(), lease_until = $6
         WHERE id = $1 AND lease_until = $2 RETURNING lease_until`,
        [job.id, lease, cursor.ts, cursor.id, JSON.stringify(result), leaseEnd()],
      );
      const next = moved.rows[0];
      if (!next || this.stopped) return;
      lease = next.lease_until;
      // Let requests run between pages: replay is synchronous WASM work.
      await new Promise<void>((r) => setImmediate(r));
    }
  }
}
