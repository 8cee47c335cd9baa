/** A fresh, migrated database per test file on the suite's embedded PostgreSQL server. */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { loadLedgerCurrencies } from '../../core/admin/reference/currencies.ts';
import { migrate } from '../../core/db/migrate.ts';
import { createDb, type Db } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics, type Metrics } from '../../shared/metrics.ts';

export function serverUrl(): string {
  const url = process.env.TEST_DATABASE_URL;
  if (!url) throw new Error('TEST_DATABASE_URL is not set: run the suite with `npm test`');
  return url;
}

export function databaseUrl(name: string): string {
  const u = new URL(serverUrl());
  u.pathname = `/${name}`;
  return u.toString();
}

export interface TestDb {
  name: string;
  url: string;
  db: Db;
  drop(): Promise<void>;
}

/**
 * test/run.ts's migrated database, which a migrated database is copied from (a copy costs a
 * fraction of a migration); none when the run could not migrate it.
 */
function migratedTemplate(): string | undefined {
  return process.env.TEST_TEMPLATE_DATABASE || undefined;
}

/** Create an empty database (optionally migrated) and a Db on it; `drop()` removes both. */
export async function freshDatabase(opts: { migrate?: boolean; metrics?: Metrics } = {}): Promise<TestDb> {
  const name = `t_${randomBytes(6).toString('hex')}`;
  const template = opts.migrate !== false ? migratedTemplate() : undefined;
  const admin = new pg.Client({ connectionString: serverUrl() });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}${template ? ` TEMPLATE ${template}` : ''}`);
  await admin.end();
  const url = databaseUrl(name);
  const db = createDb({
    connectionString: url,
    metrics: opts.metrics ?? createMetrics(),
    log: createLogger('silent'),
  });
  if (opts.migrate !== false) {
    if (!template) await migrate(db.pool);
    // The ledger's currencies, as core loads them before it serves (issue 21 item 2).
    await loadLedgerCurrencies(db);
  }
  return {
    name,
    url,
    db,
    async drop() {
      await db.close();
      const c = new pg.Client({ connectionString: serverUrl() });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}
