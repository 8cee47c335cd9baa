/**
 * A failure of the service's own making, injected into a test's database: while a pattern is set,
 * queries whose text matches it fail as pg-pool fails them when no connection frees up in time
 * (test/shared/token-verifier-outage.test.ts injects the same way). Only `query` is affected,
 * never the statements of a `tx` callback.
 */
import type { Db } from '../../shared/db/pool.ts';

/** What pg-pool throws when no connection frees up within connectionTimeoutMillis. */
export const poolTimeout = (): Error => new Error('timeout exceeded when trying to connect');

export interface Outage {
  /** Fail the queries whose text matches `sql` until `end()`. */
  fail(sql: RegExp): void;
  end(): void;
  /** `db` with this outage in front of its `query`. */
  over(db: Db): Db;
}

export function outage(): Outage {
  let down: RegExp | undefined;
  return {
    fail: (sql) => {
      down = sql;
    },
    end: () => {
      down = undefined;
    },
    over: (db) =>
      new Proxy(db, {
        get(target, prop, receiver) {
          if (prop !== 'query') return Reflect.get(target, prop, receiver);
          return (sql: string, params?: unknown[]) =>
            down?.test(sql) ? Promise.reject(poolTimeout()) : target.query(sql, params);
        },
      }),
  };
}
