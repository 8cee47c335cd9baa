/**
 * Start-up steps that wait for a dependency instead of dying on its first failure. A process that
 * exits because one connect timed out on a loaded machine is never ready (and under Kubernetes
 * restarts behind a growing back-off), though the dependency answers a second later. Here each
 * attempt has a deadline, a failed or overdue attempt is tried again after a fixed pause (no
 * growing back-off: the process is ready as soon as the dependency answers), and what is still
 * awaited, with its last error, is there for readiness answers and the log.
 *
 * The errors kept are pg's and Node's messages, which name hosts, users and databases but never
 * a password; readiness answers name the steps only.
 */
import type { Logger } from 'pino';
import type { Db } from './db/pool.ts';
import { withDeadline } from './deadline.ts';

/** An attempt not finished by then is abandoned and another started (a connection that went silent). */
export const attemptDeadlineMs = 10_000;
/**
 * A start-up statement not answered by then fails and its connection is destroyed (createDb
 * queryTimeoutMs): well within the attempt's deadline, so an abandoned attempt holds none.
 */
export const startupQueryTimeoutMs = 5_000;
/** Connections of a start-up pool: its steps run a statement or two at a time. */
export const startupPoolMax = 2;
/** Between two attempts of one step. */
export const retryPauseMs = 500;
/** Not ready for this long: say at warn what is awaited (a normal start takes about a second). */
export const notReadyQuietMs = 5_000;
/** Still not ready: say it again this often. */
export const notReadyRepeatMs = 30_000;

/**
 * The pool start-up steps query through (core's, the edge's warm-up), beside `db` and closed by
 * the caller once they are done: each statement not answered within startupQueryTimeoutMs fails
 * and its connection is destroyed. An attempt abandoned at its deadline otherwise kept its
 * connection waiting on a silent database for ever, one more each attempt, until the serving
 * pool held only those and the process could not start once the database answered.
 */
export function startupPool(db: Db): Db {
  return db.sibling({ max: startupPoolMax, queryTimeoutMs: startupQueryTimeoutMs });
}

/** Something a process waits for before it is ready, and the last error it gave, if any. */
export interface WaitingFor {
  what: string;
  lastError?: string;
}

const messageOf = (err: unknown): string => (err instanceof Error ? err.message : String(err));

export class StartupSteps {
  private readonly pending = new Map<string, WaitingFor>();
  private stopped = false;
  private readonly deadlineMs: number;
  private readonly pauseMs: number;

  constructor(
    private readonly log: Logger,
    opts: { deadlineMs?: number; pauseMs?: number } = {},
  ) {
    this.deadlineMs = opts.deadlineMs ?? attemptDeadlineMs;
    this.pauseMs = opts.pauseMs ?? retryPauseMs;
  }

  /**
   * Run `attempt` until it succeeds. `waitOut` says which failures are waited out (default: all);
   * any other is thrown at once (a database that answers but is not migrated, for core).
   */
  async run<T>(
    what: string,
    attempt: () => Promise<T>,
    waitOut: (err: unknown) => boolean = () => true,
  ): Promise<T> {
    const awaited: WaitingFor = { what };
    this.pending.set(what, awaited);
    try {
      for (;;) {
        try {
          return await withDeadline(attempt(), this.deadlineMs, `no answer within ${this.deadlineMs} ms`);
        } catch (err) {
          if (this.stopped) throw new Error(`stopped while waiting for ${what}`);
          if (!waitOut(err)) throw err;
          awaited.lastError = messageOf(err);
          this.log.debug({ step: what, err: awaited.lastError }, 'start-up step failed; trying again');
          await new Promise((r) => setTimeout(r, this.pauseMs));
        }
      }
    } finally {
      this.pending.delete(what);
    }
  }

  /** Steps under way fail after their current attempt, and are not tried again (the process stops). */
  stop(): void {
    this.stopped = true;
  }

  /** The steps under way, each with its last error. */
  waiting(): WaitingFor[] {
    return [...this.pending.values()].map((a) => ({ ...a }));
  }
}

/**
 * Say at warn what `component` waits for once it has not been ready for `quietMs`, again every
 * `repeatMs` while that lasts, and at info when it is ready after such a warning; `waiting()`
 * empty means ready. Returns the function that stops the reports.
 */
export function reportNotReady(
  log: Logger,
  component: string,
  waiting: () => WaitingFor[],
  opts: { quietMs?: number; repeatMs?: number; now?: () => number } = {},
): () => void {
  const quietMs = opts.quietMs ?? notReadyQuietMs;
  const repeatMs = opts.repeatMs ?? notReadyRepeatMs;
  const now = opts.now ?? Date.now;
  let since: number | undefined = now();
  let warnedAt: number | undefined;
  const timer = setInterval(
    () => {
      const awaited = waiting();
      const t = now();
      if (awaited.length === 0) {
        if (warnedAt !== undefined)
          log.info({ waitedS: Math.round((t - (since ?? t)) / 1000) }, `${component} is ready`);
        since = undefined;
        warnedAt = undefined;
        return;
      }
      since ??= t;
      if (t - since < quietMs || (warnedAt !== undefined && t - warnedAt < repeatMs)) return;
      warnedAt = t;
      log.warn(
        { waiting: awaited, forS: Math.round((t - since) / 1000) },
        `${component} not ready: waiting for ${awaited.map((a) => a.what).join(', ')}`,
      );
    },
    Math.min(1_000, quietMs),
  );
  timer.unref();
  return () => clearInterval(timer);
}
