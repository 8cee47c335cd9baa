/**
 * The PostgreSQL pool of one process: every query is timed into the db histogram, and
 * transactions retry serialization failures and deadlocks a bounded number of times.
 */
import pg from 'pg';
import type { Logger } from 'pino';
import type { Metrics } from '../metrics.ts';
import { OverdueError, withDeadline } from '../deadline.ts';
import { isPoolExhausted } from '../errors.ts';

/** Anything that runs a parameterised query: the pool wrapper, a pool client in a transaction. */
export interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    sql: string,
    params?: unknown[],
  ): Promise<pg.QueryResult<R>>;
}

declare const inTransaction: unique symbol;

/**
 * The client `Db.tx` hands its callback, and only that: its statements commit or roll back
 * together. A change and its audit record (SPEC 6.3: every mutation has one) are written through
 * one, so that both commit or neither does: appendAudit takes this, never a Queryable, which the
 * pool (where each statement commits alone) and a client outside a transaction also are.
 */
export type TxClient = pg.PoolClient & { readonly [inTransaction]: true };

export interface Db {
  readonly pool: pg.Pool;
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    sql: string,
    params?: unknown[],
  ): Promise<pg.QueryResult<R>>;
  /** Run `fn` in one transaction; retried on 40001/40P01 up to `txRetryLimit` times. */
  tx<T>(
    fn: (client: TxClient) => Promise<T>,
    opts?: { isolation?: 'read committed' | 'repeatable read' | 'serializable' },
  ): Promise<T>;
  close(): Promise<void>;
  /**
   * Another pool on the same database, with the same metrics and log and its own bounds: the
   * start-up steps' own (shared/startup.ts startupPool), closed by its user.
   */
  sibling(bounds: { max?: number; queryTimeoutMs?: number }): Db;
}

/** A connection attempt that has not succeeded by then is an outage, not a slow query. */
export const connectTimeoutMs = 2000;
export const txRetryLimit = 5;
const poolMax = 10;
const retryableCodes = new Set(['40001', '40P01']);

// numeric and bigint come back as strings: money is never a JS number (DESIGN.md "Money").
pg.types.setTypeParser(pg.types.builtins.NUMERIC, (v) => v);
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => v);

function opOf(sql: string): string {
  const word = /^\s*([A-Za-z]+)/.exec(sql)?.[1]?.toLowerCase() ?? 'other';
  return ['select', 'insert', 'update', 'delete', 'with', 'begin', 'commit', 'rollback'].includes(word)
    ? word
    : 'other';
}

export function createDb(opts: {
  connectionString: string;
  metrics: Metrics;
  log: Logger;
  max?: number;
  /**
   * Each statement not answered by then fails and its connection is destroyed (pg's
   * query_timeout): for work abandoned at a deadline, whose connection would otherwise wait on a
   * silent peer for ever. None by default.
   */
  queryTimeoutMs?: number;
}): Db {
  const pool = new pg.Pool({
    connectionString: opts.connectionString,
    max: opts.max ?? poolMax,
    connectionTimeoutMillis: connectTimeoutMs,
    idleTimeoutMillis: 30_000,
    ...(opts.queryTimeoutMs === undefined ? {} : { query_timeout: opts.queryTimeoutMs }),
  });
  // An idle client losing its server must not crash the process; the next query reports it.
  pool.on('error', (err) => opts.log.warn({ err: err.message }, 'idle database connection lost'));

  const timed = async <R extends pg.QueryResultRow>(q: Queryable, sql: string, params?: unknown[]) => {
    const end = opts.metrics.dbDuration.startTimer({ op: opOf(sql) });
    try {
      const result = await q.query<R>(sql, params);
      end({ outcome: 'ok' });
      return result;
    } catch (err) {
      end({ outcome: 'error' });
      throw err;
    }
  };

  const instrument = (client: pg.PoolClient): pg.PoolClient => {
    const original = client.query.bind(client) as (
      sql: string,
      params?: unknown[],
    ) => Promise<pg.QueryResult>;
    const wrapped = new Proxy(client, {
      get(target, prop, receiver) {
        if (prop === 'query') {
          return (sql: string, params?: unknown[]) =>
            timed({ query: original } as unknown as Queryable, sql, params);
        }
        return Reflect.get(target, prop, receiver) as unknown;
      },
    });
    return wrapped;
  };

  return {
    pool,
    query: (sql, params) => timed(pool, sql, params),
    async tx(fn, txOpts) {
      for (let attempt = 0; ; attempt++) {
        const raw = await pool.connect();
        const client = instrument(raw);
        // A backend killed mid-transaction makes the checked-out client emit 'error'; without a
        // listener that is an uncaught exception. The failing query reports it to the caller.
        const onLost = (e: Error) =>
          opts.log.warn({ err: e.message }, 'database connection lost in a transaction');
        raw.on('error', onLost);
        try {
          await client.query(
            `BEGIN ISOLATION LEVEL ${(txOpts?.isolation ?? 'read committed').toUpperCase()}`,
          );
          const result = await fn(client as TxClient);
          await client.query('COMMIT');
          raw.off('error', onLost);
          raw.release();
          return result;
        } catch (err) {
          await raw.query('ROLLBACK').catch(() => undefined);
          const code = (err as { code?: unknown }).code;
          // A connection that failed mid-transaction is destroyed, never reused; so is one whose
          // backend was terminated (57P0x) or whose connection failed (08xxx).
          const lost = typeof code === 'string' && (code.startsWith('57P') || code.startsWith('08'));
          raw.off('error', onLost);
          raw.release(typeof code === 'string' && code.length === 5 && !lost ? undefined : (err as Error));
          if (typeof code === 'string' && retryableCodes.has(code) && attempt < txRetryLimit) {
            opts.metrics.dbTxRetries.inc({ code });
            opts.log.debug({ code, attempt }, 'transaction retried');
            await new Promise((r) => setTimeout(r, Math.random() * 5 * (attempt + 1)));
            continue;
          }
          throw err;
        }
      }
    },
    close: () => pool.end(),
    sibling: (bounds) => createDb({ ...opts, ...bounds }),
  };
}

/** Node's errors of a connection that could not be made or was cut (the database is not there, yet). */
const socketErrors = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EPIPE',
  'EAI_AGAIN',
  'ENOTFOUND',
]);

/**
 * Whether `err` says the database did not answer, rather than answered with a refusal: a socket
 * error, pg's connect timeout, query timeout or cut connection, work past its deadline, or SQLSTATE class 08
 * (connection exception), 53 (insufficient resources: too many connections) or 57P01-57P03
 * (shutting down, starting up). Start-up waits these out; a wrong password (28P01), a missing
 * database (3D000) or anything else is a fault to report, not to wait for.
 */
export function databaseUnreachable(err: unknown): boolean {
  if (err instanceof OverdueError || isPoolExhausted(err)) return true;
  const { code, message } = (err ?? {}) as { code?: unknown; message?: unknown };
  if (typeof code === 'string' && socketErrors.has(code)) return true;
  if (typeof code === 'string' && /^(08|53|57P0[123])/.test(code)) return true;
  return (
    typeof message === 'string' && /^(timeout expired|Connection terminated|Query read timeout)/.test(message)
  );
}

/** How long warmPool waits for each opened connection's `SELECT 1`. */
export const warmAnswerMs = 5_000;

/**
 * Open up to `connections` of the pool's connections now and check each answers (issue 15
 * item 9: the first requests after start must not each pay for connecting and authenticating).
 * A connection that authenticated but does not answer within `answerMs` is destroyed, not put
 * back (a SELECT 1 without a deadline held start-up for ever, and its client the pool's slot).
 */
export async function warmPool(db: Db, connections = poolMax, answerMs = warmAnswerMs): Promise<void> {
  const n = Math.min(connections, db.pool.options.max ?? poolMax);
  const opened = await Promise.allSettled(Array.from({ length: n }, () => db.pool.connect()));
  const clients = opened.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
  const answers = await Promise.allSettled(
    clients.map(async (c) => {
      try {
        await withDeadline(
          c.query('SELECT 1'),
          answerMs,
          `a database connection did not answer within ${answerMs} ms`,
        );
        c.release();
      } catch (err) {
        c.release(err instanceof Error ? err : new Error(String(err)));
        throw err;
      }
    }),
  );
  const failed = [...opened, ...answers].find((o): o is PromiseRejectedResult => o.status === 'rejected');
  if (failed) throw failed.reason instanceof Error ? failed.reason : new Error(String(failed.reason));
}
