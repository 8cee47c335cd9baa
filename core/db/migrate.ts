/**
 * The database's schema and its ledger code, brought up to date by one call (`npm run migrate`).
 *
 * 1. Ordered SQL migrations from `core/db/migrations/NNNN_name.sql`: tables, indexes, data. Each
 *    file runs once; an applied file whose content changed is refused: migrations are history.
 * 2. Function files from `core/ledger/sql/<name>.sql` (issue 21 item 3): the current definition
 *    of every ledger function and trigger, one per file, named after it, so the write path is read
 *    in one place instead of replayed across `CREATE OR REPLACE`s in migrations. A file is applied
 *    after the migrations when its SHA-256 differs from the one recorded in `schema_functions`
 *    (new or changed), and not otherwise; applying one again is harmless (`CREATE OR REPLACE`).
 *
 * Everything one call applies commits in one transaction, under an advisory lock (concurrent
 * starters wait, then find nothing to do). One transaction because migrations and function files
 * depend on each other: a migration may drop a helper the previous function bodies call (0961
 * drops `ledger_do_post`), and no caller may ever see that schema with those bodies.
 *
 * Old pods keep running during a rollout (`core/db/expand-contract.ts`, deploy/README.md), and
 * they call the functions with the previous release's code. A function file stays callable by it:
 * - a file holds only `CREATE OR REPLACE FUNCTION` and `CREATE OR REPLACE TRIGGER` statements
 *   (anything else, a DROP, a RENAME, an ALTER, is refused here), and PostgreSQL refuses a
 *   replacement that changes a function's result type or parameter names; a changed argument list
 *   is a new function beside the old one, which stays callable;
 * - a body accepts every command the previous release sends (new fields optional, with the old
 *   behaviour when absent) and answers the fields it reads;
 * - a function the previous release calls and the new one does not is dropped only by a later
 *   migration marked `-- contract:`, once no running release calls it.
 * Migrations after 0960 leave the functions that have a file to their file
 * (`test/ledger/sql-files.test.ts` checks it).
 */
import { createHash } from 'node:crypto';
import { readFile, readdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';

export const migrationsDir = fileURLToPath(new URL('./migrations/', import.meta.url));
export const functionsDir = fileURLToPath(new URL('../ledger/sql/', import.meta.url));
/** Arbitrary constant shared by every process that migrates this schema. */
const migrationLockKey = 72_110_001;

export interface Migration {
  version: string;
  sql: string;
  checksum: string;
}

/** A function file: `name` is the function (or trigger function) it defines. */
export interface FunctionFile {
  name: string;
  sql: string;
  checksum: string;
}

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

export async function loadMigrations(dir = migrationsDir): Promise<Migration[]> {
  const names = (await readdir(dir)).filter((n) => /^\d{4}_[a-z0-9_]+\.sql$/.test(n)).sort();
  return Promise.all(
    names.map(async (name) => {
      const sql = await readFile(`${dir}${name}`, 'utf8');
      return { version: name.replace(/\.sql$/, ''), sql, checksum: sha256(sql) };
    }),
  );
}

/** The function files of `dir`, in name order; throws for a file that would break a running release. */
export async function loadFunctionFiles(dir = functionsDir): Promise<FunctionFile[]> {
  const names = (await readdir(dir)).filter((n) => /^[a-z][a-z0-9_]*\.sql$/.test(n)).sort();
  return Promise.all(
    names.map(async (file) => {
      const sql = await readFile(`${dir}${file}`, 'utf8');
      const other = otherStatements(sql);
      if (other.length > 0)
        throw new Error(
          `function file ${file} does more than create or replace (${other.join('; ')}): that belongs in a migration`,
        );
      return { name: file.replace(/\.sql$/, ''), sql, checksum: sha256(sql) };
    }),
  );
}

/**
 * The statements of a function file other than CREATE OR REPLACE of a function or trigger: the
 * text without dollar-quoted bodies, then without comments (they may hold an apostrophe), then
 * without string literals.
 */
function otherStatements(sql: string): string[] {
  return sql
    .replace(/\$([A-Za-z_]*)\$[\s\S]*?\$\1\$/g, ' ')
    .replace(/--[^\n]*/g, ' ')
    .replace(/'(?:[^']|'')*'/g, "''")
    .split(';')
    .map((st) => st.trim().replace(/\s+/g, ' '))
    .filter((st) => st !== '' && !/^CREATE OR REPLACE (FUNCTION|TRIGGER)\b/i.test(st));
}

/**
 * Apply every pending migration, then every new or changed function file of `fnDir` (none when
 * `fnDir` is null: by default only with the repository's own migrations, since function files
 * are written for the newest schema). Returns the migration versions and then the function files
 * (`<name>.sql`) applied by this call.
 */
export async function migrate(
  pool: pg.Pool,
  dir = migrationsDir,
  fnDir: string | null = dir === migrationsDir ? functionsDir : null,
): Promise<string[]> {
  const migrations = await loadMigrations(dir);
  const functions = fnDir === null ? [] : await loadFunctionFiles(fnDir);
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [migrationLockKey]);
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version text PRIMARY KEY, checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    await client.query(`CREATE TABLE IF NOT EXISTS schema_functions (
      name text PRIMARY KEY, checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const pending = await pendingOf(client, migrations);
    const due = await dueFunctions(client, functions);
    if (pending.length === 0 && due.length === 0) return [];
    await client.query('BEGIN');
    try {
      for (const m of pending) await applyMigration(client, m);
      await applyFunctionFiles(client, due);
      await client.query('COMMIT');
    } catch (err) {
      await client.query('ROLLBACK');
      throw err;
    }
    return [...pending.map((m) => m.version), ...due.map((f) => `${f.name}.sql`)];
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [migrationLockKey]).catch(() => undefined);
    client.release();
  }
}

/** Migrations not yet applied; throws for an applied one whose file changed. */
async function pendingOf(client: pg.PoolClient, migrations: Migration[]): Promise<Migration[]> {
  const { rows } = await client.query<{ version: string; checksum: string }>(
    'SELECT version, checksum FROM schema_migrations',
  );
  const applied = new Map(rows.map((r) => [r.version, r.checksum]));
  return migrations.filter((m) => {
    const existing = applied.get(m.version);
    if (existing !== undefined && existing !== m.checksum)
      throw new Error(`migration ${m.version} was changed after it was applied`);
    return existing === undefined;
  });
}

/** Function files never applied, or changed since they were. */
async function dueFunctions(client: pg.PoolClient, files: FunctionFile[]): Promise<FunctionFile[]> {
  const { rows } = await client.query<{ name: string; checksum: string }>(
    'SELECT name, checksum FROM schema_functions',
  );
  const applied = new Map(rows.map((r) => [r.name, r.checksum]));
  return files.filter((f) => applied.get(f.name) !== f.checksum);
}

async function applyMigration(client: pg.PoolClient, m: Migration): Promise<void> {
  try {
    await client.query(m.sql);
  } catch (err) {
    throw new Error(`migration ${m.version} failed: ${(err as Error).message}`);
  }
  await client.query('INSERT INTO schema_migrations (version, checksum) VALUES ($1, $2)', [
    m.version,
    m.checksum,
  ]);
}

/**
 * Two passes inside the caller's transaction. A SQL-language body is checked against the
 * functions it calls when it is created, and those may come later in name order: the first
 * pass defines every file without checking bodies, the second defines them again with checks on,
 * so a syntax error or a call of a missing function fails the migration, not the first posting.
 */
async function applyFunctionFiles(client: pg.PoolClient, files: FunctionFile[]): Promise<void> {
  if (files.length === 0) return;
  for (const check of ['off', 'on']) {
    await client.query(`SET LOCAL check_function_bodies = ${check}`);
    for (const f of files) {
      try {
        await client.query(f.sql);
      } catch (err) {
        throw new Error(`function file ${f.name}.sql failed: ${(err as Error).message}`);
      }
    }
  }
  await client.query(
    `INSERT INTO schema_functions (name, checksum) SELECT * FROM unnest($1::text[], $2::text[])
     ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()`,
    [files.map((f) => f.name), files.map((f) => f.checksum)],
  );
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

/**
 * SHA-256 over the applied migrations (version and checksum, in order) and the applied function
 * files (`sql/<name>`, same): the schema's identity, ledger code included.
 */
export async function schemaHash(q: { query(sql: string): Promise<{ rows: unknown[] }> }): Promise<string> {
  const { rows } = (await q.query(
    `SELECT version, checksum FROM schema_migrations
     UNION ALL SELECT 'sql/' || name, checksum FROM schema_functions ORDER BY 1`,
  )) as { rows: { version: string; checksum: string }[] };
  const h = createHash('sha256');
  for (const r of rows) h.update(`${r.version}:${r.checksum}\n`);
  return h.digest('hex');
}
