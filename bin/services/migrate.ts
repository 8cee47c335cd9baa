/**
 * `npm run migrate`: apply every pending migration to DATABASE_URL, then exit (once per release,
 * before new cores start; concurrent runs serialise on an advisory lock). Cores refuse to start on
 * a database that lacks a migration they ship with. Labels an unlabelled cluster with
 * DEPLOYMENT_REGION (migration 0900: the database records its own region).
 */
import { migrate } from '../../core/db/migrate.ts';
import { labelCluster } from '../../core/residency/cluster.ts';
import { deploymentRegion } from '../service-config.ts';
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
    process.stdout.write(
      applied.length > 0
        ? `applied ${applied.length} migration(s): ${applied.join(', ')}\n`
        : 'the database is up to date\n',
    );
    // Issue 20 item 2: a new cluster is labelled with this deployment's region; a labelled one keeps its label.
    const region = deploymentRegion(config);
    const labelled = await labelCluster(db, region, 'migrate');
    process.stdout.write(
      labelled === region
        ? `database cluster region: ${labelled}\n`
        : `database cluster region: ${labelled} (kept; DEPLOYMENT_REGION is ${region}: relabel deliberately, README "Where a tenant's data lives")\n`,
    );
  } finally {
    await db.close();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => fail(`migration failed: ${(err as Error).message.split('\n')[0]}`),
);
