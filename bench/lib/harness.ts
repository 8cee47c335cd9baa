/** What every bench shares: a throwaway embedded PostgreSQL, percentiles, and the exit on failure. */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEmbedded } from '../../core/db/embedded.ts';
import { migrate } from '../../core/db/migrate.ts';
import { createDb, type Db } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { freePort } from '../../shared/net.ts';

/** Run `fn` against a migrated database on a fresh embedded server, removed afterwards. */
export async function withDatabase<T>(
  name: string,
  fn: (db: Db, dir: string, url: string) => Promise<T>,
): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), `bench-${name}-`));
  const pg = await startEmbedded({ dir: join(dir, 'pg'), port: await freePort() });
  const db = createDb({
    connectionString: pg.url(),
    metrics: createMetrics(),
    log: createLogger('silent'),
    max: 20,
  });
  try {
    await migrate(db.pool);
    return await fn(db, dir, pg.url());
  } finally {
    await db.close();
    await pg.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

/** The p-th percentile of already sorted values. */
export function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

/** A numeric `--name value` command-line option. */
export function option(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}

/** Run a bench's main; a failure prints its stack and exits non-zero. */
export function runBench(main: () => Promise<void>): void {
  main().catch((err: unknown) => {
    process.stderr.write(`bench failed: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  });
}
