/**
 * Runs impact jobs (issue 22 item 2) off the request path. Each core has one runner and at most
 * one impact worker thread (impact-worker.ts); jobs wait in policy_impact_jobs, oldest first,
 * and the runner claims one at a time under a lease. On core's event loop it only reads a page
 * of recorded decisions and commits the cursor and the result so far after the worker replayed
 * it, so a job is resumable: one whose core stopped or died is taken over, from its last page,
 * once its lease lapses. Bounds: a wall-clock budget per job (counted across takeovers), a
 * deadline per page, the worker's heap and each WASM instance's memory, and a decision count.
 * A job past its budget or memory ends `failed` with the reason and its counts so far.
 */
import type { Logger } from 'pino';
import type { BundleFiles } from '../../policy/runtime/bundle.ts';
import type { PolicyStore } from '../../policy/runtime/store.ts';
import type { Db } from '../../shared/db/pool.ts';
import type { JobRow } from './impact.ts';
import type { FromImpact, ToImpact } from './impact-thread.ts';
import { ImpactWorker, ImpactWorkerError, type ImpactWorkerOptions, impactHeapMb } from './impact-worker.ts';
import { emptyResult, type ImpactResult, type InputRow } from './replay.ts';

/** Decisions read and replayed per page: the unit of progress committed and of resumption. */
export const impactPageSize = 200;
/** A job stops (complete: false, status done) after this many decisions. */
export const impactMaxDecisions = 1_000_000;
/** A job's wall-clock budget, reading and replaying, over every core that ran it. */
export const impactBudgetMs = 5 * 60_000;
/** A page not replayed within this long fails its job: 200 decisions take milliseconds; a candidate that loops never ends. */
export const impactPageDeadlineMs = 20_000;
/** A claimed job not advanced within this long is taken over by another runner (longer than a page may take). */
const leaseMs = 30_000;
/**
 * A lease's end, made here at millisecond precision: it doubles as the holder's token (the page
 * update matches it exactly), and a JavaScript Date cannot hold PostgreSQL's microseconds.
 */
const leaseEnd = () => new Date(Date.now() + leaseMs);

export interface ImpactRunnerDeps {
  db: Db;
  log: Logger;
  /** The core's policy revisions: trusted signers, and the baseline of each recorded decision. */
  policies: PolicyStore;
  pollMs?: number;
  /** Overrides of the bounds above (tests, and operators with other windows). */
  budgetMs?: number;
  pageDeadlineMs?: number;
  worker?: Omit<ImpactWorkerOptions, 'trustedKeys'>;
}

/** A job's end that is not a result: why, in words an author can act on. */
class JobFailed extends Error {
  /** `budget`, `page`: a time bound (the message gets the counts so far); `other`: the message says it all. */
  constructor(
    readonly kind: 'budget' | 'page' | 'other',
    message = '',
  ) {
    super(message);
  }
}

export class ImpactRunner {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  private worker: ImpactWorker | undefined;

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

  /** Stop: a job in progress keeps its committed pages and is resumed by the next runner to claim it. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.worker?.stop();
    await this.running;
  }

  private async claim(): Promise<JobRow | undefined> {
    const { rows } = await this.deps.db.query<JobRow>(
      `UPDATE policy_impact_jobs SET status = 'running', lease_until = $1, updated_at = now()
       WHERE id = (SELECT id FROM policy_impact_jobs WHERE status IN ('queued', 'running') AND (lease_until IS NULL OR lease_until < now())
                   ORDER BY updated_at LIMIT 1 FOR UPDATE SKIP LOCKED)
       RETURNING *`,
      [leaseEnd()],
    );
    return rows[0];
  }

  private async runAvailable(): Promise<void> {
    try {
      for (let job = await this.claim(); job && !this.stopped; job = await this.claim()) await this.run(job);
    } finally {
      // An idle core keeps no worker (nor its memory); the next job starts one.
      await this.worker?.stop();
      this.worker = undefined;
    }
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

  private async candidateFiles(job: JobRow): Promise<BundleFiles> {
    const { rows } = await this.deps.db.query<BundleFiles>(
      'SELECT manifest, registry, wasm FROM policy_candidates WHERE tenant_id = $1 AND ref = $2',
      [job.tenant_id, job.candidate_ref],
    );
    const files = rows[0];
    if (!files) throw new JobFailed('other', `the candidate ${job.candidate_ref} no longer exists`);
    return files;
  }

  private thread(): ImpactWorker {
    if (!this.worker || this.worker.ended)
      this.worker = new ImpactWorker({ trustedKeys: this.deps.policies.trustedKeys, ...this.deps.worker });
    return this.worker;
  }

  private async run(job: JobRow): Promise<void> {
    const lease = { at: job.lease_until as Date };
    const result: ImpactResult = { ...emptyResult(), ...job.result };
    // The budget is wall-clock over every runner: what earlier ones spent is in the committed result.
    const started = Date.now();
    const spent = result.run_ms;
    const budgetEnd = started + (this.deps.budgetMs ?? impactBudgetMs) - spent;
    const elapsed = () => spent + (Date.now() - started);
    try {
      await this.replay(job, lease, result, { budgetEnd, elapsed });
    } catch (err) {
      if (this.stopped) return; // stopping core: the job is resumed from its last committed page
      // Anything else (the database, the worker that could not load the candidate) is not the
      // job's fault: it is taken over once its lease lapses, that wait charged to its budget.
      if (!(err instanceof JobFailed || err instanceof ImpactWorkerError)) {
        await this.charge(job, lease.at, result, elapsed() + leaseMs).catch(() => undefined);
        throw err;
      }
      result.run_ms = elapsed();
      if (err instanceof JobFailed && err.kind === 'budget') result.stopped = 'time_limit';
      await this.finish(job, lease.at, 'failed', result, this.reason(err, result));
    }
  }

  /**
   * After a failure of this service: the job's time so far plus the lease it now waits out before
   * it is tried again. A job whose attempts keep failing so (a candidate the worker cannot load
   * for a reason of ours, on every core) was taken over without end, `running` for ever and its
   * candidate undeletable: once this spends its budget it fails, saying it was not the candidate.
   */
  private async charge(job: JobRow, lease: Date, result: ImpactResult, runMs: number): Promise<void> {
    const budgetMs = this.deps.budgetMs ?? impactBudgetMs;
    const charged = { ...result, run_ms: Math.min(runMs, budgetMs) };
    if (runMs < budgetMs) {
      await this.deps.db.query(
        'UPDATE policy_impact_jobs SET result = $3, updated_at = now() WHERE id = $1 AND lease_until = $2',
        [job.id, lease, JSON.stringify(charged)],
      );
      return;
    }
    const reason = `this service could not run the job within its time budget of ${budgetMs / 1000} s (a failure of ours, not of the candidate); queue it again`;
    await this.finish(job, lease, 'failed', { ...charged, stopped: 'time_limit' }, reason);
  }

  private reason(err: JobFailed | ImpactWorkerError, result: ImpactResult): string {
    const after = `after ${result.scanned} decisions (the counts so far are kept)`;
    const budgetS = (this.deps.budgetMs ?? impactBudgetMs) / 1000;
    const pageS = (this.deps.pageDeadlineMs ?? impactPageDeadlineMs) / 1000;
    if (err instanceof JobFailed) {
      if (err.kind === 'budget') return `the job ran past its time budget of ${budgetS} s ${after}`;
      if (err.kind === 'page')
        return `a page of ${impactPageSize} decisions was not replayed within ${pageS} s (does the candidate loop?) ${after}`;
      return err.message;
    }
    if (err.kind === 'memory')
      return `the replay ran out of memory (worker heap bound ${this.deps.worker?.heapMb ?? impactHeapMb} MB) ${after}`;
    return `the replay worker stopped unexpectedly ${after}`;
  }

  /** Ask the worker; its answer is awaited for a page's deadline and never past the job's budget. */
  private async ask<T extends FromImpact['type']>(
    m: ToImpact,
    want: T,
    budgetEnd: number,
  ): Promise<Extract<FromImpact, { type: T }>> {
    const withinMs = this.deps.pageDeadlineMs ?? impactPageDeadlineMs;
    let reply: FromImpact;
    try {
      reply = await this.thread().ask(m, { withinMs, budgetEnd });
    } catch (err) {
      if (err instanceof ImpactWorkerError && (err.kind === 'budget' || err.kind === 'page'))
        throw new JobFailed(err.kind);
      throw err;
    }
    if (reply.type === 'refused') throw new JobFailed('other', reply.reason);
    // Not the candidate's failure: the job is left to be taken over once its lease lapses (run()).
    if (reply.type === 'unavailable')
      throw new Error(`the replay worker could not load the candidate: ${reply.reason}`);
    if (reply.type !== want) throw new JobFailed('other', 'the replay worker answered out of turn');
    return reply as Extract<FromImpact, { type: T }>;
  }

  /** Runs the job to its end; throws what ends it as `failed`. */
  private async replay(
    job: JobRow,
    lease: { at: Date },
    result: ImpactResult,
    clock: { budgetEnd: number; elapsed: () => number },
  ): Promise<void> {
    const candidate = await this.candidateFiles(job);
    await this.ask({ type: 'job', id: job.id, candidate, result }, 'loaded', clock.budgetEnd);
    const sent = new Set<string>();
    let cursor = { ts: job.cursor_ts ?? new Date(0), id: job.cursor_id ?? '0' };
    for (;;) {
      const rows = await this.page(job, cursor);
      const baselines = await this.baselines(rows, sent);
      const paged = await this.ask({ type: 'page', id: job.id, baselines, rows }, 'paged', clock.budgetEnd);
      Object.assign(result, paged.result);
      const last = rows.at(-1);
      if (last) cursor = { ts: last.recorded_at, id: last.audit_id };
      result.run_ms = clock.elapsed();
      if (rows.length < impactPageSize) {
        result.complete = true;
        return this.finish(job, lease.at, 'done', result, null);
      }
      if (result.scanned >= impactMaxDecisions) {
        result.stopped = 'decision_limit';
        return this.finish(job, lease.at, 'done', result, null);
      }
      if (Date.now() >= clock.budgetEnd) throw new JobFailed('budget');
      const moved = await this.deps.db.query<{ lease_until: Date }>(
        `UPDATE policy_impact_jobs SET cursor_ts = $3, cursor_id = $4, result = $5, updated_at = now(), lease_until = $6
         WHERE id = $1 AND lease_until = $2 RETURNING lease_until`,
        [job.id, lease.at, cursor.ts, cursor.id, JSON.stringify(result), leaseEnd()],
      );
      const next = moved.rows[0];
      // Taken over (this runner was too slow) or stopping: the job goes on elsewhere from its cursor.
      if (!next || this.stopped) return;
      lease.at = next.lease_until;
      if (await this.yieldTo(job, lease.at)) return;
    }
  }

  /**
   * Between pages, hand the runner to another tenant's waiting job: the job is released (its
   * cursor and counts committed) and claimed again after the others, oldest update first. Run to
   * its end, one tenant's slow job (up to its budget, three of them at once) held every other
   * tenant's replays back on the runner they share.
   */
  private async yieldTo(job: JobRow, lease: Date): Promise<boolean> {
    const waiting = await this.deps.db.query(
      `SELECT 1 FROM policy_impact_jobs WHERE tenant_id <> $1 AND status IN ('queued', 'running')
       AND (lease_until IS NULL OR lease_until < now()) LIMIT 1`,
      [job.tenant_id],
    );
    if (waiting.rows.length === 0) return false;
    // Released, or already taken over by another runner: either way this runner is done with it.
    await this.deps.db.query(
      'UPDATE policy_impact_jobs SET lease_until = NULL WHERE id = $1 AND lease_until = $2',
      [job.id, lease],
    );
    return true;
  }

  private async page(job: JobRow, cursor: { ts: Date; id: string }): Promise<InputRow[]> {
    // Ordered by the bigint column (d.audit_id), not the text alias: in text order '1000' < '200'
    // and the keyset cursor below would skip and repeat decisions recorded in the same instant.
    const { rows } = await this.deps.db.query<InputRow>(
      `SELECT d.recorded_at, d.audit_id::text AS audit_id, d.decision_id, d.purpose, d.route, d.allow, d.code, d.policy_version, d.input
       FROM decision_inputs d
       WHERE d.tenant_id = $1 AND d.recorded_at >= $2 AND d.recorded_at < $3 AND (d.recorded_at, d.audit_id) > ($4, $5::bigint)
       ORDER BY d.recorded_at, d.audit_id LIMIT $6`,
      [job.tenant_id, job.since, job.until, cursor.ts, cursor.id, impactPageSize],
    );
    return rows;
  }

  /** The files of each policy version the page's decisions were made by that the worker has not had yet. */
  private async baselines(
    rows: InputRow[],
    sent: Set<string>,
  ): Promise<{ ref: string; files: BundleFiles | null }[]> {
    const out: { ref: string; files: BundleFiles | null }[] = [];
    for (const ref of new Set(rows.map((r) => r.policy_version))) {
      if (sent.has(ref)) continue;
      sent.add(ref);
      out.push({ ref, files: (await this.deps.policies.resolve(ref))?.files ?? null });
    }
    return out;
  }
}
