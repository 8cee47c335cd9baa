import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile, cp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { loadMigrations, migrate, migrationsDir, schemaHash } from '../../core/db/migrate.ts';
import { seedDemo } from '../../core/seed.ts';
import { freshDatabase } from '../helpers/db.ts';

describe('migrations', () => {
  it('apply to an empty database, then are a no-op; the schema hash is stable', async () => {
    const t = await freshDatabase({ migrate: false });
    try {
      const all = await loadMigrations();
      assert.deepEqual(
        await migrate(t.db.pool),
        all.map((m) => m.version),
      );
      const hash = await schemaHash(t.db);
      assert.deepEqual(await migrate(t.db.pool), []);
      assert.equal(await schemaHash(t.db), hash);
    } finally {
      await t.drop();
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
