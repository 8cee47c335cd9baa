/**
 * `npm run migrate`: apply every pending migration to DATABASE_URL, then exit (once per release,
 * before new cores start; concurrent runs serialise on an advisory lock). Cores refuse to start on
 * a database that lacks a migration they ship with.
 */
import { migrate } from '../../core/db/migrate.ts';
import { createDb } from '../../shared/db/pool.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { configOrExit, fail, loggerOf } from './common.ts';

async function main(): Promise<void> {
  const config = configOrExit('migrate');
  const log = loggerOf(config, 'migrate');
  const databaseUrl = config.values.DATABASE_URL ?? fail('DATABASE_URL is required', 2);
  const db = createDb({ connectionString: databaseUrl, metrics: createMetrics(), log, max: 1 });
  try {
    const applied = await migrate(db.pool);
    process.stdout.write(applied.length > 0 ? `applied ${applied.length} migration(s): ${applied.join(', ')}\n` : 'the database is up to date\n');
  } finally {
    await db.close();
  }
}

main().then(() => process.exit(0), (err: unknown) => fail(`migration failed: ${(err as Error).message.split('\n')[0]}`));
