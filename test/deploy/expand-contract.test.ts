/**
 * Migrations while old pods serve (issue 19 item 2; deploy/README.md): every migration after the
 * last release's (deploy/released-migrations.json) is additive, or says why its contraction is
 * safe in a `-- contract:` comment. The guard is shown failing on bad migrations, and on two real
 * ones of the project's history that would break the previous release mid-rollout.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { contractChanges, unmarkedContractions } from '../../core/db/expand-contract.ts';
import { loadMigrations } from '../../core/db/migrate.ts';

const marker = JSON.parse(
  readFileSync(new URL('../../deploy/released-migrations.json', import.meta.url), 'utf8'),
) as { lastMigration: string };

describe('expand, deploy, contract', () => {
  it('every migration after the last release is additive or marked as a contraction', async () => {
    const migrations = await loadMigrations();
    assert.deepEqual(unmarkedContractions(migrations, marker.lastMigration), []);
  });

  it('refuses an unreleased migration that drops, renames, retypes or tightens; accepts it with a contract comment', async () => {
    const migrations = await loadMigrations();
    const bad = {
      version: '9990_bad',
      sql: 'ALTER TABLE customers RENAME COLUMN phone TO msisdn;\nALTER TABLE transfers DROP COLUMN memo;\n',
    };
    assert.deepEqual(unmarkedContractions([...migrations, bad], marker.lastMigration), [
      { version: '9990_bad', changes: ['DROP COLUMN', 'RENAME'] },
    ]);
    const marked = {
      ...bad,
      sql: `-- contract: no release since 0.3.0 reads customers.phone or transfers.memo\n${bad.sql}`,
    };
    assert.deepEqual(unmarkedContractions([...migrations, marked], marker.lastMigration), []);
    // A released migration is history: only those after the marker are checked.
    assert.deepEqual(
      unmarkedContractions([{ ...bad, version: '0001_old' }, ...migrations], marker.lastMigration),
      [],
    );
    assert.throws(() => unmarkedContractions(migrations, '0801_typo'), /not a migration/);
  });

  it('names each kind of contraction', () => {
    const cases: [string, string][] = [
      ['DROP TABLE legacy_sessions;', 'DROP of a table, view, type, function, sequence or schema'],
      [
        'DROP FUNCTION IF EXISTS ledger_post(jsonb);',
        'DROP of a table, view, type, function, sequence or schema',
      ],
      ['ALTER TABLE accounts DROP IF EXISTS nickname;', 'DROP COLUMN'],
      ['ALTER TABLE accounts ALTER COLUMN balance TYPE numeric(30,6);', 'ALTER COLUMN … TYPE'],
      ['ALTER TABLE accounts ALTER balance SET DATA TYPE text;', 'ALTER COLUMN … TYPE'],
      ['ALTER TABLE accounts ALTER COLUMN kind SET NOT NULL;', 'SET NOT NULL'],
      ['ALTER TABLE accounts ALTER COLUMN kind DROP DEFAULT;', 'DROP DEFAULT'],
      ['ALTER FUNCTION ledger_do_hold(jsonb) RENAME TO ledger_do_hold_old;', 'RENAME'],
      ['TRUNCATE nonces;', 'TRUNCATE'],
      [
        'ALTER TABLE accounts ADD COLUMN region text NOT NULL;',
        'ADD COLUMN region NOT NULL without a DEFAULT',
      ],
    ];
    for (const [sql, what] of cases) assert.deepEqual(contractChanges(sql), [what], sql);
  });

  it('lets additive changes through, and what only a function body or a comment says', () => {
    const additive = `
      CREATE TABLE payouts (id uuid PRIMARY KEY, tenant_id text NOT NULL, amount numeric(20,6) NOT NULL);
      ALTER TABLE accounts ADD COLUMN region text, ADD COLUMN tier text NOT NULL DEFAULT 'basic';
      ALTER TABLE accounts ADD COLUMN IF NOT EXISTS seq bigint GENERATED ALWAYS AS IDENTITY;
      ALTER TABLE accounts ADD CONSTRAINT accounts_region_ck CHECK (region <> '') NOT VALID;
      ALTER TABLE accounts ALTER COLUMN nickname DROP NOT NULL;
      ALTER TABLE accounts DROP CONSTRAINT accounts_old_ck;
      CREATE INDEX CONCURRENTLY accounts_region_idx ON accounts (tenant_id, region);
      DROP INDEX IF EXISTS accounts_unused_idx;
      -- DROP TABLE accounts would be a contraction; this comment is not.
      CREATE OR REPLACE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$ BEGIN TRUNCATE scratch; END $$;
      INSERT INTO settings (k, v) VALUES ('note', 'do not RENAME this');
    `;
    assert.deepEqual(contractChanges(additive), []);
  });

  it('would have caught two contractions in the project history (0710 SET NOT NULL, 0730 RENAME of functions)', async () => {
    const byVersion = new Map((await loadMigrations()).map((m) => [m.version, m.sql]));
    assert.ok(contractChanges(byVersion.get('0710_idempotency_principal') ?? '').includes('SET NOT NULL'));
    assert.ok(contractChanges(byVersion.get('0730_api_key_budget_in_ledger') ?? '').includes('RENAME'));
  });
});
