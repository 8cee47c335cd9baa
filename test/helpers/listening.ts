/** For tests of the LISTEN connections of core caches (shared/db/listener.ts). */
import type { Db } from '../../shared/db/pool.ts';

/**
 * `db` with another address for new connections (its `pool.options`, which a listener reads)
 * while queries still go through `db`'s own pool: a listener behind a fault-injecting relay
 * (./pg-relay.ts) beside a pool that answers.
 */
export function listenVia(db: Db, url: string): Db {
  const pool = new Proxy(db.pool, {
    get(target, prop) {
      if (prop === 'options') return { ...target.options, connectionString: url };
      const v = Reflect.get(target, prop, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  return { ...db, pool };
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Poll `check` every 20 ms until it holds, or fail after `capMs` (a liveness bound). */
export async function untilHolds(check: () => boolean, capMs: number, what: string): Promise<void> {
  for (const end = Date.now() + capMs; !check(); await sleep(20))
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
}
