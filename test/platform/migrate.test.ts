import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile, cp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import {
  functionsDir,
  loadFunctionFiles,
  loadMigrations,
  migrate,
  migrationsDir,
  schemaHash,
} from '../../core/db/migrate.ts';
import { seedDemo } from '../../core/seed.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

/** Every column, index and function body of the public schema, in one comparable list. */
async function catalog(t: TestDb): Promise<string[]> {
  const { rows } = await t.db.query<{ item: string }>(
    `SELECT format('%s.%s %s %s', table_name, column_name, data_type, column_default) AS item
       FROM information_schema.columns WHERE table_schema = 'public'
     UNION ALL SELECT indexdef FROM pg_indexes WHERE schemaname = 'public'
     UNION ALL SELECT format('%s(%s) %s', p.proname, pg_get_function_arguments(p.oid), md5(p.prosrc))
       FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'
     ORDER BY 1`,
  );
  return rows.map((r) => r.item);
}

describe('migrations', () => {
  it('apply to an empty database, then the ledger function files; then are a no-op; the schema hash is stable', async () => {
    const t = await freshDatabase({ migrate: false });
    try {
      const all = await loadMigrations();
      assert.deepEqual(await migrate(t.db.pool), [
        ...all.map((m) => m.version),
        ...(await loadFunctionFiles()).map((f) => `${f.name}.sql`),
      ]);
      const hash = await schemaHash(t.db);
      assert.deepEqual(await migrate(t.db.pool), []);
      assert.equal(await schemaHash(t.db), hash);
    } finally {
      await t.drop();
    }
  });

  it("a migrated test database (test/run.ts's template, copied) is what migrate makes of an empty one", async () => {
    const made = await freshDatabase({ migrate: false });
    const copied = await freshDatabase();
    try {
      await migrate(made.db.pool);
      assert.deepEqual(await migrate(copied.db.pool), [], 'nothing left to apply');
      assert.equal(await schemaHash(copied.db), await schemaHash(made.db));
      assert.deepEqual(await catalog(copied), await catalog(made));
    } finally {
      await copied.drop();
      await made.drop();
    }
  });

  it('concurrent migrators do not race', async () => {
    const t = await freshDatabase({ migrate: false });
    try {
      const results = await Promise.all([migrate(t.db.pool), migrate(t.db.pool), migrate(t.db.pool)]);
      assert.equal(results.filter((r) => r.length > 0).length, 1);
    } finally {
      await t.drop();
    }
  });

  it('refuse an applied migration whose file changed', async () => {
    const t = await freshDatabase({ migrate: false });
    const dir = await mkdtemp(join(tmpdir(), 'mig-'));
    try {
      await cp(migrationsDir, dir, { recursive: true });
      await migrate(t.db.pool, `${dir}/`);
      const first = (await loadMigrations(`${dir}/`))[0];
      assert.ok(first);
      const file = join(dir, `${first.version}.sql`);
      await writeFile(file, `${await readFile(file, 'utf8')}\n-- edited\n`);
      await assert.rejects(migrate(t.db.pool, `${dir}/`), /was changed after it was applied/);
    } finally {
      await rm(dir, { recursive: true, force: true });
      await t.drop();
    }
  });
});

describe('ledger function files (core/ledger/sql)', () => {
  async function withFiles(fn: (dir: string, t: TestDb) => Promise<void>) {
    const t = await freshDatabase({ migrate: false });
    const dir = await mkdtemp(join(tmpdir(), 'fns-'));
    try {
      await cp(functionsDir, dir, { recursive: true });
      await fn(`${dir}/`, t);
    } finally {
      await rm(dir, { recursive: true, force: true });
      await t.drop();
    }
  }

  it('are applied after the migrations, re-applied when their content changes, and not otherwise', async () => {
    await withFiles(async (dir, t) => {
      const first = await migrate(t.db.pool, migrationsDir, dir);
      assert.ok(first.includes('ledger_fail.sql') && first.includes('0960_ledger_cmd_accounts_unused'));
      assert.deepEqual(await migrate(t.db.pool, migrationsDir, dir), []);
      const hash = await schemaHash(t.db);
      const file = join(dir, 'ledger_fail.sql');
      await writeFile(
        file,
        (await readFile(file, 'utf8')).replace(
          "'message', p_message)",
          "'message', p_message, 'edited', true)",
        ),
      );
      assert.deepEqual(await migrate(t.db.pool, migrationsDir, dir), ['ledger_fail.sql']);
      const { rows } = await t.db.query("SELECT ledger_fail('X', 'y') AS r");
      assert.deepEqual(rows[0]?.r, { ok: false, code: 'X', message: 'y', edited: true });
      assert.notEqual(await schemaHash(t.db), hash, 'the schema hash covers the function files');
      assert.deepEqual(await migrate(t.db.pool, migrationsDir, dir), []);
    });
  });

  it('refuse a file that drops or renames (it would break the running release), and commit nothing when one fails', async () => {
    await withFiles(async (dir, t) => {
      await writeFile(join(dir, 'ledger_zz.sql'), '-- no\nDROP FUNCTION ledger_fail(text, text);\n');
      await assert.rejects(
        migrate(t.db.pool, migrationsDir, dir),
        /ledger_zz\.sql does more than create or replace/,
      );
      await rm(join(dir, 'ledger_zz.sql'));
      await writeFile(
        join(dir, 'ledger_zz.sql'),
        'CREATE OR REPLACE FUNCTION ledger_zz() RETURNS int LANGUAGE sql AS $$ SELECT ledger_no_such_function() $$;\n',
      );
      await assert.rejects(
        migrate(t.db.pool, migrationsDir, dir),
        /function file ledger_zz\.sql failed: .*does not exist/,
      );
      const { rows } = await t.db.query<{ n: number }>('SELECT count(*)::int AS n FROM schema_migrations');
      assert.deepEqual(rows, [{ n: 0 }], 'the migrations of the failed call rolled back with it');
    });
  });
});

describe('demo seed', () => {
  it('is idempotent and writes demo.json with the demo tenant', async () => {
    const t = await freshDatabase();
    const dir = await mkdtemp(join(tmpdir(), 'seed-'));
    try {
      const first = await seedDemo(t.db, dir);
      const second = await seedDemo(t.db, dir);
      assert.deepEqual(second, first);
      const { rows } = await t.db.query('SELECT id, country, base_currency, status FROM tenants');
      assert.deepEqual(rows, [{ id: 'demo', country: 'KE', base_currency: 'KES', status: 'ACTIVE' }]);
      const file = JSON.parse(await readFile(join(dir, 'demo.json'), 'utf8'));
      assert.deepEqual(file.tenant, {
        id: 'demo',
        name: 'Demo Mobile Money',
        country: 'KE',
        baseCurrency: 'KES',
      });
    } finally {
      await rm(dir, { recursive: true, force: true });
      await t.drop();
    }
  });
});
