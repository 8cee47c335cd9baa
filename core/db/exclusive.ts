/**
 * Background jobs that every core instance runs on a timer (hold expiry, housekeeping, the lapsed
 * payer sweep) but that
 * need only one runner at a time across instances (issue 23 item 6): each run first takes a
 * PostgreSQL advisory lock without waiting; an instance that does not get it skips this tick.
 * The lock is the session's, so a process that dies mid-run releases it with its connection.
 * The jobs stay correct without it (each row is claimed under a row lock in the database);
 * the lock saves duplicate work, lock waits and duplicate audit records.
 */
import type { Db } from '../../shared/db/pool.ts';

/**
 * Advisory lock keys, in the two-integer key space (disjoint from the single-bigint one that
 * migrations and per-key locks use). The class is an arbitrary constant for this schema.
 */
export const exclusiveLockClass = 72_110_750;
export const exclusiveJobs = Object.freeze({
  holdExpiry: 1,
  housekeeping: 2,
  outboxRouting: 3,
  payerRelease: 4,
});
export type ExclusiveJob = keyof typeof exclusiveJobs;

/** Run `fn` when no other instance runs `job` now; `undefined` when another one does. */
export async function runExclusive<T>(
  db: Db,
  job: ExclusiveJob,
  fn: () => Promise<T>,
): Promise<T | undefined> {
  const key = [exclusiveLockClass, exclusiveJobs[job]];
  const client = await db.pool.connect();
  let got: boolean;
  try {
    got =
      (await client.query<{ got: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS got', key)).rows[0]
        ?.got === true;
  } catch (err) {
    client.release(err as Error);
    throw err;
  }
  if (!got) {
    client.release();
    return undefined;
  }
  try {
    return await fn();
  } finally {
    // A connection that cannot unlock is destroyed, which releases the lock as well.
    const failed = await client.query('SELECT pg_advisory_unlock($1, $2)', key).then(
      () => undefined,
      (err: unknown) => err as Error,
    );
    client.release(failed);
  }
}

/**
 * Runs `job` every `everyMs` through runExclusive, never two runs of one instance at once; a
 * failed run goes to `onError` and is tried again at the next tick. The timer keeps no process
 * alive; `stop` waits for a run in flight.
 */
export class ExclusiveTimer<T> {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(
    private readonly db: Db,
    private readonly job: ExclusiveJob,
    private readonly everyMs: number,
    private readonly run: () => Promise<T>,
    private readonly report: { done(result: T): void; failed(err: Error): void },
  ) {}

  start(): void {
    this.timer = setInterval(() => this.tick(), this.everyMs);
    this.timer.unref();
  }

  private tick(): void {
    this.running ??= runExclusive(this.db, this.job, this.run)
      .then((result) => {
        if (result !== undefined) this.report.done(result);
      })
      .catch((err: unknown) => this.report.failed(err as Error))
      .finally(() => {
        this.running = undefined;
      });
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }
}
