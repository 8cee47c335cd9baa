/**
 * Outside review of issue 23: `npm run bootstrap` refuses a country or currency that is not real,
 * changes nothing when it does, and prints no credential.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { key32, runService as run } from '../helpers/services.ts';

describe('attack23: bootstrap input', () => {
  let t: TestDb;
  before(async () => {
    t = await freshDatabase();
  });
  after(() => t.drop());

  for (const [what, country, currency] of [
    ['a country that is not ISO 3166', 'XX', 'KES'],
    ['a currency that is not ISO 4217', 'KE', 'ABC'],
    ['a lower-case country', 'ke', 'KES'],
  ] as const) {
    it(`refuses ${what}, prints no credential, changes nothing`, async () => {
      const p = run('bootstrap', {
        MODE: 'production',
        DATABASE_URL: t.url,
        MASTER_KEY: key32(),
        BOOTSTRAP_COUNTRY: country,
        BOOTSTRAP_CURRENCY: currency,
      });
      assert.notEqual(await p.exited, 0, p.output());
      assert.doesNotMatch(p.output(), /svc_|\n\s+at /);
      const { rowCount } = await t.db.query('SELECT 1 FROM platform_operator');
      assert.equal(rowCount, 0);
    });
  }

  it('two bootstraps at once: one credential, one operator', async () => {
    const env = {
      MODE: 'production',
      DATABASE_URL: t.url,
      MASTER_KEY: key32(),
      BOOTSTRAP_COUNTRY: 'KE',
      BOOTSTRAP_CURRENCY: 'KES',
    };
    const [a, b] = [run('bootstrap', env), run('bootstrap', { ...env, BOOTSTRAP_TENANT_ID: 'second-op' })];
    const codes = await Promise.all([a.exited, b.exited]);
    assert.deepEqual([...codes].sort(), [0, 1], a.output() + b.output());
    assert.equal((a.output() + b.output()).match(/Bearer svc_/g)?.length, 1);
    const { rowCount } = await t.db.query('SELECT 1 FROM platform_operator');
    assert.equal(rowCount, 1);
  });
});
