/**
 * The ledger owns its tables (issue 21 item 2; STYLE: SQL lives with the module that owns the
 * table): no TypeScript outside core/ledger names a ledger table, so payments, agents, admin and
 * the rest reach money only through core/ledger's functions. The table names are read from the
 * migrations, so a new ledger table is covered the day it is created.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../', import.meta.url));

function filesUnder(dir: string, ext: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return e.name === 'node_modules' ? [] : filesUnder(p, ext);
    return e.name.endsWith(ext) ? [p] : [];
  });
}

/** Every `ledger_*` table some migration creates. */
function ledgerTables(): string[] {
  const names = new Set<string>();
  for (const f of filesUnder(join(root, 'core/db/migrations'), '.sql'))
    for (const m of readFileSync(f, 'utf8').matchAll(/CREATE TABLE (?:IF NOT EXISTS )?(ledger_[a-z0-9_]+)/gi))
      names.add((m[1] as string).toLowerCase());
  return [...names].sort();
}

/** `file:line` of every mention of one of `tables` in `text` (whole words only). */
export function mentions(file: string, text: string, tables: string[]): string[] {
  const word = new RegExp(`\\b(${tables.join('|')})\\b`, 'i');
  return text.split('\n').flatMap((line, i) => (word.test(line) ? [`${file}:${i + 1}`] : []));
}

describe('ledger table ownership', () => {
  const tables = ledgerTables();

  it('finds the ledger tables in the migrations', () => {
    for (const t of ['ledger_accounts', 'ledger_balances', 'ledger_entries', 'ledger_holds'])
      assert.ok(tables.includes(t), t);
  });

  it('flags a mention of a ledger table, and not of a ledger function', () => {
    const text = "const a = 1;\nq.query('SELECT id FROM LEDGER_ACCOUNTS');\n// runs ledger_apply";
    assert.deepEqual(mentions('x.ts', text, tables), ['x.ts:2']);
  });

  it('no TypeScript outside core/ledger names a ledger table', () => {
    const found = ['core', 'shared', 'edge', 'bin', 'policy']
      .flatMap((d) => filesUnder(join(root, d), '.ts'))
      .filter((f) => !relative(root, f).startsWith('core/ledger/'))
      .flatMap((f) => mentions(relative(root, f), readFileSync(f, 'utf8'), tables));
    assert.deepEqual(found, [], 'these lines should call core/ledger instead');
  });
});
