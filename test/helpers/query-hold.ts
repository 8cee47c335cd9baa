/**
 * A request held at a statement of a test's choosing, so that a race is played in the order the
 * test sets (no sleeps): once armed, the next statement whose text matches (after `skip` of them
 * ran) waits until released, whether run through `db.query` or a transaction's client. The test
 * learns that it is held when `arm`'s promise resolves. One hold at a time; it is spent once held.
 */
import type { Db, TxClient } from '../../shared/db/pool.ts';

export interface QueryHold {
  /** Hold the next statement matching `sql` once `skip` matching ones have run; resolves once it is held. */
  arm(sql: RegExp, skip?: number): Promise<void>;
  /** Let the held statement run (and everything after it). */
  release(): void;
  /** `db` with this hold in front of its statements. */
  over(db: Db): Db;
}

export function queryHold(): QueryHold {
  let armed: { sql: RegExp; skip: number; held: () => void } | undefined;
  let released: (() => void) | undefined;
  const gate = async (sql: string): Promise<void> => {
    if (!armed?.sql.test(sql)) return;
    if (armed.skip-- > 0) return;
    const { held } = armed;
    armed = undefined;
    const go = new Promise<void>((resolve) => {
      released = resolve;
    });
    held();
    await go;
  };
  const client = (c: TxClient): TxClient =>
    new Proxy(c, {
      get(target, prop, receiver) {
        if (prop !== 'query') return Reflect.get(target, prop, receiver);
        return async (sql: string, params?: unknown[]) => {
          await gate(sql);
          return target.query(sql, params);
        };
      },
    });
  return {
    arm: (sql, skip = 0) =>
      new Promise<void>((held) => {
        armed = { sql, skip, held };
      }),
    release: () => {
      released?.();
      released = undefined;
    },
    over: (db) =>
      new Proxy(db, {
        get(target, prop, receiver) {
          if (prop === 'query')
            return async (sql: string, params?: unknown[]) => {
              await gate(sql);
              return target.query(sql, params);
            };
          if (prop === 'tx')
            return <T>(fn: (c: TxClient) => Promise<T>, opts?: Parameters<Db['tx']>[1]) =>
              target.tx((c) => fn(client(c)), opts);
          return Reflect.get(target, prop, receiver);
        },
      }),
  };
}
