/**
 * Ordered SQL migrations from `core/db/migrations/NNNN_name.sql`. Each file runs once, in its
 * own transaction, under an advisory lock so concurrent starters never race. An applied file
 * whose content changed is refused: migrations are append-only history.
 */
import { createHash } from 'node:crypto';
import { readFile, readdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';

export const migrationsDir = fileURLToPath(new URL('./migrations/', import.meta.url));
/** Arbitrary constant shared by every process that migrates this schema. */
const migrationLockKey = 72_110_001;

export interface Migration {
  version: string;
  sql: string;
  checksum: string;
}

export async function loadMigrations(dir = migrationsDir): Promise<Migration[]> {
  const names = (await readdir(dir)).filter((n) => /^\d{4}_[a-z0-9_]+\.sql$/.test(n)).sort();
  return Promise.all(
    names.map(async (name) => {
      const sql = await readFile(`${dir}${name}`, 'utf8');
      return {
        version: name.replace(/\.sql$/, ''),
        sql,
        checksum: createHash('sha256').update(sql).digest('hex'),
      };
    }),
  );
}

/** Apply every pending migration; returns the versions applied by this call. */
export async function migrate(pool: pg.Pool, dir = migrationsDir): Promise<string[]> {
  const migrations = await loadMigrations(dir);
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [migrationLockKey]);
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version text PRIMARY KEY, checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const { rows } = await client.query<{ version: string; checksum: string }>(
      'SELECT version, checksum FROM schema_migrations',
    );
    const applied = new Map(rows.map((r) => [r.version, r.checksum]));
    const done: string[] = [];
    for (const m of migrations) {
      const existing = applied.get(m.version);
      if (existing !== undefined) {
        if (existing !== m.checksum)
          throw new Error(`migration ${m.version} was changed after it was applied`);
        continue;
      }
      await client.query('BEGIN');
      try {
        await client.query(m.sql);
        await client.query('INSERT INTO schema_migrations (version, checksum) VALUES ($1, $2)', [
          m.version,
          m.checksum,
        ]);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK');
        throw new Error(`migration ${m.version} failed: ${(err as Error).message}`);
      }
      done.push(m.version);
    }
    return done;
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [migrationLockKey]).catch(() => undefined);
    client.release();
  }
}

/** Versions in the repository the database has not applied (every one when it has none): cores never migrate. */
export async function pendingMigrations(
  q: { query<R extends object>(sql: string): Promise<{ rows: R[] }> },
  dir = migrationsDir,
): Promise<string[]> {
  const { rows } = await q
    .query<{ version: string }>('SELECT version FROM schema_migrations')
    .catch((err: { code?: string }) => {
      // 42P01 undefined_table: a database no migration ever ran on; anything else is the caller's to report.
      if (err.code === '42P01') return { rows: [] as { version: string }[] };
      throw err;
    });
  const applied = new Set(rows.map((r) => r.version));
  return (await loadMigrations(dir)).map((m) => m.version).filter((v) => !applied.has(v));
}

/** SHA-256 over the applied migrations (version and checksum, in order): the schema's identity. */
export async function schemaHash(q: { query(sql: string): Promise<{ rows: unknown[] }> }): Promise<string> {
  const { rows } = (await q.query('SELECT version, checksum FROM schema_migrations ORDER BY version')) as {
    rows: { version: string; checksum: string }[];
  };
  const h = createHash('sha256');
  for (const r of rows) h.update(`${r.version}:${r.checksum}\n`);
  return h.digest('hex');
}
